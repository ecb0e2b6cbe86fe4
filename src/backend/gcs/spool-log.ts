import fs from 'node:fs';
import nodePath from 'node:path';
import zlib from 'node:zlib';

/*
 * The upload spool's on-disk form (src/backend/gcs/README.md, "Durability"): append-only
 * segment files `<n>.log`. A close appends one record holding the version's description and
 * (up to `inlineBytes`) its bytes, and returns after one fdatasync of the segment, shared by
 * every close that arrived in the same batch of FUSE requests (group commit). A landed
 * version appends a `done` record that needs no sync of its own (replayed without it, the
 * upload answers 412 and is recognized as ours). The log was three fsyncs and two unlinks per
 * version as `<id>.data` + `<id>.json` files; a segment is removed whole once every version
 * written in it and before it is done.
 *
 * Record: magic u32 | header length u32 | data length u32 | crc32 of header and data u32 |
 * header (JSON) | data. A record that is short or fails its checksum is a tail a crash cut
 * (its fdatasync never returned, so its close never did): it and what follows are dropped.
 */

const MAGIC = 0x4c465331; // "LFS1"
const HEAD = 16;
/** what zeroAhead writes from (read-only: never handed to anything that writes into it) */
const ZEROS = Buffer.alloc(256 * 1024);

/** One queued version as the spool keeps it. */
export interface SpoolEntry {
  key: string;
  path: string;
  size: number;
  metadata: Record<string, string>;
  contentType?: string;
  /** the generation this version replaces (0: absent); rebased when the version before it in the chain lands */
  baseGeneration?: string;
  baseMetageneration?: string;
  enqueuedAt: number;
}

type Header =
  /** a version; its bytes follow the header, or are in `file` (a big one) */
  | { t: 'v'; id: string; entry: SpoolEntry; file?: string }
  /** the version's base changed (its predecessor `after` landed, or was replaced by it: done) */
  | { t: 'b'; id: string; baseGeneration: string; baseMetageneration?: string; after?: string }
  /** uploaded, replaced before its upload, or set aside */
  | { t: 'd'; id: string }
  /** before its upload: the version's metadata changed (chmod, chown, utimens of the closed file) */
  | { t: 'a'; id: string; metadata: Record<string, string> }
  /**
   * before any of them was tried: the versions `ids` (one file's, oldest first) were renamed to
   * `key`/`path`; the first is based on `baseGeneration` there (what the rename replaced, or 0).
   * One record, so a crash keeps all of the rename or none of it.
   */
  | { t: 'r'; ids: string[]; key: string; path: string; baseGeneration: string; baseMetageneration: string };

/** Where a version's bytes are: `entry.size` bytes from `offset` of `file`. */
export interface SpoolBytes {
  file: string;
  offset: number;
}

export interface SpooledVersion {
  id: string;
  entry: SpoolEntry;
  bytes: SpoolBytes;
  /** the segment holding its record (-1: a `<id>.json` of the older layout) */
  segment: number;
  /** a big version's own data file (removed when done) */
  ownFile?: string;
}

const segName = (n: number) => `${n.toString().padStart(8, '0')}.log`;
const segNumber = (name: string) => (/^\d{8}\.log$/.test(name) ? Number(name.slice(0, 8)) : undefined);

function segments(dir: string): number[] {
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return [];
  }
  return names.map(segNumber).filter((n): n is number => n !== undefined).sort((a, b) => a - b);
}

/**
 * The versions a spool directory holds, in the order they were closed; `headersOnly` skips the
 * checksums (a count for `status`, not a replay). Also what the last segment's good end is.
 */
