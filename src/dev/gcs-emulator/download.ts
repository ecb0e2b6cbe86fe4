import { gunzipSync } from 'node:zlib';
import { EmulatorError } from './errors.js';
import type { Reply } from './http.js';
import type { StoredObject } from './store.js';

/**
 * Media download (alt=media). Headers follow GCS: x-goog-generation/-metageneration, x-goog-hash
 * with both checksums of the whole object (the client validates a full download against them
 * when x-goog-stored-content-encoding says the bytes are stored as sent), and for a Range request
 * 206 with Content-Range, or 416 when the range starts past the end.
 *
 * An object stored with `contentEncoding: gzip` is served as GCS serves it
 * (https://cloud.google.com/storage/docs/transcoding): to a request whose Accept-Encoding
 * includes gzip, the stored (compressed) bytes with `Content-Encoding: gzip`, a Range counting
 * in those bytes; to any other, decompressed (decompressive transcoding), whole, the Range
 * ignored. Bytes that are not gzip are served as stored.
 */
export function mediaReply(o: StoredObject, rangeHeader: string | undefined, acceptEncoding = ''): Reply {
  const size = o.data.length;
  const headers: Record<string, string | number> = {
    'Content-Type': o.contentType ?? 'application/octet-stream',
    'x-goog-generation': o.generation.toString(),
    'x-goog-metageneration': o.metageneration.toString(),
    'x-goog-stored-content-length': size,
    'x-goog-stored-content-encoding': o.contentEncoding ?? 'identity',
    'x-goog-hash': `crc32c=${o.crc32c}${o.md5Hash ? `,md5=${o.md5Hash}` : ''}`,
    'x-goog-storage-class': 'STANDARD',
    ETag: `"${o.md5Hash ?? o.crc32c}"`,
    'Last-Modified': o.updated.toUTCString(),
    'Accept-Ranges': 'bytes',
  };
  if (o.contentEncoding === 'gzip') {
    if (/\bgzip\b/i.test(acceptEncoding)) headers['Content-Encoding'] = 'gzip';
    else {
      let plain: Buffer | undefined;
      try {
        plain = gunzipSync(o.data);
      } catch {
        plain = undefined;
      }
      if (plain) return { status: 200, headers, raw: plain };
    }
  }
  const range = rangeHeader ? parseRange(rangeHeader, size) : undefined;
  if (range === undefined || size === 0) return { status: 200, headers, raw: o.data };
  if (range === 'unsatisfiable') {
    throw new EmulatorError(416, 'requestedRangeNotSatisfiable', 'The requested range cannot be satisfied.');
  }
  const [start, end] = range;
  headers['Content-Range'] = `bytes ${start}-${end}/${size}`;
  return { status: 206, headers, raw: o.data.subarray(start, end + 1) };
}

/** "bytes=a-b", "bytes=a-", "bytes=-n" (last n bytes); anything else is ignored, as HTTP says. */
export function parseRange(h: string, size: number): [number, number] | 'unsatisfiable' | undefined {
  const m = /^bytes=(\d*)-(\d*)$/.exec(h.trim());
  if (!m || (m[1] === '' && m[2] === '')) return undefined;
  if (m[1] === '') {
    const n = Number(m[2]);
    if (n === 0) return 'unsatisfiable';
    return [Math.max(0, size - n), size - 1];
  }
  const start = Number(m[1]);
  const end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
  if (start >= size) return 'unsatisfiable';
  if (end < start) return undefined;
  return [start, end];
}
