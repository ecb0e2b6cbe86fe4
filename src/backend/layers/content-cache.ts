import fs from 'node:fs';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { DEFAULTS } from '../../config/index.js';
import { pidAlive, removeFileSoon } from '../../core/index.js';
import { fdOps } from '../fd-ops.js';

export interface ContentCacheOptions {
  /** a directory of its own is made under it for this process, and removed at close */
  dir: string;
  /** bytes kept at most; the least recently used objects go first */
  maxBytes: number;
  /** objects larger than this are never kept */
  maxObjectBytes: number;
  /** put(): copies made within this many milliseconds are written in one thread-pool job (0: each at the next timer turn) */
  copyBatchMs?: number;
  /**
   * put(): this many bytes of the most recent copies are kept in memory and go to the disk only
   * when newer ones push them out (0: every copy goes to the disk at once)
   */
  memoryBytes?: number;
}

interface Entry {
  file: string;
  size: number;
}

const { contentCopyBatchMaxBytes, contentCopyBatchMaxFiles } = DEFAULTS.gcsCache;
/** what a copy in memory costs beside its bytes (its key, the cache's entry): counted, so a
 * tier of tiny files stays within its bytes too */
const ENTRY_OVERHEAD = 256;

/**
 * `data` in memory of its own: a small Buffer is often a slice of Node's shared 8 KiB pool, and
 * keeping the slice would keep the whole pool chunk (up to 80 times a 100-byte file's size).
 */
function ownMemory(data: Buffer): Buffer {
  if (data.byteOffset === 0 && data.buffer.byteLength === data.length) return data; // all of its memory
  const own = Buffer.allocUnsafeSlow(data.length);
  data.copy(own);
  return own;
}

/**
 * A local disk cache of whole objects, keyed by their version (object name + generation: a new
 * generation is a new key, so nothing is ever stale, old versions just age out). Bounded in
 * bytes with LRU eviction. Each process keeps its own directory (removed at close), so daemons
 * sharing a machine never evict each other's files under them.
 */
export class ContentCache {
  readonly dir: string;
  private readonly entries: LRUCache<string, Entry>;
  private readonly maxObjectBytes: number;
  private made = false;
  /** bumped by close(): a copy still being written then is not kept */
  private epoch = 0;
  /** copies waiting to be written together (see put) */
  private batch: { versions: string[]; files: string[]; data: Buffer[]; bytes: number } = { versions: [], files: [], data: [], bytes: 0 };
  private batchTimer: NodeJS.Timeout | undefined;
  private readonly copyBatchMs: number;
  /**
   * The latest put() copies, in memory (the upload queue's own buffers; see ownMemory). Every
   * small file a program writes comes here once its upload landed, and a file of its own for
   * each cost the disk a create (0.15-0.8 ms of kernel time on an ext4 /tmp here): in journal
   * mode 3 s of the daemon's CPU over a tar -x of 3,000 files, on the cores tar and the spool's
   * fdatasync need. A copy goes to the disk when newer ones push it out of here; most are read
   * back soon (git add hashing what tar wrote) or never.
   */
  private readonly recent: LRUCache<string, Buffer> | undefined;
  hits = 0;
  misses = 0;

  constructor(o: ContentCacheOptions) {
    this.dir = path.join(o.dir, `${process.pid}-${randomUUID().slice(0, 8)}`);
    removeOrphans(o.dir);
    this.maxObjectBytes = Math.min(o.maxObjectBytes, o.maxBytes);
    this.copyBatchMs = o.copyBatchMs ?? 0;
    this.entries = new LRUCache<string, Entry>({
      maxSize: Math.max(1, o.maxBytes),
      sizeCalculation: (e) => Math.max(1, e.size),
      // an open reader keeps its file descriptor: unlinking under it is safe
      dispose: (e) => removeFileSoon(e.file),
    });
    const memoryBytes = Math.min(o.memoryBytes ?? 0, o.maxBytes);
    this.recent =
      memoryBytes > 0
        ? new LRUCache<string, Buffer>({
            maxSize: memoryBytes,
            sizeCalculation: (b) => b.length + ENTRY_OVERHEAD,
            // pushed out by newer copies: kept on the disk; dropped (close, a disk copy made
            // meanwhile) it is just gone. After the removal (not dispose, which runs before it),
            // so the copy to the disk sees the version as not kept
            disposeAfter: (data, version, reason) => {
              if (reason === 'evict') this.writeSoon(version, data);
            },
          })
        : undefined;
  }