export function readSpool(dir: string, opts: { headersOnly?: boolean } = {}): { versions: SpooledVersion[]; segments: number[]; goodEnd: number } {
  const versions = new Map<string, SpooledVersion>();
  const segs = segments(dir);
  let goodEnd = 0;
  // the older layout (`<id>.json` + `<id>.data`), left by a daemon before the log: older than any segment
  let names: string[] = [];
  try {
    names = fs.readdirSync(dir);
  } catch {
    /* no spool */
  }
  for (const n of names.filter((x) => x.endsWith('.json')).sort()) {
    try {
      const entry = JSON.parse(fs.readFileSync(nodePath.join(dir, n), 'utf8')) as SpoolEntry;
      const id = n.slice(0, -5);
      const data = nodePath.join(dir, `${id}.data`);
      versions.set(id, { id, entry, bytes: { file: data, offset: 0 }, segment: -1, ownFile: data });
    } catch {
      /* unreadable: left in place, for a person to look at */
    }
  }
  for (const seg of segs) {
    const file = nodePath.join(dir, segName(seg));
    let fd: number;
    try {
      fd = fs.openSync(file, 'r');
    } catch {
      continue; // removed meanwhile (a status read while the daemon reaps)
    }
    try {
      const size = fs.fstatSync(fd).size;
      const head = Buffer.alloc(HEAD);
      let at = 0;
      while (at + HEAD <= size) {
        if (fs.readSync(fd, head, 0, HEAD, at) < HEAD || head.readUInt32LE(0) !== MAGIC) break;
        const hlen = head.readUInt32LE(4);
        const dlen = head.readUInt32LE(8);
        if (at + HEAD + hlen + dlen > size) break;
        const body = Buffer.alloc(opts.headersOnly ? hlen : hlen + dlen);
        fs.readSync(fd, body, 0, body.length, at + HEAD);
        if (!opts.headersOnly && zlib.crc32(body) !== head.readUInt32LE(12)) break;
        let h: Header;
        try {
          h = JSON.parse(body.subarray(0, hlen).toString('utf8')) as Header;
        } catch {
          break;
        }
        const dataAt = at + HEAD + hlen;
        at = dataAt + dlen;
        if (h.t === 'v') {
          const own = h.file ? nodePath.join(dir, h.file) : undefined;
          versions.set(h.id, { id: h.id, entry: h.entry, bytes: own ? { file: own, offset: 0 } : { file, offset: dataAt }, segment: seg, ...(own ? { ownFile: own } : {}) });
        } else if (h.t === 'b') {
          const v = versions.get(h.id);
          if (v) {
            v.entry.baseGeneration = h.baseGeneration;
            if (h.baseMetageneration !== undefined) v.entry.baseMetageneration = h.baseMetageneration;
            else delete v.entry.baseMetageneration;
          }
          if (h.after !== undefined) versions.delete(h.after);
        } else if (h.t === 'd') versions.delete(h.id);
        else if (h.t === 'a') {
          const v = versions.get(h.id);
          if (v) v.entry.metadata = h.metadata;
        } else if (h.t === 'r') {
          h.ids.forEach((id, i) => {
            const v = versions.get(id);
            if (!v) return;
            v.entry.key = h.key;
            v.entry.path = h.path;
            if (i === 0) {
              v.entry.baseGeneration = h.baseGeneration;
              v.entry.baseMetageneration = h.baseMetageneration;
            }
          });
        }
      }
      if (seg === segs[segs.length - 1]) goodEnd = at;
    } finally {
      fs.closeSync(fd);
    }
  }
  return { versions: [...versions.values()], segments: segs, goodEnd };
}

/** The writer of a spool directory's log (one per daemon; the spool's lock is the journal's). */
export class SpoolLog {
  private fd = -1;
  private seg = 0;
  private pos = 0;
  /** versions not done, by the segment their record is in */
  private readonly live = new Map<number, number>();
  private waiters: Array<{ resolve: () => void; reject: (e: Error) => void }> = [];
  /** records appended since open, and how many of them a finished sync covers */
  private appended = 0;
  private synced = 0;
  private syncing = false;
  private syncQueued = false;
  private reaping = false;
  /** done records, written at the end of the turn (see append) */
  private deferred: Buffer[] = [];
  private flushQueued = false;
  /** descriptors of rolled segments a running sync still uses */
  private readonly retired: number[] = [];
  /** the active segment holds zeros (or records) up to here (see zeroAhead) */
  private zeroedTo = 0;

