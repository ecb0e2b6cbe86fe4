import fs from 'node:fs';
import { fromNodeError } from '../../vfs/errors.js';
import type { Attr, Backend, BackendFile, OpenMode } from '../types.js';
import { ContentCache } from './content-cache.js';
import type { CacheFill } from './content-cache.js';
import { ForwardingLayer } from './forward.js';

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
  data: Buffer;
}

/**
 * A read-only handle of one object version. A read that continues where the last one ended
 * is sequential: it is served from a window fetched ahead (doubling, up to the maximum), and the
 * next window is fetched while the current one is consumed. Other reads go to the store as they
 * are. An object read front to back is kept in the content cache; later opens of the same
 * version read the local copy.
 */
class ReadAheadFile implements BackendFile {
  readonly writable = false;
  private cur: Chunk | undefined;
  private next: { start: number; p: Promise<Chunk> } | undefined;
  private lastEnd = -1;
  private window: number;
  private fill: CacheFill | undefined;
  private local: { fd: number } | undefined;

  constructor(
    private readonly f: BackendFile,
    readonly version: string,
    private readonly size: number,
    private readonly o: ReadCacheOptions,
  ) {
    this.window = o.readAheadMinBytes;
    const file = o.content?.get(version);
    if (file) {
      try {
        this.local = { fd: fs.openSync(file, 'r') };
      } catch {
        this.local = undefined; // evicted meanwhile: read from the store
      }
    }
    if (!this.local) this.fill = o.content?.fill(version, size);
  }

  async read(buf: Buffer, length: number, position: number): Promise<number> {
    if (this.local) {
      const fd = this.local.fd;
      try {
        return fs.readSync(fd, buf, 0, length, position);
      } catch (err) {
        throw fromNodeError(err, `read ${this.version} (content cache)`);
      }
    }
    if (position >= this.size || length <= 0) return 0;
    const sequential = position === this.lastEnd || position === 0 || this.covers(this.cur, position);
    if (!sequential && !this.covers(this.cur, position) && !(this.next && this.next.start === position)) {
      // random access: exactly what was asked, and the read-ahead starts over
      this.window = this.o.readAheadMinBytes;
      this.dropAhead();
      const n = await this.f.read(buf, length, position);
      this.lastEnd = position + n;
      return n;
    }
    let done = 0;
    while (done < length && position + done < this.size) {
      const at = position + done;
      const chunk = await this.chunkAt(at);
      const off = at - chunk.start;
      const n = Math.min(length - done, chunk.data.length - off);
      if (n <= 0) break;
      chunk.data.copy(buf, done, off, off + n);
      done += n;
    }
    this.lastEnd = position + done;
    this.prefetch();
    return done;
  }

  private covers(c: Chunk | undefined, pos: number): c is Chunk {
    return c !== undefined && pos >= c.start && pos < c.start + c.data.length;
  }

  private async chunkAt(pos: number): Promise<Chunk> {
    if (this.covers(this.cur, pos)) return this.cur;
    if (this.next && this.next.start === pos) {
      const p = this.next.p;
      this.next = undefined;
      this.cur = await p;
      if (this.covers(this.cur, pos)) return this.cur;
    }
    this.cur = await this.fetch(pos, this.window);
    this.grow();
    return this.cur;
  }

  /** Start fetching the window after the current one, if the reader is heading there. */
  private prefetch(): void {
    const c = this.cur;
    if (!c || this.next) return;
    const start = c.start + c.data.length;
    if (start >= this.size) return;
    const p = this.fetch(start, this.window);
    p.catch(() => undefined); // surfaced when the reader gets there
    this.next = { start, p };
    this.grow();
  }

  private grow(): void {
    this.window = Math.min(this.o.readAheadMaxBytes, this.window * 2);
  }

  private dropAhead(): void {
    this.next = undefined;
    this.cur = undefined;
  }

  private async fetch(start: number, want: number): Promise<Chunk> {
    const len = Math.min(want, this.size - start);
    const data = Buffer.allocUnsafe(len);
    let got = 0;
    while (got < len) {
      const n = await this.f.read(data.subarray(got), len - got, start + got);
      if (n === 0) break;
      got += n;
    }
    const chunk = { start, data: got === len ? data : data.subarray(0, got) };
    this.fill?.add(start, chunk.data);
    return chunk;
  }

  async write(): Promise<number> {
    return this.f.write(Buffer.alloc(0), 0, 0); // the store's EBADF for a read-only handle
  }
  async truncate(size: number): Promise<void> {
    return this.f.truncate(size);
  }
  stat(): Promise<Attr> {
    return this.f.stat();
  }
  sync(dataOnly: boolean): Promise<void> {
    return this.f.sync(dataOnly);
  }
  async close(): Promise<void> {
    this.fill?.abandon();
    this.dropAhead();
    if (this.local) {
      fs.closeSync(this.local.fd);
      this.local = undefined;
    }
    await this.f.close();
  }
}
