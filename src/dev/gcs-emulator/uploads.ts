import { badRequest, EmulatorError } from './errors.js';
import { writableFieldsFrom } from './fields.js';
import { json, parseJsonBody, type Reply, type RequestContext } from './http.js';
import { parseMultipart } from './multipart.js';
import { parsePreconditions } from './preconditions.js';
import { objectResource } from './resource.js';
import { crc32cBase64, md5Base64 } from './hashes.js';
import type { EmulatorStore, UploadSession, WritableFields } from './store.js';

/** GCS persists a non-final resumable chunk only in whole multiples of 256 KiB. */
const CHUNK_GRANULE = 256 * 1024;

/**
 * X-Goog-Hash on an upload ("crc32c=...,md5=...") is checked against the received bytes, as
 * GCS does: a mismatch is 400 and no object is created.
 */
function checkClientHash(ctx: RequestContext, data: Buffer): void {
  const h = ctx.headers['x-goog-hash'];
  if (typeof h !== 'string') return;
  for (const pair of h.split(',')) {
    const i = pair.indexOf('=');
    const kind = pair.slice(0, i).trim();
    const value = pair.slice(i + 1).trim();
    if (kind === 'crc32c' && value !== crc32cBase64(data)) throw badRequest('Provided CRC32C "' + value + '" doesn\'t match calculated CRC32C.');
    if (kind === 'md5' && value !== md5Base64(data)) throw badRequest('Provided MD5 hash "' + value + '" doesn\'t match calculated MD5 hash.');
  }
}

function checkBodyHashes(fields: Record<string, unknown>, data: Buffer): void {
  if (typeof fields.crc32c === 'string' && fields.crc32c !== crc32cBase64(data)) throw badRequest('Provided CRC32C doesn\'t match calculated CRC32C.');
  if (typeof fields.md5Hash === 'string' && fields.md5Hash !== md5Base64(data)) throw badRequest('Provided MD5 hash doesn\'t match calculated MD5 hash.');
}

/** POST /upload/storage/v1/b/{bucket}/o?uploadType=media|multipart|resumable */
export function startUpload(store: EmulatorStore, ctx: RequestContext, bucket: string): Reply {
  store.bucket(bucket);
  const type = ctx.query.get('uploadType');
  const pre = parsePreconditions(ctx.query);
  if (type === 'media') {
    const name = ctx.query.get('name');
    if (!name) throw badRequest('Required parameter: name', 'required');
    checkClientHash(ctx, ctx.body);
    const contentType = ctx.headers['content-type'];
    const o = store.insert(bucket, name, ctx.body, contentType ? { contentType } : {}, pre);
    return json(objectResource(o, ctx.baseUrl));
  }
  if (type === 'multipart') {
    const parts = parseMultipart(ctx.body, String(ctx.headers['content-type'] ?? ''));
    if (parts.length !== 2) throw badRequest(`multipart upload needs 2 parts, got ${parts.length}`);
    const [metaPart, mediaPart] = parts as [typeof parts[0], typeof parts[0]];
    let meta: Record<string, unknown>;
    try {
      meta = JSON.parse(metaPart.body.toString('utf8') || '{}') as Record<string, unknown>;
    } catch {
      throw new EmulatorError(400, 'parseError', 'Parse Error');
    }
    const name = (typeof meta.name === 'string' && meta.name) || ctx.query.get('name');
    if (!name) throw badRequest('Required parameter: name', 'required');
    checkBodyHashes(meta, mediaPart.body);
    checkClientHash(ctx, mediaPart.body);
    const fields = writableFieldsFrom(meta);
    if (!fields.contentType && mediaPart.headers['content-type']) fields.contentType = mediaPart.headers['content-type'];
    const o = store.insert(bucket, name, mediaPart.body, fields, pre);
    return json(objectResource(o, ctx.baseUrl));
  }
  if (type === 'resumable') {
    const meta = parseJsonBody(ctx);
    const name = (typeof meta.name === 'string' && meta.name) || ctx.query.get('name');
    if (!name) throw badRequest('Required parameter: name', 'required');
    const fields: WritableFields = writableFieldsFrom(meta);
    const xType = ctx.headers['x-upload-content-type'];
    if (!fields.contentType && typeof xType === 'string') fields.contentType = xType;
    const s = store.newUploadSession(bucket, name, fields, pre);
    const location = `${ctx.baseUrl}/upload/storage/v1/b/${encodeURIComponent(bucket)}/o?uploadType=resumable&name=${encodeURIComponent(name)}&upload_id=${s.id}`;
    return { status: 200, headers: { Location: location, 'X-GUploader-UploadID': s.id }, raw: Buffer.alloc(0) };
  }
  throw badRequest(`Invalid uploadType: ${type}`);
}