  constructor(
    readonly dir: string,
    private readonly segmentBytes: number,
    /** write zeros this far ahead of the end (0: append only); see DEFAULTS.gcs.spoolZeroAheadBytes */
    private readonly zeroAheadBytes = 0,
  ) {}

  /**
   * Replay the spool (what a crash or an unmount without waiting left) and start a new segment
   * for this daemon's records. A torn tail of the last segment is cut off; data files no
   * version refers to (a big version whose record never became durable) are removed.
   */
  open(): SpooledVersion[] {
    fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const { versions, segments: segs, goodEnd } = readSpool(this.dir);
    const last = segs[segs.length - 1];
    if (last !== undefined) fs.truncateSync(nodePath.join(this.dir, segName(last)), goodEnd);
    const owned = new Set(versions.map((v) => v.ownFile && nodePath.basename(v.ownFile)));
    for (const n of fs.readdirSync(this.dir)) {
      if (n.endsWith('.tmp') || (n.endsWith('.data') && !owned.has(n))) fs.rmSync(nodePath.join(this.dir, n), { force: true });
    }
    for (const s of segs) this.live.set(s, 0);
    for (const v of versions) this.live.set(v.segment, (this.live.get(v.segment) ?? 0) + 1);
    this.startSegment((last ?? 0) + 1);
    return versions;
  }

  /** Append a version (not durable until `durable()` resolves). Returns where its bytes are. */
  appendVersion(id: string, entry: SpoolEntry, data: Buffer | undefined, ownFile?: string): { bytes: SpoolBytes; segment: number } {
    if (this.pos >= this.segmentBytes) this.roll();
    const h: Header = { t: 'v', id, entry, ...(ownFile ? { file: nodePath.basename(ownFile) } : {}) };
    const dataAt = this.append(h, data);
    this.live.set(this.seg, (this.live.get(this.seg) ?? 0) + 1);
    return { bytes: ownFile ? { file: ownFile, offset: 0 } : { file: nodePath.join(this.dir, segName(this.seg)), offset: dataAt }, segment: this.seg };
  }

  appendBase(id: string, baseGeneration: string, baseMetageneration: string | undefined, after?: string): void {
    this.append({ t: 'b', id, baseGeneration, ...(baseMetageneration !== undefined ? { baseMetageneration } : {}), ...(after !== undefined ? { after } : {}) });
  }

  /**
   * chmod/chown/utimens of a version not started: what its upload carries. Returns the record's
   * mark: it survives the daemon's death once appended, a power loss once `isSynced(mark)`.
   */
  appendMetadata(id: string, metadata: Record<string, string>): number {
    this.append({ t: 'a', id, metadata });
    return this.appended;
  }

  /** A rename of versions never tried: they go to `key` instead. Returns the record's mark (see appendMetadata). */
  appendRename(ids: string[], key: string, path: string, baseGeneration: string, baseMetageneration: string): number {
    this.append({ t: 'r', ids, key, path, baseGeneration, baseMetageneration });
    return this.appended;
  }

  /** Whether the record `mark` (appendMetadata, appendRename) is on disk. */
  isSynced(mark: number): boolean {
    return this.synced >= mark;
  }

  /** The version `id` (recorded in `segment`) needs no upload any more. */
  appendDone(id: string, segment: number): void {
    if (segment >= 0) this.append({ t: 'd', id }, undefined, true);
    const n = (this.live.get(segment) ?? 1) - 1;
    this.live.set(segment, n);
    if (n <= 0) this.reapSoon();
  }

