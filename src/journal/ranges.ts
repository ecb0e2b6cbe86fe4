import { type BackendFile, VfsError } from '../core/index.js';
import type { BlobStore } from './blobs.js';
import type { Range } from './record.js';

/**
 * Range before-images: the old bytes of the parts of a large file a change destroys, kept as
 * extent-sized blobs, holes as nothing at all. Used by the journal stage (write sessions keep
 * each aligned extent once; unlink/truncate of a large file keeps its data extents) and by
 * rollback, which writes them back.
 */

/**
 * Where data lies in [from, to) of `file`, as runs [start, end): the store's SEEK_DATA /
 * SEEK_HOLE where it has them, else all of it. Holes cost nothing to keep (a sparse file's
 * before-image is its data).
 */
export async function dataRuns(file: BackendFile, from: number, to: number): Promise<[number, number][]> {
  if (from >= to) return [];
  if (!file.seekData) return [[from, to]];
  const runs: [number, number][] = [];
  let pos = from;
  try {
    while (pos < to) {
      const start = await seekOrEnd(file, pos, 'data', to);
      if (start >= to) break;
      const end = Math.min(await seekOrEnd(file, start, 'hole', to), to);
      runs.push([start, end]);
      pos = end;
    }
  } catch (err) {
    if (cannotSeek(err)) return [[from, to]];
    throw err;
  }
  return runs;
}

/**
 * Where the first data at or after `pos` begins (SEEK_DATA alone, no SEEK_HOLE: on tmpfs each
 * seek scans the page cache to what it finds), `end` when there is none; `pos` itself where the
 * store cannot tell.
 */
export async function nextData(file: BackendFile, pos: number, end: number): Promise<number> {
  if (!file.seekData) return pos;
  try {
    return await seekOrEnd(file, pos, 'data', end);
  } catch (err) {
    if (cannotSeek(err)) return pos;
    throw err;
  }
}

/** the store has no SEEK_DATA/SEEK_HOLE for this file: all of it counts as data */
function cannotSeek(err: unknown): boolean {
  return err instanceof VfsError && (err.code === 'EOPNOTSUPP' || err.code === 'ENOSYS' || err.code === 'EINVAL');
}

async function seekOrEnd(file: BackendFile, pos: number, what: 'data' | 'hole', end: number): Promise<number> {
  try {
    return await (file.seekData as NonNullable<BackendFile['seekData']>)(pos, what);
  } catch (err) {
    if (err instanceof VfsError && err.code === 'ENXIO') return end; // no data past pos
    throw err;
  }
}

/** Keep bytes [offset, offset + length) of `file` as a blob; returns its hash. */
export async function keepBytes(blobs: BlobStore, file: BackendFile, offset: number, length: number, what: string): Promise<string> {
  const buf = Buffer.allocUnsafe(length);
  let done = 0;
  while (done < length) {
    const n = await file.read(buf.subarray(done), length - done, offset + done);
    if (n === 0) throw new VfsError('EIO', `journal: ${what} shrank while its before-image was taken`);
    done += n;
  }
  blobs.capturedBytes += length;
  return blobs.putBuffer(buf);
}

/**
 * The data of [from, to) as ranges cut at `extent` boundaries (each one blob, so identical
 * extents are kept once and no blob is bigger than an extent): a node state's `ranges`.
 */
export async function keepData(blobs: BlobStore, file: BackendFile, from: number, to: number, extent: number, what: string): Promise<Required<Range>[]> {
  const out: Required<Range>[] = [];
  for (const [start, end] of await dataRuns(file, from, to)) {
    for (let a = start; a < end; ) {
      const b = Math.min(end, (Math.floor(a / extent) + 1) * extent);
      out.push({ offset: a, length: b - a, blob: await keepBytes(blobs, file, a, b - a, what) });
      a = b;
    }
  }
  return out;
}

/**
 * How to write `ranges` back over a file of `size` bytes: the lowest offset from which the
 * ranges cover every byte up to `size` (a truncate there and back to `size` restores that
 * span's holes at once), and the hole ranges below it, which must be zeroed one by one.
 */
export function restorePlan(ranges: readonly Range[], size: number): { cutAt: number; holesBelow: Range[] } {
  const sorted = [...ranges].sort((a, b) => a.offset - b.offset);
  let cutAt = size;
  for (let i = sorted.length - 1; i >= 0; i--) {
    const r = sorted[i] as Range;
    if (r.offset + r.length >= cutAt && r.offset < cutAt) cutAt = r.offset;
  }
  return { cutAt, holesBelow: sorted.filter((r) => r.blob === undefined && r.offset < cutAt) };
}
