import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { type Backend, VfsError } from '../core/index.js';
import { BLOB_REF, keptByBackend, SHA256_HEX } from './record.js';

/** Captures at most this big are read and written in one go on the request path. */
const SMALL_CAPTURE_BYTES = 1 << 20;
const CHUNK = 1 << 20;
/** blob fsyncs in flight at once (bounded: a big truncate can leave thousands to sync) */
const SYNC_PARALLEL = 8;

async function inParallel<T>(items: readonly T[], width: number, each: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await each(items[next++] as T);
  };
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, worker));
}

export interface BlobInfo {
  hash: string;
  path: string;
  size: number;
  mtimeMs: number;
}

/**
 * Content-addressed store of before-images: blobs/ab/cdef... named by the sha256 of the bytes, so
 * identical content is kept once. A blob is complete before any record names it (it is written
 * under blobs/tmp/ and renamed into place), so a crash can leave only stray temp files, which
 * the next writer removes.
 */
/** A copy of the store elsewhere (the bucket of a GCS workspace, journal/bucket-mirror.ts). */
export interface BlobMirror {
  /** a new blob is in place here (to be uploaded) */
  committed(hash: string): void;
  /** fetch a blob this store lacks into `dest` */
  fetch(hash: string, dest: string): Promise<void>;
}

export class BlobStore {
  readonly dir: string;
  private readonly tmpDir: string;
  private unsynced = new Set<string>();
  private tmpCounter = 0;
  mirror: BlobMirror | null = null;

  constructor(dir: string) {
    this.dir = dir;
    this.tmpDir = path.join(dir, 'tmp');
  }

  /** Create the directories and drop captures a crash interrupted. Writers only. */
  prepare(): void {
    fs.mkdirSync(this.tmpDir, { recursive: true, mode: 0o700 });
    for (const n of fs.readdirSync(this.tmpDir)) fs.rmSync(path.join(this.tmpDir, n), { force: true });
  }

  /** Where a blob is (or would be) here; one the backend kept is here only once fetched. */
  pathOf(hash: string): string {
    if (!BLOB_REF.test(hash)) throw new Error(`not a blob reference: ${hash}`);
    if (keptByBackend(hash)) return path.join(this.dir, 'kept', hash);
    return path.join(this.dir, hash.slice(0, 2), hash.slice(2));
  }

  has(hash: string): boolean {
    return fs.existsSync(this.pathOf(hash));
  }

  private tmpName(): string {
    return path.join(this.tmpDir, `${process.pid}-${Date.now()}-${++this.tmpCounter}`);
  }

  /** Move a finished temp file to its content address (or drop it if that content is kept already). */
  private commit(tmp: string, hash: string): string {
    const dest = this.pathOf(hash);
    if (fs.existsSync(dest)) {
      fs.rmSync(tmp, { force: true });
      return this.refresh(hash);
    }
    fs.mkdirSync(path.dirname(dest), { recursive: true, mode: 0o700 });
    fs.renameSync(tmp, dest);
    this.unsynced.add(dest);
    this.mirror?.committed(hash);
    return hash;
  }

  /**
   * Make sure the blobs are here, fetching missing ones from the mirror (a host that did not
   * write them); each is checked against its hash before it is kept. Throws if one cannot be had.
   */
  async ensure(hashes: Iterable<string>): Promise<void> {
    for (const hash of new Set(hashes)) {
      if (this.has(hash)) continue;
      if (!this.mirror) throw new VfsError('EIO', `journal: blob ${hash} is missing`);
      fs.mkdirSync(this.tmpDir, { recursive: true, mode: 0o700 });
      const tmp = this.tmpName();
      try {
        await this.mirror.fetch(hash, tmp);
        // (a blob the backend kept has no sha256 to check; its download checked the crc32c)
        const got = keptByBackend(hash) ? hash : await hashFile(tmp);
        if (got !== hash) throw new VfsError('EIO', `journal: blob ${hash} fetched from the bucket has the hash ${got}`);
        const dest = this.pathOf(hash);
        fs.mkdirSync(path.dirname(dest), { recursive: true, mode: 0o700 });
        fs.renameSync(tmp, dest); // not committed(): it came from the mirror
      } catch (err) {
        fs.rmSync(tmp, { force: true });
        if (err instanceof VfsError) throw err;
        throw new VfsError('EIO', `journal: blob ${hash} is missing here and could not be fetched: ${(err as Error).message}`);
      }
    }
  }

  /**
   * Refresh the age of a kept blob: gc only removes unreferenced blobs older than the retention,
   * and this one is about to be referenced again.
   */
  private refresh(hash: string): string {
    const now = new Date();
    fs.utimesSync(this.pathOf(hash), now, now);
    return hash;
  }

  putBuffer(data: Buffer): string {
    const hash = crypto.createHash('sha256').update(data).digest('hex');
    if (fs.existsSync(this.pathOf(hash))) return this.refresh(hash);
    const tmp = this.tmpName();
    fs.writeFileSync(tmp, data, { mode: 0o600 });
    return this.commit(tmp, hash);
  }

  /**
   * Keep bytes [0, size) of `file` in the backend as a blob; returns its hash. Goes through the
   * Backend so any backend works; a backend that can copy cheaply (reflink) does the copy.
   */
  async capture(backend: Backend, file: string, size: number): Promise<string> {
    try {
      const hash = await this.captureBytes(backend, file, size);
      this.capturedBytes += size;
      return hash;
    } catch (err) {
      throw beforeImageError(err, file);
    }
  }

  /** bytes of before-images taken by capture() since this store was opened (metrics) */
  capturedBytes = 0;

