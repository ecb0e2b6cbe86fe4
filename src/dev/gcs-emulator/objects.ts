import { badRequest, EmulatorError, noSuchObject } from './errors.js';
import { applyPatch, applyUpdate, writableFieldsFrom } from './fields.js';
import { json, parseJsonBody, type Reply, type RequestContext } from './http.js';
import { listObjects } from './listing.js';
import { mediaReply } from './download.js';
import { checkPreconditions, parsePreconditions } from './preconditions.js';
import { objectResource } from './resource.js';
import { pickWritable, type EmulatorStore, type StoredObject, type WritableFields } from './store.js';

function generationParam(q: URLSearchParams, key = 'generation'): bigint | undefined {
  const v = q.get(key);
  if (v === null || v === '') return undefined;
  if (!/^\d+$/.test(v)) throw badRequest(`Invalid value for ${key}: ${v}`);
  return BigInt(v);
}

/** objects.get: metadata, or the bytes with alt=media. */
export function getObject(store: EmulatorStore, ctx: RequestContext, bucket: string, name: string): Reply {
  const o = store.object(bucket, name, generationParam(ctx.query));
  checkPreconditions(o, parsePreconditions(ctx.query), 'read');
  if (ctx.query.get('alt') === 'media') {
    const range = ctx.headers.range;
    const accept = ctx.headers['accept-encoding'];
    return mediaReply(o, typeof range === 'string' ? range : undefined, typeof accept === 'string' ? accept : '');
  }
  return json(objectResource(o, ctx.baseUrl));
}

export function listObjectsReply(store: EmulatorStore, ctx: RequestContext, bucket: string): Reply {
  const q = ctx.query;
  const max = q.get('maxResults');
  const maxResults = max === null || max === '' ? 1000 : Number(max);
  if (!Number.isInteger(maxResults) || maxResults < 0) throw badRequest(`Invalid value for maxResults: ${max}`);
  const page = listObjects(store.bucket(bucket), {
    prefix: q.get('prefix') ?? '',
    delimiter: q.get('delimiter') ?? '',
    // GCS treats 0 and anything above 1000 as 1000.
    maxResults: maxResults === 0 ? 1000 : Math.min(maxResults, 1000),
    pageToken: q.get('pageToken') || undefined,
    includeTrailingDelimiter: q.get('includeTrailingDelimiter') === 'true',
    startOffset: q.get('startOffset') ?? undefined,
    endOffset: q.get('endOffset') ?? undefined,
  });
  const body: Record<string, unknown> = { kind: 'storage#objects' };
  if (page.nextPageToken) body.nextPageToken = page.nextPageToken;
  if (page.prefixes.length > 0) body.prefixes = page.prefixes;
  if (page.items.length > 0) body.items = page.items.map((o) => objectResource(o, ctx.baseUrl));
  return json(body);
}

/** objects.patch (merge) and objects.update (replace): metadata only; metageneration + 1. */
export function changeMetadata(store: EmulatorStore, ctx: RequestContext, bucket: string, name: string, mode: 'patch' | 'update'): Reply {
  const body = parseJsonBody(ctx);
  const o = store.object(bucket, name, generationParam(ctx.query));
  checkPreconditions(o, parsePreconditions(ctx.query), 'write');
  store.updateMetadata(o, (obj) => (mode === 'patch' ? applyPatch(obj, body) : applyUpdate(obj, body)));
  return json(objectResource(o, ctx.baseUrl));
}

export function deleteObject(store: EmulatorStore, ctx: RequestContext, bucket: string, name: string): Reply {
  store.remove(bucket, name, parsePreconditions(ctx.query), generationParam(ctx.query));
  return { status: 204 };
}

/**
 * The destination of copy/rewrite gets the source's data and fields; fields present in the
 * request body override the source's one by one (a `metadata` map in the body replaces the
 * source's custom metadata as a whole).
 */
function copyFields(src: StoredObject, body: Record<string, unknown>): WritableFields {
  return { ...pickWritable(src), metadata: { ...src.metadata }, ...writableFieldsFrom(body) };
}

function sourceFor(store: EmulatorStore, ctx: RequestContext, bucket: string, name: string): StoredObject {
  const src = store.object(bucket, name, generationParam(ctx.query, 'sourceGeneration'));
  checkPreconditions(src, parsePreconditions(ctx.query, 'Source'), 'write');
  return src;
}

