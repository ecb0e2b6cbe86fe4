import fs from 'node:fs';
import { type Attr, type Backend, type BackendFile, fromNodeError, type OpenMode } from '../../core/index.js';
import { DEFAULTS } from '../../config/index.js';
import { type CacheFill, ContentCache } from './content-cache.js';
import { ForwardingFile, ForwardingLayer } from './forward.js';

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

/**
 * A window of the object fetched ahead. Its bytes are kept as the pieces the store delivered
 * them in (no copy into one buffer), and a read is answered as soon as the bytes it needs are
 * in, not when the whole window is.
 */
class Window {
  private readonly parts: Buffer[] = [];
  /** object offset of each part */
  private readonly offsets: number[] = [];
  /** bytes in so far, from start */
  private have = 0;
  /** undefined while fetching; then null (complete) or the error */
  private ended: Error | null | undefined;
  private waiters: Array<{ until: number; wake: () => void }> = [];
  /** resolves when the fetch has ended, to the pieces (rejects with its error) */
  readonly done: Promise<Buffer[]>;

  constructor(
    readonly start: number,
    public end: number,
    fetch: (onData: (d: Buffer, at: number) => void) => Promise<number>,
  ) {
    this.done = fetch((d) => this.arrive(d)).then(
      (n) => {
        this.end = this.start + n; // short only if the object ends early
        this.finish(null);
        return this.parts;
      },
      (err: Error) => {
        this.finish(err);
        throw err;
      },
    );
    this.done.catch(() => undefined); // surfaced to the reader that needs the bytes
  }

  get failed(): boolean {
    return this.ended instanceof Error;
  }

  private arrive(d: Buffer): void {
    this.offsets.push(this.start + this.have);
    this.parts.push(d);
    this.have += d.length;
    const upTo = this.start + this.have;
    if (this.waiters.some((w) => w.until <= upTo)) {
      const ready = this.waiters.filter((w) => w.until <= upTo);
      this.waiters = this.waiters.filter((w) => w.until > upTo);
      for (const w of ready) w.wake();
    }
  }

  private finish(err: Error | null): void {
    this.ended = err;
    const all = this.waiters;
    this.waiters = [];
    for (const w of all) w.wake();
  }

  /**
   * Copy [pos, pos + len) of this window into `buf` at `off`, once those bytes are in; fewer
   * bytes only where the window ended early. Rejects with the fetch's error if it failed first.
   */
  async read(buf: Buffer, off: number, pos: number, len: number): Promise<number> {
    const until = Math.min(pos + len, this.end);
    if (this.start + this.have < until && this.ended === undefined) await new Promise<void>((wake) => this.waiters.push({ until, wake }));
    if (this.start + this.have < until && this.ended instanceof Error) throw this.ended;
    const stop = Math.min(until, this.start + this.have);
    let done = 0;
    for (let i = this.partAt(pos); i < this.parts.length && pos + done < stop; i++) {
      const part = this.parts[i] as Buffer;
      const from = pos + done - (this.offsets[i] as number);
      done += part.copy(buf, off + done, from, Math.min(part.length, from + stop - pos - done));
    }
    return done;
  }

  /** Index of the part holding `pos` (which has arrived). */
  private partAt(pos: number): number {
    let lo = 0;
    let hi = this.offsets.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if ((this.offsets[mid] as number) <= pos) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }
}

const AHEAD = DEFAULTS.gcsCache.readAheadWindows;
/** Windows kept per handle: those being read (the kernel reads a stream a few requests at a time) and those ahead. */
const MAX_WINDOWS = AHEAD + 3;

/**
 * A read-only handle of one object version. Reads near where the reader is (the kernel sends
 * several reads of one sequential stream at once, not always in order) are served from windows
 * fetched ahead (doubling, up to the maximum), and the next window is fetched while the current
 * one is consumed. Reads elsewhere go to the store as they are. An object read front to back is
 * kept in the content cache; later opens of the same version read the local copy.
 */
class ReadAheadFile extends ForwardingFile {
  private windows: Window[] = [];
  private lastEnd = -1;
  private window: number;
  private fill: CacheFill | undefined;
  /** windows reach the content cache in the order they were asked for */
  private filling: Promise<void> = Promise.resolve();
  /** the content cache's copy: a local file's descriptor, or bytes in memory */
  private local: { fd: number } | { data: Buffer } | undefined;

  constructor(
    f: BackendFile,
    private readonly ver: string,
    private readonly size: number,
    private readonly o: ReadCacheOptions,
  ) {
    super(f);
    this.window = o.readAheadMinBytes;
    const kept = o.content?.get(ver);
    if (kept && 'data' in kept) this.local = kept;
    else if (kept) {
      try {
        this.local = { fd: fs.openSync(kept.file, 'r') };
      } catch {
        this.local = undefined; // evicted meanwhile: read from the store
      }
    }
  }