  private async captureBytes(backend: Backend, file: string, size: number): Promise<string> {
    {
      if (backend.keepCopy) {
        // the store keeps it itself (GCS server-side copy): no byte through this host
        const kept = await backend.keepCopy(file, size);
        if (kept !== null) return kept;
      }
      if (size <= SMALL_CAPTURE_BYTES) return this.putBuffer(await readRange(backend, file, size));
      const tmp = this.tmpName();
      try {
        if (backend.copyOut) {
          await backend.copyOut(file, tmp);
          const st = await fs.promises.stat(tmp);
          if (st.size < size) throw new VfsError('EIO', `${file} shrank while its before-image was taken`);
          if (st.size > size) await fs.promises.truncate(tmp, size);
          return this.commit(tmp, await hashFile(tmp));
        }
        return this.commit(tmp, await streamToFile(backend, file, size, tmp));
      } catch (err) {
        await fs.promises.rm(tmp, { force: true });
        throw err;
      }
    }
  }

  read(hash: string): Buffer {
    return fs.readFileSync(this.pathOf(hash));
  }

  /** Read a blob in chunks (restores of big files do not hold them in memory). */
  async *chunks(hash: string): AsyncGenerator<Buffer> {
    if (this.mirror) await this.ensure([hash]);
    const fh = await fs.promises.open(this.pathOf(hash), 'r');
    try {
      const buf = Buffer.allocUnsafe(CHUNK);
      for (;;) {
        const { bytesRead } = await fh.read(buf, 0, CHUNK, null);
        if (bytesRead === 0) return;
        yield Buffer.from(buf.subarray(0, bytesRead));
      }
    } finally {
      await fh.close();
    }
  }

  /**
   * fsync blobs written since the last call (before the journal that names them is synced).
   * A few at a time: on ext4 fsyncs that overlap share one journal commit, and a commit per
   * blob (an extent per database page a transaction touched) was most of a commit's cost.
   */
  async syncPending(): Promise<void> {
    if (this.unsynced.size === 0) return;
    const files = [...this.unsynced];
    this.unsynced = new Set();
    const dirs = new Set<string>();
    await inParallel(files, SYNC_PARALLEL, async (f) => {
      let fh: fs.promises.FileHandle;
      try {
        fh = await fs.promises.open(f, 'r');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return; // gc dropped it meanwhile
        throw err;
      }
      try {
        await fh.sync();
      } finally {
        await fh.close();
      }
      dirs.add(path.dirname(f));
    });
    await inParallel([...dirs], SYNC_PARALLEL, async (d) => {
      const fh = await fs.promises.open(d, 'r');
      try {
        await fh.sync();
      } finally {
        await fh.close();
      }
    });
  }

  *list(): Generator<BlobInfo> {
    let top: string[];
    try {
      top = fs.readdirSync(this.dir);
    } catch {
      return;
    }
    for (const d of top) {
      if (!/^[0-9a-f]{2}$/.test(d)) continue;
      for (const n of fs.readdirSync(path.join(this.dir, d))) {
        const hash = d + n;
        if (!SHA256_HEX.test(hash)) continue;
        const p = path.join(this.dir, d, n);
        const st = fs.statSync(p);
        yield { hash, path: p, size: st.size, mtimeMs: st.mtimeMs };
      }
    }
  }

  remove(hash: string): void {
    fs.rmSync(this.pathOf(hash), { force: true });
  }
}

export async function hashFile(file: string): Promise<string> {
  const h = crypto.createHash('sha256');
  const fh = await fs.promises.open(file, 'r');
  try {
    const buf = Buffer.allocUnsafe(CHUNK);
    for (;;) {
      const { bytesRead } = await fh.read(buf, 0, CHUNK, null);
      if (bytesRead === 0) break;
      h.update(buf.subarray(0, bytesRead));
    }
  } finally {
    await fh.close();
  }
  return h.digest('hex');
}

async function readRange(backend: Backend, file: string, size: number): Promise<Buffer> {
  const f = await backend.open(file, { write: false });
  try {
    const buf = Buffer.allocUnsafe(size);
    let off = 0;
    while (off < size) {
      const n = await f.read(buf.subarray(off), size - off, off);
      if (n === 0) throw new VfsError('EIO', `${file} shrank while its before-image was taken`);
      off += n;
    }
    return buf;
  } finally {
    await f.close();
  }
}

async function streamToFile(backend: Backend, file: string, size: number, dest: string): Promise<string> {
  const h = crypto.createHash('sha256');
  const f = await backend.open(file, { write: false });
  const out = await fs.promises.open(dest, 'wx', 0o600);
  try {
    const buf = Buffer.allocUnsafe(CHUNK);
    let off = 0;
    while (off < size) {
      const n = await f.read(buf, Math.min(CHUNK, size - off), off);
      if (n === 0) throw new VfsError('EIO', `${file} shrank while its before-image was taken`);
      h.update(buf.subarray(0, n));
      await out.write(buf, 0, n, off);
      off += n;
    }
  } finally {
    await out.close();
    await f.close();
  }
  return h.digest('hex');
}

/**
 * A before-image that could not be kept, as the caller's error: ENOSPC where the state disk is
 * full (the blob's write failed so: a plain Node error, or the backend's), else EIO.
 */
export function beforeImageError(err: unknown, file: string): VfsError {
  if (err instanceof VfsError) return new VfsError(err.code === 'ENOSPC' ? 'ENOSPC' : 'EIO', `journal: keeping the before-image of ${file} failed: ${err.reason}`);
  const full = (err as NodeJS.ErrnoException).code === 'ENOSPC';
  return new VfsError(full ? 'ENOSPC' : 'EIO', `journal: keeping the before-image of ${file} failed: ${(err as Error).message}`, { cause: err, ...(full ? {} : { level: 'error' as const }) });
}
