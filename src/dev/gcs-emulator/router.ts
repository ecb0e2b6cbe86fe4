import { createBucket, deleteBucket, getBucket, listBuckets } from './buckets.js';
import { EmulatorError } from './errors.js';
import type { Reply, RequestContext } from './http.js';
import { changeMetadata, composeObject, copyObject, deleteObject, getObject, listObjectsReply, rewriteObject } from './objects.js';
import type { EmulatorStore } from './store.js';
import { cancelUpload, putUploadChunk, startUpload } from './uploads.js';

const notFound = (ctx: RequestContext) => new EmulatorError(404, 'notFound', `Not Found: ${ctx.method} /${ctx.segments.join('/')}`);
const badMethod = (ctx: RequestContext) => new EmulatorError(405, 'methodNotAllowed', `Method ${ctx.method} not allowed here`);

/** What follows /b/{bucket}/o/: an object name, possibly with a compose or copy suffix. */
type ObjectPath =
  | { kind: 'object'; name: string }
  | { kind: 'compose'; name: string }
  | { kind: 'copyTo' | 'rewriteTo'; name: string; dstBucket: string; dstName: string };

function objectPath(rest: string[]): ObjectPath {
  const n = rest.length;
  // The client percent-encodes '/' in names, so a name is one segment; joining the rest keeps
  // names that arrive with literal slashes working too.
  if (n >= 6 && (rest[n - 5] === 'copyTo' || rest[n - 5] === 'rewriteTo') && rest[n - 4] === 'b' && rest[n - 2] === 'o') {
    return { kind: rest[n - 5] as 'copyTo' | 'rewriteTo', name: rest.slice(0, n - 5).join('/'), dstBucket: rest[n - 3] as string, dstName: rest[n - 1] as string };
  }
  if (n >= 2 && rest[n - 1] === 'compose') return { kind: 'compose', name: rest.slice(0, n - 1).join('/') };
  return { kind: 'object', name: rest.join('/') };
}

/** Dispatch a JSON API request (everything except the admin endpoints) to its handler. */
export function route(store: EmulatorStore, ctx: RequestContext): Reply {
  const s = ctx.segments;
  const m = ctx.method;
  if (s[0] === 'storage' && s[1] === 'v1' && s[2] === 'b') {
    if (s.length === 3) {
      if (m === 'GET') return listBuckets(store, ctx);
      if (m === 'POST') return createBucket(store, ctx);
      throw badMethod(ctx);
    }
    const bucket = s[3] as string;
    if (s.length === 4) {
      if (m === 'GET') return getBucket(store, ctx, bucket);
      if (m === 'DELETE') return deleteBucket(store, bucket);
      throw badMethod(ctx);
    }
    if (s[4] !== 'o') throw notFound(ctx);
    if (s.length === 5) {
      if (m === 'GET') return listObjectsReply(store, ctx, bucket);
      throw badMethod(ctx);
    }
    const p = objectPath(s.slice(5));
    if (p.name === '') throw notFound(ctx);
    switch (p.kind) {
      case 'compose':
        if (m === 'POST') return composeObject(store, ctx, bucket, p.name);
        throw badMethod(ctx);
      case 'copyTo':
        if (m === 'POST') return copyObject(store, ctx, [bucket, p.name], [p.dstBucket, p.dstName]);
        throw badMethod(ctx);
      case 'rewriteTo':
        if (m === 'POST') return rewriteObject(store, ctx, [bucket, p.name], [p.dstBucket, p.dstName]);
        throw badMethod(ctx);
      case 'object':
        if (m === 'GET') return getObject(store, ctx, bucket, p.name);
        if (m === 'PATCH') return changeMetadata(store, ctx, bucket, p.name, 'patch');
        if (m === 'PUT') return changeMetadata(store, ctx, bucket, p.name, 'update');
        if (m === 'DELETE') return deleteObject(store, ctx, bucket, p.name);
        throw badMethod(ctx);
    }
  }
  if (s[0] === 'upload' && s[1] === 'storage' && s[2] === 'v1' && s[3] === 'b' && s[5] === 'o' && s.length === 6) {
    const bucket = s[4] as string;
    if (m === 'POST') return startUpload(store, ctx, bucket);
    if (m === 'PUT') return putUploadChunk(store, ctx);
    if (m === 'DELETE') return cancelUpload(store, ctx);
    throw badMethod(ctx);
  }
  if (s[0] === 'download' && s[1] === 'storage' && s[2] === 'v1' && s[3] === 'b' && s[5] === 'o' && s.length >= 7) {
    if (m !== 'GET') throw badMethod(ctx);
    ctx.query.set('alt', 'media');
    return getObject(store, ctx, s[4] as string, s.slice(6).join('/'));
  }
  throw notFound(ctx);
}