  /** Where `version` is kept: its bytes (a recent copy, in memory: never written into) or a local file. */
  get(version: string): { data: Buffer } | { file: string } | undefined {
    const data = this.recent?.get(version);
    const e = data ? undefined : this.entries.get(version);
    if (data || e) this.hits++;
    else this.misses++;
    return data ? { data } : e ? { file: e.file } : undefined;
  }

  /** Whether `version` is kept (without counting a hit). */
  has(version: string): boolean {
    return this.entries.has(version) || this.recent?.has(version) === true;
  }

  /** Start keeping `version` (of `size` bytes) as it is read front to back; undefined if it may not be kept. */
  fill(version: string, size: number): CacheFill | undefined {
    if (size <= 0 || size > this.maxObjectBytes || this.has(version)) return undefined;
    if (!this.mkdir()) return undefined; // a cache that cannot write is no cache, not an error
    return new CacheFill(this, version, size, path.join(this.dir, `${randomUUID()}.part`));
  }

  /**
   * Keep `data` as `version` whole (bytes this process just uploaded as that generation; the
   * caller never writes into them again).
   */
  put(version: string, data: Buffer): void {
    if (data.length <= 0 || data.length > this.maxObjectBytes || this.has(version)) return;
    if (this.recent && data.length <= this.recent.maxSize) this.recent.set(version, ownMemory(data));
    else this.writeSoon(version, data);
  }

  /** A copy to the disk, with the others of the same few milliseconds. */
  private writeSoon(version: string, data: Buffer): void {
    const ops = fdOps();
    // (an addon built before writeNewFiles existed: a checkout whose native build is older)
    if (!ops?.writeNewFiles) {
      const f = this.fill(version, data.length);
      if (f) void f.add(0, data);
      return;
    }
    // every small file a program writes comes here once its upload landed: the copies of the
    // uploads that land within copyBatchMs go to the disk in one thread-pool job (create,
    // write, close each), not three jobs per file as a CacheFill's
    if (this.has(version) || this.batch.versions.includes(version) || !this.mkdir()) return;
    const b = this.batch;
    b.versions.push(version);
    b.files.push(path.join(this.dir, `${randomUUID()}.part`));
    b.data.push(data);
    b.bytes += data.length;
    if (b.bytes >= contentCopyBatchMaxBytes || b.versions.length >= contentCopyBatchMaxFiles) this.writeBatch();
    else if (!this.batchTimer) {
      this.batchTimer = setTimeout(() => this.writeBatch(), this.copyBatchMs);
      this.batchTimer.unref();
    }
  }

  private writeBatch(): void {
    clearTimeout(this.batchTimer);
    this.batchTimer = undefined;
    const b = this.batch;
    this.batch = { versions: [], files: [], data: [], bytes: 0 };
    const ops = fdOps();
    if (!b.versions.length || !ops?.writeNewFiles) return;
    const epoch = this.epoch;
    ops.writeNewFiles(b.files, b.data, 0o600).then(
      (errs) => {
        for (let i = 0; i < b.files.length; i++) {
          if (errs[i] !== 0) continue; // a cache that cannot write is no cache, not an error (the job removed what it made)
          if (epoch === this.epoch) this.commit(b.versions[i] as string, b.files[i] as string, (b.data[i] as Buffer).length);
          else removeFileSoon(b.files[i] as string);
        }
      },
      () => undefined,
    );
  }