/** objects.copy: one request, returns the new object. */
export function copyObject(store: EmulatorStore, ctx: RequestContext, src: [string, string], dst: [string, string]): Reply {
  const body = parseJsonBody(ctx);
  const s = sourceFor(store, ctx, src[0], src[1]);
  store.bucket(dst[0]);
  const o = store.insert(dst[0], dst[1], s.data, copyFields(s, body), parsePreconditions(ctx.query), s.componentCount ? { componentCount: s.componentCount } : undefined);
  return json(objectResource(o, ctx.baseUrl));
}

interface RewriteToken {
  g: string;
  done: number;
}

/**
 * objects.rewrite. With `maxBytesRewrittenPerCall` below the object size the work is split over
 * several calls linked by `rewriteToken`, as GCS does for large or cross-location rewrites; the
 * destination appears only when the last call reports done. The source must stay the same
 * generation throughout (a changed source makes the token invalid: 404 here).
 */
export function rewriteObject(store: EmulatorStore, ctx: RequestContext, src: [string, string], dst: [string, string]): Reply {
  const body = parseJsonBody(ctx);
  const s = sourceFor(store, ctx, src[0], src[1]);
  store.bucket(dst[0]);
  const size = s.data.length;
  let done = 0;
  const token = ctx.query.get('rewriteToken');
  if (token) {
    let t: RewriteToken;
    try {
      t = JSON.parse(Buffer.from(token, 'base64url').toString()) as RewriteToken;
    } catch {
      throw badRequest('Invalid rewrite token.');
    }
    if (t.g !== s.generation.toString()) throw noSuchObject(src[0], src[1]);
    done = t.done;
  }
  const perCall = ctx.query.get('maxBytesRewrittenPerCall');
  const step = perCall ? Number(perCall) : Infinity;
  if (!(step > 0)) throw badRequest(`Invalid value for maxBytesRewrittenPerCall: ${perCall}`);
  const reached = Math.min(size, done + step);
  if (reached < size) {
    const next: RewriteToken = { g: s.generation.toString(), done: reached };
    return json({
      kind: 'storage#rewriteResponse',
      totalBytesRewritten: String(reached),
      objectSize: String(size),
      done: false,
      rewriteToken: Buffer.from(JSON.stringify(next)).toString('base64url'),
    });
  }
  const o = store.insert(dst[0], dst[1], s.data, copyFields(s, body), parsePreconditions(ctx.query), s.componentCount ? { componentCount: s.componentCount } : undefined);
  return json({ kind: 'storage#rewriteResponse', totalBytesRewritten: String(size), objectSize: String(size), done: true, resource: objectResource(o, ctx.baseUrl) });
}

interface ComposeSource {
  name?: unknown;
  generation?: unknown;
  objectPreconditions?: { ifGenerationMatch?: unknown };
}

/** objects.compose: 1..32 sources of the same bucket, concatenated; no MD5 for the result. */
export function composeObject(store: EmulatorStore, ctx: RequestContext, bucket: string, name: string): Reply {
  const body = parseJsonBody(ctx);
  const sources = body.sourceObjects;
  if (!Array.isArray(sources) || sources.length === 0) throw badRequest('Required sourceObjects', 'required');
  if (sources.length > 32) throw badRequest('The number of source components provided (' + sources.length + ') exceeds the maximum (32)');
  let components = 0;
  const parts: Buffer[] = [];
  for (const raw of sources as ComposeSource[]) {
    if (typeof raw?.name !== 'string') throw badRequest('Required sourceObjects.name', 'required');
    const gen = raw.generation === undefined ? undefined : BigInt(String(raw.generation));
    const o = store.object(bucket, raw.name, gen);
    const want = raw.objectPreconditions?.ifGenerationMatch;
    if (want !== undefined && BigInt(String(want)) !== o.generation) {
      throw new EmulatorError(412, 'conditionNotMet', `At least one of the pre-conditions you specified did not hold. (source ${raw.name})`);
    }
    components += o.componentCount ?? 1;
    parts.push(o.data);
  }
  if (components > 1024) throw badRequest('The composite object would have too many components (max 1024).');
  const dest = body.destination && typeof body.destination === 'object' ? (body.destination as Record<string, unknown>) : {};
  const o = store.insert(bucket, name, Buffer.concat(parts), writableFieldsFrom(dest), parsePreconditions(ctx.query), { componentCount: components });
  return json(objectResource(o, ctx.baseUrl));
}