  /**
   * Resolves once everything appended so far is on disk. Closes that arrive while a sync runs
   * share the next one.
   */
  durable(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.waiters.push({ resolve, reject });
      if (!this.syncQueued) {
        this.syncQueued = true;
        // once the other requests of this batch appended theirs (native-ll runs a batch's
        // promise jobs together): one sync for all of them. Not setImmediate: that waited for
        // the rest of the loop's turn (upload answers, other handles) before the sync began,
        // 100-500 us more per close of a program that closes one file at a time
        queueMicrotask(() => this.sync());
      }
    });
  }

  get isOpen(): boolean {
    return this.fd >= 0;
  }

  close(): void {
    if (this.fd < 0) return;
    try {
      this.flushDeferred();
      fs.fdatasyncSync(this.fd);
    } catch {
      /* closing anyway: what was acknowledged was synced before */
    }
    fs.closeSync(this.fd);
    this.fd = -1;
    // nothing left to upload: the spool is left empty
    if ([...this.live.values()].every((n) => n <= 0)) for (const s of this.live.keys()) fs.rmSync(nodePath.join(this.dir, segName(s)), { force: true });
  }

  // ---- internals -----------------------------------------------------------------------------

  private sync(): void {
    this.syncQueued = false;
    // a sync running may not cover what was appended since it began: its end starts the next
    if (this.syncing || !this.waiters.length) return;
    const waiters = this.waiters;
    this.waiters = [];
    try {
      this.flushDeferred();
    } catch {
      // dropped (see append); what the waiters appended themselves was written at once
    }
    this.syncing = true;
    const fd = this.fd;
    const upTo = this.appended;
    fs.fdatasync(fd, (err) => {
      this.syncing = false;
      if (!err) this.synced = Math.max(this.synced, upTo);
      for (const r of this.retired.splice(0)) fs.close(r, () => undefined);
      for (const w of waiters) if (err) w.reject(err);
      else w.resolve();
      if (this.waiters.length) this.sync();
    });
  }

  /**
   * Write a record at the end of the log (a version's: its bytes' offset is returned), after
   * the deferred records before it. `defer`: a done record (no sync of its own, and nobody
   * waits for it) waits in memory for the end of this turn of the event loop, the next record
   * or the next sync, and all of them go in one write: every landed upload appends one, and a
   * write each was a syscall on the loop every FUSE request waits for. The log's order is the
   * order of the calls either way; a daemon killed within the turn loses them as a crash loses
   * an unsynced record (replayed without them, the upload answers 412 and is recognized as
   * ours). Base records are written at once: a close's answer follows its supersede's record,
   * so what `ledgerfs status` counts is what the program saw.
   */
  private append(h: Header, data?: Buffer, defer = false): number {
    const header = Buffer.from(JSON.stringify(h));
    const dlen = data?.length ?? 0;
    const head = Buffer.alloc(HEAD);
    head.writeUInt32LE(MAGIC, 0);
    head.writeUInt32LE(header.length, 4);
    head.writeUInt32LE(dlen, 8);
    head.writeUInt32LE(data ? zlib.crc32(data, zlib.crc32(header)) : zlib.crc32(header), 12);
    if (defer) {
      this.deferred.push(head, header);
      if (!this.flushQueued) {
        this.flushQueued = true;
        setImmediate(() => {
          this.flushQueued = false;
          try {
            this.flushDeferred();
          } catch {
            // dropped (see above); the next record is written where they would have been
          }
        });
      }
      return -1;
    }
    this.flushDeferred();
    const at = this.pos;
    // (an empty buffer in the vector costs libuv one more pwrite, of nothing)
    this.writeAt(data?.length ? [head, header, data] : [head, header]);
    // (the marks of isSynced count the records written at once; deferred ones need none)
    this.appended++;
    return at + HEAD + header.length;
  }

  /** The deferred records, in one write. */
  private flushDeferred(): void {
    if (!this.deferred.length || this.fd < 0) return;
    const parts = this.deferred;
    this.deferred = [];
    this.writeAt(parts);
  }

  /** `parts` at the end of the log; the end moves only once all of them are written. */
  private writeAt(parts: Buffer[]): void {
    let off = this.pos;
    let rest = parts;
    if (this.zeroAheadBytes > 0) {
      let len = 0;
      for (const p of parts) len += p.length;
      if (off + len > this.zeroedTo) this.zeroAhead(off + len);
    }
    while (rest.length) {
      let n = fs.writevSync(this.fd, rest, off);
      off += n;
      // drop what was written (a short write is rare: the disk filled, a signal)
      while (rest.length && n >= (rest[0] as Buffer).length) n -= (rest.shift() as Buffer).length;
      if (n > 0) rest = [(rest[0] as Buffer).subarray(n), ...rest.slice(1)];
    }
    this.pos = off;
  }

  /**
   * Zeros from the written end of the segment to past `end`, a multiple of zeroAheadBytes. A
   * record then rewrites blocks the file has: an fdatasync after it writes the data and needs
   * no file-system journal commit (an append changes the size, and ext4 makes every such sync
   * wait for the commit of all else changed on the disk meanwhile: content-cache copies,
   * staging files, other programs). One sync per zeroAheadBytes of log still commits the
   * growth. A reader stops at the zeros as at any tail without a record's magic (readSpool),
   * and the next open cuts them off.
   */
  private zeroAhead(end: number): void {
    const to = Math.ceil(end / this.zeroAheadBytes) * this.zeroAheadBytes;
    for (let at = this.zeroedTo; at < to; ) {
      const n = Math.min(ZEROS.length, to - at);
      at += fs.writeSync(this.fd, ZEROS, 0, n, at);
    }
    this.zeroedTo = to;
  }

  private startSegment(n: number): void {
    this.seg = n;
    this.fd = fs.openSync(nodePath.join(this.dir, segName(n)), 'wx', 0o600);
    this.pos = 0;
    this.zeroedTo = 0;
    this.live.set(n, this.live.get(n) ?? 0);
    // the new name must survive a crash before any record in it counts
    const d = fs.openSync(this.dir, 'r');
    try {
      fs.fsyncSync(d);
    } finally {
      fs.closeSync(d);
    }
  }

  private roll(): void {
    this.flushDeferred();
    fs.fdatasyncSync(this.fd); // its records stay durable whatever happens to the new one
    this.synced = this.appended;
    // a sync on the thread pool may still hold it: closed when that one ends
    if (this.syncing) this.retired.push(this.fd);
    else fs.closeSync(this.fd);
    this.startSegment(this.seg + 1);
    this.reapSoon();
  }

  /** Remove the oldest segments whose versions (and all before them) are done; the active one rolls first when all are. */
  private reapSoon(): void {
    if (this.reaping) return;
    this.reaping = true;
    setImmediate(() => {
      this.reaping = false;
      if (this.fd < 0) return;
      const segs = [...this.live.keys()].sort((a, b) => a - b);
      const allDone = segs.every((s) => (this.live.get(s) ?? 0) <= 0);
      if (allDone && this.pos >= Math.min(this.segmentBytes, 1024 * 1024)) this.roll();
      const dead: number[] = [];
      for (const s of segs) {
        if (s === this.seg || (this.live.get(s) ?? 0) > 0) break;
        dead.push(s);
      }
      if (!dead.length) return;
      // the `after`/base records of live versions must not depend on what goes: synced first
      // (on the thread pool: a slow disk must not hold the loop every request waits for)
      for (const s of dead) this.live.delete(s);
      this.durable().then(
        () => {
          for (const s of dead) fs.rm(nodePath.join(this.dir, segName(s)), { force: true }, () => undefined);
        },
        () => {
          for (const s of dead) this.live.set(s, 0); // tried again at the next reap
        },
      );
    });
  }
}