interface ContentRange {
  /** first byte of this request's body; undefined for a status query ("bytes *\/...") */
  start?: number;
  /** total object size if the client states it */
  total?: number;
}

/** "bytes a-b/T", "bytes a-b/*", "bytes a-*\/T" (rest of the object), "bytes *\/T", "bytes *\/*". */
function parseContentRange(h: string | undefined, bodyLength: number): ContentRange {
  if (h === undefined) return { start: 0, total: bodyLength };
  const m = /^bytes (?:(\d+)-(\d+|\*)|\*)\/(\d+|\*)$/.exec(h.trim());
  if (!m) throw badRequest(`Invalid Content-Range: ${h}`);
  const r: ContentRange = {};
  if (m[1] !== undefined) r.start = Number(m[1]);
  if (m[3] !== '*') r.total = Number(m[3]);
  // "a-*/*": the body is the rest of the object, so its end is the end of the object.
  if (m[1] !== undefined && m[2] === '*' && r.total === undefined) r.total = Number(m[1]) + bodyLength;
  if (m[1] !== undefined && m[2] !== '*' && Number(m[2]) - Number(m[1]) + 1 !== bodyLength) {
    throw badRequest(`Content-Range ${h} does not match a body of ${bodyLength} bytes`);
  }
  return r;
}

function incomplete(s: UploadSession): Reply {
  // 308 "Resume Incomplete": Range names the bytes persisted; no Range header when none are.
  const headers: Record<string, string> = {};
  if (s.committed > 0) headers.Range = `bytes=0-${s.committed - 1}`;
  return { status: 308, headers, raw: Buffer.alloc(0) };
}

/**
 * PUT to a resumable session URI. Chunks must continue where the persisted bytes end (bytes
 * already persisted are skipped, as GCS does for a resent chunk; a gap is an error). The upload
 * completes when the persisted size reaches the declared total; then the object is created, with
 * the session's preconditions checked again (412 if another writer got there first).
 */
export function putUploadChunk(store: EmulatorStore, ctx: RequestContext): Reply {
  const id = ctx.query.get('upload_id');
  const s = id ? store.uploads.get(id) : undefined;
  if (!s) throw new EmulatorError(404, 'notFound', 'No such upload session (it expired, was cancelled, or never existed).');
  if (s.result) return json(objectResource(s.result, ctx.baseUrl));
  const cr = parseContentRange(ctx.headers['content-range'] as string | undefined, ctx.body.length);
  if (cr.start !== undefined) {
    if (cr.start > s.committed) {
      throw badRequest(`Invalid request. There were ${cr.start - s.committed} byte(s) (or more) missing.`);
    }
    let data = ctx.body.subarray(s.committed - cr.start);
    const final = cr.total !== undefined && cr.start + ctx.body.length >= cr.total;
    if (!final) {
      const keep = Math.floor((s.committed + data.length) / CHUNK_GRANULE) * CHUNK_GRANULE - s.committed;
      data = data.subarray(0, Math.max(0, keep));
    }
    if (data.length > 0) {
      s.chunks.push(Buffer.from(data));
      s.committed += data.length;
    }
  }
  if (cr.total !== undefined && s.committed > cr.total) throw badRequest('Upload is larger than the declared total size.');
  if (cr.total === undefined || s.committed < cr.total) return incomplete(s);
  const data = Buffer.concat(s.chunks);
  checkClientHash(ctx, data);
  try {
    s.result = store.insert(s.bucket, s.name, data, s.fields, s.preconditions);
  } catch (err) {
    // A failed completion ends the session, as in GCS.
    store.uploads.delete(s.id);
    throw err;
  }
  s.chunks = [];
  return json(objectResource(s.result, ctx.baseUrl));
}

/** DELETE on a session URI cancels it: GCS answers 499. */
export function cancelUpload(store: EmulatorStore, ctx: RequestContext): Reply {
  const id = ctx.query.get('upload_id');
  if (!id || !store.uploads.delete(id)) throw new EmulatorError(404, 'notFound', 'No such upload session.');
  return { status: 499 };
}