  private mkdir(): boolean {
    try {
      if (!this.made) fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 }); // made on first use: commands that only list make none
      this.made = true;
      return true;
    } catch {
      return false;
    }
  }

  /** @internal CacheFill hands over a complete file. */
  commit(version: string, file: string, size: number): void {
    if (this.entries.has(version)) {
      removeFileSoon(file);
      return;
    }
    this.recent?.delete(version);
    this.entries.set(version, { file, size });
  }

  close(): void {
    this.epoch++;
    clearTimeout(this.batchTimer);
    this.batchTimer = undefined;
    this.batch = { versions: [], files: [], data: [], bytes: 0 };
    this.recent?.clear();
    this.entries.clear();
    fs.rmSync(this.dir, { recursive: true, force: true });
    this.made = false;
  }
}

/** An object being written to the cache in order; abandoned at the first gap or error. */
export class CacheFill {
  private fd: number | undefined;
  /** committed or abandoned: nothing more is written */
  private ended = false;
  private written = 0;
  private readonly opened: Promise<void>;

  constructor(
    private readonly cache: ContentCache,
    private readonly version: string,
    private readonly size: number,
    private readonly file: string,
  ) {
    // Created on the thread pool: a new file costs the disk a metadata write (about 0.5 ms on an
    // ext4 /tmp here, per small file a program writes or reads), which the event loop every FUSE
    // request waits for must not sit through.
    this.opened = new Promise((resolve) =>
      fs.open(file, 'wx', 0o600, (err, fd) => {
        if (err) this.ended = true;
        else if (this.ended) removeFile(fd, file); // abandoned while it was being created
        else this.fd = fd;
        resolve();
      }),
    );
  }

  /**
   * Bytes read from the store at `offset` (one buffer, or the pieces of a read-ahead window, in
   * order); they are kept if they continue the file. The write is asynchronous (the thread
   * pool's, not the event loop's time: a synchronous write of each window halved sequential
   * reads); callers chain the calls so they stay in order.
   */
  async add(offset: number, data: Buffer | readonly Buffer[]): Promise<void> {
    if (this.fd === undefined && !this.ended) await this.opened;
    const fd = this.fd;
    if (fd === undefined || offset !== this.written) {
      if (offset > this.written) this.abandon();
      return;
    }
    const parts = Buffer.isBuffer(data) ? [data] : data;
    const length = parts.reduce((n, b) => n + b.length, 0);
    try {
      await new Promise<void>((resolve, reject) => fs.writev(fd, parts as Buffer[], offset, (err, n) => (err ? reject(err) : n !== length ? reject(new Error('short write')) : resolve())));
      if (this.fd !== fd) return; // abandoned meanwhile
      this.written += length;
      if (this.written >= this.size) {
        this.fd = undefined;
        this.ended = true;
        fs.closeSync(fd);
        this.cache.commit(this.version, this.file, this.size);
      }
    } catch {
      this.abandon();
    }
  }

  abandon(): void {
    if (this.ended) return;
    this.ended = true;
    const fd = this.fd;
    if (fd === undefined) return; // still being created: the open's callback removes it
    this.fd = undefined;
    removeFile(fd, this.file);
  }
}

function removeFile(fd: number, file: string): void {
  fs.closeSync(fd);
  removeFileSoon(file);
}

/** Directories of processes that ended without closing their cache (kill -9): removed. */
function removeOrphans(root: string): void {
  let names: string[];
  try {
    names = fs.readdirSync(root);
  } catch {
    return;
  }
  for (const n of names) {
    const pid = Number(/^(\d+)-/.exec(n)?.[1]);
    if (!pid || pid === process.pid) continue;
    if (!pidAlive(pid)) fs.rmSync(path.join(root, n), { recursive: true, force: true });
  }
}
