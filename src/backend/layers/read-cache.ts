import { promisify } from 'node:util';
import fs from 'node:fs';
import { fromNodeError } from '../../vfs/errors.js';
import { DEFAULTS } from '../../config/defaults.js';
import type { Attr, Backend, BackendFile, OpenMode } from '../types.js';
import { ContentCache } from './content-cache.js';
import type { CacheFill } from './content-cache.js';
import { ForwardingFile, ForwardingLayer } from './forward.js';

const readAt = promisify(fs.read);

export interface ReadCacheOptions {
  /** first read-ahead window of a sequential reader; it doubles up to readAheadMaxBytes */
  readAheadMinBytes: number;
  readAheadMaxBytes: number;
  /** the disk content cache (absent: read-ahead only) */
  content?: ContentCache;
}

/**
 * Reads of remote objects: sequential read-ahead with ranged reads, and a local disk content
 * cache keyed by the object's version. Only read-only handles whose backend file names its
 * version (BackendFile.version) are served here; writable handles and files with local changes
 * pass through untouched.
 */
export class ReadCacheLayer extends ForwardingLayer {
  constructor(
    inner: Backend,
    private readonly opts: ReadCacheOptions,
  ) {
    super(inner);
  }

  override async open(path: string, mode: OpenMode, createMode?: number): Promise<BackendFile> {
    const f = await this.inner.open(path, mode, createMode);
    const version = f.version;
    if (mode.write || version === undefined) return f;
    const size = (await f.stat()).size;
    return new ReadAheadFile(f, version, size, this.opts);
  }

  override async close(): Promise<void> {
    this.opts.content?.close();
    await this.inner.close();
  }
}

interface Chunk {
  start: number;
  end: number;
  data: Promise<Buffer>;
}

const AHEAD = DEFAULTS.gcsCache.readAheadWindows;
/** Chunks kept per handle: those being read (the kernel reads a stream a few requests at a time) and those ahead. */
const MAX_CHUNKS = AHEAD + 3;

/**
 * A read-only handle of one object version. Reads near where the reader is (the kernel sends
 * several reads of one sequential stream at once, not always in order) are served from windows
 * fetched ahead (doubling, up to the maximum), and the next window is fetched while the current
 * one is consumed. Reads elsewhere go to the store as they are. An object read front to back is
 * kept in the content cache; later opens of the same version read the local copy.
 */
class ReadAheadFile extends ForwardingFile {
  private chunks: Chunk[] = [];
  private lastEnd = -1;
  private window: number;
  private fill: CacheFill | undefined;
  /** chunks reach the content cache in the order they were asked for */
  private filling: Promise<void> = Promise.resolve();
  private local: { fd: number } | undefined;

  constructor(
    f: BackendFile,
    private readonly ver: string,
    private readonly size: number,
    private readonly o: ReadCacheOptions,
  ) {
    super(f);
    this.window = o.readAheadMinBytes;
    const file = o.content?.get(ver);
    if (file) {
      try {
        this.local = { fd: fs.openSync(file, 'r') };
      } catch {
        this.local = undefined; // evicted meanwhile: read from the store
      }
    }
  }

  override get version(): string {
    return this.ver;
  }

  override async read(buf: Buffer, length: number, position: number): Promise<number> {
    if (this.local) {
      // through libuv's pool: a cache on a slow disk must not stall every other request
      try {
        return (await readAt(this.local.fd, buf, 0, length, position)).bytesRead;
      } catch (err) {
        throw fromNodeError(err, `read ${this.ver} (content cache)`);
      }
    }
    if (position >= this.size || length <= 0) return 0;
    if (!this.chunkAt(position) && !this.nearby(position)) {
      // random access: exactly what was asked, and the read-ahead starts over
      this.window = this.o.readAheadMinBytes;
      const n = await this.f.read(buf, length, position);
      this.lastEnd = position + n;
      return n;
    }
    let done = 0;
    while (done < length && position + done < this.size) {
      const at = position + done;
      const chunk = this.chunkAt(at) ?? this.fetch(at);
      const data = await chunk.data;
      const off = at - chunk.start;
      const n = Math.min(length - done, data.length - off);
      if (n <= 0) break;
      data.copy(buf, done, off, off + n);
      done += n;
    }
    this.lastEnd = Math.max(this.lastEnd, position + done);
    this.prefetch();
    return done;
  }

  private chunkAt(pos: number): Chunk | undefined {
    return this.chunks.find((c) => pos >= c.start && pos < c.end);
  }

  /** Within the stream being read: its start, or around the chunks held (a window either side). */
  private nearby(pos: number): boolean {
    if (pos === 0 || pos === this.lastEnd) return true;
    if (this.chunks.length === 0) return false;
    const lo = Math.min(...this.chunks.map((c) => c.start));
    const hi = Math.max(...this.chunks.map((c) => c.end));
    return pos >= lo - this.window && pos <= hi + this.window;
  }

  /** Fetch the window at `start` (up to the next chunk held), keeping the latest few. */
  private fetch(start: number): Chunk {
    const nextHeld = Math.min(this.size, ...this.chunks.filter((c) => c.start > start).map((c) => c.start));
    const end = Math.min(nextHeld, start + this.window);
    this.window = Math.min(this.o.readAheadMaxBytes, this.window * 2);
    const data = this.fetchRange(start, end);
    data.catch(() => undefined); // surfaced to the reader that awaits it
    const chunk = { start, end, data };
    this.chunks.push(chunk);
    if (this.chunks.length > MAX_CHUNKS) this.chunks.shift();
    // A fill can only complete read in order from the start: begin it there, not at open (an
    // open that reads a header, or nothing, would make and drop a cache file every time).
    if (start === 0 && !this.fill) this.fill = this.o.content?.fill(this.ver, this.size);
    const fill = this.fill;
    if (fill) this.filling = this.filling.then(() => data.then((d) => fill.add(start, d), () => fill.abandon()));
    return chunk;
  }

  /** Keep AHEAD windows in flight beyond the one being read: one stream alone leaves gaps. */
  private prefetch(): void {
    for (;;) {
      const last = this.chunks.reduce<Chunk | undefined>((a, c) => (!a || c.end > a.end ? c : a), undefined);
      if (!last || last.end >= this.size) return;
      if (this.chunks.filter((c) => c.start >= this.lastEnd).length >= AHEAD) return;
      this.fetch(last.end);
    }
  }

  private async fetchRange(start: number, end: number): Promise<Buffer> {
    const len = end - start;
    const data = Buffer.allocUnsafe(len);
    let got = 0;
    while (got < len) {
      const n = await this.f.read(data.subarray(got), len - got, start + got);
      if (n === 0) break;
      got += n;
    }
    return got === len ? data : data.subarray(0, got);
  }

  override async close(): Promise<void> {
    // a fill still in order completes in the background; an incomplete one is dropped
    const fill = this.fill;
    void this.filling.then(() => fill?.abandon());
    this.chunks = [];
    if (this.local) {
      fs.closeSync(this.local.fd);
      this.local = undefined;
    }
    await this.f.close();
  }
}