  override get version(): string {
    return this.ver;
  }

  override async read(buf: Buffer, length: number, position: number): Promise<number> {
    if (this.local && 'data' in this.local) {
      const { data } = this.local;
      return position >= data.length || length <= 0 ? 0 : data.copy(buf, 0, position, Math.min(data.length, position + length));
    }
    if (this.local) {
      // on the loop, as the local backend reads its files: the copy is a local file, mostly in
      // the page cache (written moments ago by an upload, or read before), and a trip through
      // libuv's pool and back cost 15 times the read (git add hashing what tar just wrote)
      try {
        return fs.readSync(this.local.fd, buf, 0, length, position);
      } catch (err) {
        throw fromNodeError(err, `read ${this.ver} (content cache)`);
      }
    }
    if (position >= this.size || length <= 0) return 0;
    if (!this.windowAt(position) && !this.nearby(position)) {
      // random access: exactly what was asked, and the read-ahead starts over
      this.window = this.o.readAheadMinBytes;
      const n = await this.f.read(buf, length, position);
      this.lastEnd = position + n;
      return n;
    }
    let done = 0;
    while (done < length && position + done < this.size) {
      const at = position + done;
      const w = this.windowAt(at) ?? this.fetch(at);
      let n: number;
      try {
        n = await w.read(buf, done, at, length - done);
      } catch (err) {
        this.windows = this.windows.filter((x) => x !== w); // a later read fetches it again
        throw err;
      }
      if (n <= 0) break;
      done += n;
    }
    this.lastEnd = Math.max(this.lastEnd, position + done);
    this.prefetch();
    return done;
  }

  private windowAt(pos: number): Window | undefined {
    return this.windows.find((c) => pos >= c.start && pos < c.end);
  }

  /** Within the stream being read: its start, or around the windows held (a window either side). */
  private nearby(pos: number): boolean {
    if (pos === 0 || pos === this.lastEnd) return true;
    if (this.windows.length === 0) return false;
    const lo = Math.min(...this.windows.map((c) => c.start));
    const hi = Math.max(...this.windows.map((c) => c.end));
    return pos >= lo - this.window && pos <= hi + this.window;
  }

  /** Fetch the window at `start` (up to the next window held), keeping the latest few. */
  private fetch(start: number): Window {
    const nextHeld = Math.min(this.size, ...this.windows.filter((c) => c.start > start).map((c) => c.start));
    const end = Math.min(nextHeld, start + this.window);
    this.window = Math.min(this.o.readAheadMaxBytes, this.window * 2);
    const w = new Window(start, end, (onData) => this.fetchRange(start, end, onData));
    this.windows.push(w);
    if (this.windows.length > MAX_WINDOWS) this.windows.shift();
    // A fill can only complete read in order from the start: begin it there, not at open (an
    // open that reads a header, or nothing, would make and drop a cache file every time).
    if (start === 0 && !this.fill) this.fill = this.o.content?.fill(this.ver, this.size);
    const fill = this.fill;
    if (fill) this.filling = this.filling.then(() => w.done.then((parts) => fill.add(start, parts), () => fill.abandon()));
    return w;
  }

  /** Keep AHEAD windows in flight beyond the one being read: one stream alone leaves gaps. */
  private prefetch(): void {
    for (;;) {
      const last = this.windows.reduce<Window | undefined>((a, c) => (!a || c.end > a.end ? c : a), undefined);
      if (!last || last.end >= this.size || last.failed) return;
      if (this.windows.filter((c) => c.start >= this.lastEnd).length >= AHEAD) return;
      this.fetch(last.end);
    }
  }

  /** The store's pieces as they arrive (no copy), or, from a store that cannot, one buffer. */
  private async fetchRange(start: number, end: number, onData: (d: Buffer, at: number) => void): Promise<number> {
    if (this.f.readParts) return this.f.readParts(start, end - start, onData);
    const data = Buffer.allocUnsafe(end - start);
    let got = 0;
    while (got < data.length) {
      const n = await this.f.read(data.subarray(got), data.length - got, start + got);
      if (n === 0) break;
      got += n;
    }
    if (got > 0) onData(data.subarray(0, got), start);
    return got;
  }

  override async close(): Promise<void> {
    // a fill still in order completes in the background; an incomplete one is dropped
    const fill = this.fill;
    void this.filling.then(() => fill?.abandon());
    this.windows = [];
    if (this.local && 'fd' in this.local) fs.closeSync(this.local.fd);
    this.local = undefined;
    await this.f.close();
  }
}
