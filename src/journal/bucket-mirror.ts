import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DEFAULTS } from '../config/index.js';
import type { Logger } from '../core/index.js';
import type { BlobStore } from './blobs.js';
import { listSegments, segmentName, type StateLayout } from './layout.js';
import type { JournalRemote, RemotePart } from './remote.js';

/*
 * The journal of a GCS workspace, mirrored into the bucket's reserved area so that `log`,
 * `show`, `diff` and `rollback` work from any host. The local state directory stays the spool:
 * a record is durable there before the change it describes is acknowledged, exactly as for a
 * local workspace; the mirror copies what is durable to the bucket off the request path.
 *
 * The remote keeps (names: src/backend/gcs/journal-remote.ts) parts of segments, each a run of
 * whole records of one segment of one writer from a byte offset on (a segment is its parts in
 * offset order), and blobs. Everything is created once and never replaced: appending to a
 * segment is one new part, a retried upload finds its part there already, and writers on two
 * hosts (each state directory has its own writer id) never touch each other's names.
 *
 * Segment numbers are one sequence across hosts: a writer first imports the segments other
 * writers left in the bucket (pull), then appends to a segment of its own numbered after them,
 * so the seq of its records goes on after theirs. Two hosts journaling the same workspace at
 * the same time are not ordered against each other (see "Journal mirror" in the GCS README).
 *
 * mirror.json in the state directory names this directory's writer and the segments imported
 * from other writers (never uploaded again, never appended to), and remembers how far it has
 * seen each writer's parts and how much of its own segments the bucket has, so a start lists
 * only parts that are new (GCS lists names in order: parts are listed from a startOffset).
 */


interface MirrorState {
  writer: string;
  /** segment number -> the writer it came from and how many of its bytes are here */
  imported: Record<string, { writer: string; bytes: number }>;
  /** writer -> its last part this spool has accounted for (imported, skipped, or uploaded) */
  seen: Record<string, { segment: number; offset: number }>;
  /** own segment number -> bytes the bucket has */
  uploaded: Record<string, number>;
  /** every blob committed before this time (ms) is in the bucket */
  blobsSyncedAt: number;
}

export interface PullResult {
  segments: number;
  bytes: number;
}

export interface MirrorOptions {
  remote: JournalRemote;
  layout: StateLayout;
  log: Logger;
  intervalMs: number;
  retryMs: number;
}


function newWriterId(): string {
  const host = os.hostname().replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 40) || 'host';
  return `${host}-${crypto.randomBytes(4).toString('hex')}`;
}

export class BucketMirror {
  private readonly state: MirrorState;
  private readonly stateFile: string;
  /** own segments: bytes the bucket has (remembered, corrected by the listing at start, then our uploads) */
  private readonly uploaded = new Map<number, number>();
  /** own segments: bytes that are whole and durable in the spool and should be in the bucket */
  private readonly wanted = new Map<number, number>();
  private readonly pendingBlobs = new Set<string>();
  private blobs: BlobStore | null = null;
  private timer: NodeJS.Timeout | null = null;
  private pumping: Promise<void> | null = null;
  private retryMs: number;
  private beforeUpload: () => Promise<void> = async () => undefined;
  private closed = false;
  /** requests made and bytes sent, for tests and the report */
  readonly stats = { parts: 0, partBytes: 0, blobs: 0, blobBytes: 0 };

  private constructor(private readonly o: MirrorOptions) {
    this.stateFile = path.join(o.layout.root, 'mirror.json');
    this.state = readState(this.stateFile) ?? { writer: newWriterId(), imported: {}, seen: {}, uploaded: {}, blobsSyncedAt: 0 };
    for (const [seg, bytes] of Object.entries(this.state.uploaded)) this.uploaded.set(Number(seg), bytes);
    this.retryMs = o.retryMs;
    writeState(this.stateFile, this.state);
  }

  /** Open the mirror of a state directory (creating its writer id) and import what other writers left. */
  static async open(o: MirrorOptions): Promise<{ mirror: BucketMirror; pulled: PullResult }> {
    const m = new BucketMirror(o);
    const pulled = await m.pull();
    return { mirror: m, pulled };
  }

  get writer(): string {
    return this.state.writer;
  }

  get location(): string {
    return this.o.remote.location;
  }

  /**
   * Bring the segments other writers put in the bucket into the spool: new ones whole, and
   * the rest of ones imported before that grew since. Our own segments are never pulled: the
   * spool is their source.
   */
  async pull(): Promise<PullResult> {
    const bySeg = new Map<number, Map<string, RemotePart[]>>();
    const listed: RemotePart[] = [];
    for (const w of await this.o.remote.listWriters()) listed.push(...(await this.o.remote.listParts(w, this.state.seen[w])));
    const gapAt = new Map<string, RemotePart>();
    for (const p of listed) {
      if (p.writer === this.state.writer) {
        // parts a crash kept us from remembering
        const end = p.offset + p.size;
        if (end > (this.uploaded.get(p.segment) ?? 0)) this.uploaded.set(p.segment, end);
        continue;
      }
      let w = bySeg.get(p.segment);
      if (!w) bySeg.set(p.segment, (w = new Map()));
      let parts = w.get(p.writer);
      if (!parts) w.set(p.writer, (parts = []));
      parts.push(p);
    }
    const local = new Map(listSegments(this.o.layout.journalDir).map((s) => [s.index, s.path]));
    const result: PullResult = { segments: 0, bytes: 0 };
    for (const seg of [...bySeg.keys()].sort((a, b) => a - b)) {
      const writers = bySeg.get(seg) as Map<string, RemotePart[]>;
      const had = this.state.imported[String(seg)];
      if (!had && local.has(seg)) {
        this.o.log.warn({ segment: seg, writers: [...writers.keys()] }, 'journal mirror: another writer used a segment number this spool has as its own (two hosts journaled at once); its records are not imported');
        continue;
      }
      const writer = had?.writer ?? [...writers.keys()].sort()[0] as string;
      if (writers.size > 1 && !had) this.o.log.warn({ segment: seg, writers: [...writers.keys()], used: writer }, 'journal mirror: several writers used one segment number (two hosts journaled at once); importing one');
      const parts = (writers.get(writer) ?? []).sort((a, b) => a.offset - b.offset);
      const file = path.join(this.o.layout.journalDir, segmentName(seg));
      // a writer with a part missing in an earlier segment waits for it before going on
      if (gapAt.has(writer)) continue;
      let have = had?.bytes ?? 0;
      const size = local.has(seg) ? fs.statSync(file).size : 0;
      // a crash between appending a part and remembering it leaves the file exactly one part
      // longer than remembered: that part is here, whole (appendPart fsyncs before returning)
      const next = had ? parts.find((p) => p.offset === had.bytes) : undefined;
      if (had && next && size === had.bytes + next.size) {
        this.remember(seg, writer, size);
        have = size;
      }
      // gc may have rewritten an imported segment here: only append to one that is as imported
      if (had && size !== have) continue;
      const grown = parts.some((p) => p.offset + p.size > have);
      if (had && grown && [...local.keys()].some((i) => i > seg)) {
        // its writer went on after later segments were written (two hosts journaling at once):
        // those records would share seq numbers with the later ones; they stay in the bucket
        this.o.log.warn({ segment: seg, writer, imported: had.bytes }, 'journal mirror: another writer appended to a segment after later ones were written here (two hosts journaling at once); not imported');
        continue;
      }
      fs.mkdirSync(this.o.layout.journalDir, { recursive: true, mode: 0o700 });
      const before = have;
      for (const p of parts) {
        if (p.offset + p.size <= have) continue;
        if (p.offset !== have) {
          if (!gapAt.has(writer)) gapAt.set(writer, p); // a gap (a part missing): the rest waits for it
          break;
        }
        // remembered as imported before the file exists, and its length after each part, so the
        // writer never takes it for its own (a crash in between leaves a length mismatch,
        // which stops further imports into it, as for a segment gc rewrote)
        if (!this.state.imported[String(seg)]) this.remember(seg, writer, have);
        await this.appendPart(p, file);
        have += p.size;
        this.remember(seg, writer, have);
      }
      if (have > before) {
        result.segments++;
        result.bytes += have - before;
      }
    }
    // next time, list each writer from where this listing ended (or from a gap)
    for (const p of listed) if (!gapAt.has(p.writer)) this.state.seen[p.writer] = { segment: p.segment, offset: p.offset };
    for (const [w, p] of gapAt) this.state.seen[w] = { segment: p.segment, offset: 0 };
    this.rememberUploads();
    return result;
  }

  private remember(seg: number, writer: string, bytes: number): void {
    this.state.imported[String(seg)] = { writer, bytes };
    writeState(this.stateFile, this.state);
  }

  private async appendPart(part: RemotePart, file: string): Promise<void> {
    const tmp = path.join(this.o.layout.journalDir, `.pull-${process.pid}`);
    try {
      await this.o.remote.fetchPart(part, tmp);
      const data = await fs.promises.readFile(tmp);
      const fd = fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_APPEND | fs.constants.O_CREAT, 0o600);
      try {
        let off = 0;
        while (off < data.length) off += fs.writeSync(fd, data, off, data.length - off);
        fs.fsyncSync(fd);
      } finally {
        fs.closeSync(fd);
      }
    } finally {
      fs.rmSync(tmp, { force: true });
    }
  }

  /**
   * Start mirroring: blobs committed to `blobs` go up, and missing ones are fetched from the
   * bucket on first use; what a crash left in the spool and not in the bucket (own segment
   * bytes, blobs) is queued now. `beforeUpload` makes the spool durable first, so the bucket
   * only ever holds what the spool holds durably.
   */
  async start(blobs: BlobStore, beforeUpload: () => Promise<void>): Promise<void> {
    this.blobs = blobs;
    this.beforeUpload = beforeUpload;
    blobs.mirror = { committed: (hash) => this.blobCommitted(hash), fetch: this.fetchBlob };
    for (const s of listSegments(this.o.layout.journalDir)) {
      if (this.state.imported[String(s.index)]) continue;
      const size = fs.statSync(s.path).size;
      if (size > (this.uploaded.get(s.index) ?? 0)) this.wanted.set(s.index, size);
    }
    // blobs committed since the last time every committed blob was known to be up (a crash
    // may have come between): uploaded again, which finds the ones that are there already
    for (const b of blobs.list()) if (b.mtimeMs >= this.state.blobsSyncedAt - DEFAULTS.journal.mirrorBlobClockSlackMs) this.pendingBlobs.add(b.hash);
    if (this.wanted.size + this.pendingBlobs.size > 0) {
      this.o.log.info({ segments: this.wanted.size, blobs: this.pendingBlobs.size }, 'journal mirror: uploading what the spool has and the bucket does not');
      this.schedule(0);
    }
  }

  private readonly fetchBlob = (ref: string, dest: string): Promise<void> => this.o.remote.fetchBlob(ref, dest);

  /** The writer appended whole records: segment `seg` is now `bytes` long. */
  segmentAppended(seg: number, bytes: number): void {
    if ((this.wanted.get(seg) ?? 0) < bytes) this.wanted.set(seg, bytes);
    this.schedule(this.o.intervalMs);
  }

  blobCommitted(hash: string): void {
    this.pendingBlobs.add(hash);
    this.schedule(this.o.intervalMs);
  }

  /** Parts and blobs the bucket does not have yet. */
  get backlog(): number {
    let n = this.pendingBlobs.size;
    for (const [seg, bytes] of this.wanted) if (bytes > (this.uploaded.get(seg) ?? 0)) n++;
    return n;
  }

  private schedule(ms: number): void {
    if (this.timer || this.closed) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.pump().then(
        () => {
          this.retryMs = this.o.retryMs;
          if (this.backlog > 0) this.schedule(this.o.intervalMs);
        },
        (err: unknown) => {
          this.o.log.warn({ err: (err as Error).message, backlog: this.backlog, retryMs: this.retryMs }, 'journal mirror: upload to the bucket failed; will retry (the spool keeps everything)');
          const wait = this.retryMs;
          this.retryMs = Math.min(this.retryMs * 2, DEFAULTS.journal.mirrorRetryMaxMs);
          this.schedule(wait);
        },
      );
    }, ms);
    this.timer.unref();
  }

  /** Upload everything queued; one pass at a time. */
  pump(): Promise<void> {
    if (!this.pumping) {
      this.pumping = this.pumpOnce().finally(() => {
        this.pumping = null;
      });
    }
    return this.pumping;
  }

  private async pumpOnce(): Promise<void> {
    const began = Date.now();
    await this.beforeUpload();
    // Only what beforeUpload made durable goes up: records appended while this pass awaits the
    // network may not be in the spool after a crash, nor their blobs in the bucket yet.
    const blobsNow = [...this.pendingBlobs];
    const targets = [...this.wanted].sort((a, b) => a[0] - b[0]);
    // blobs before the records that name them: a host reading the bucket finds both
    for (const hash of blobsNow) {
      const file = this.blobs?.pathOf(hash);
      let size: number;
      try {
        size = fs.statSync(file as string).size;
      } catch {
        this.pendingBlobs.delete(hash); // gc removed it meanwhile
        continue;
      }
      if (await this.o.remote.putBlob(hash, file as string, size)) {
        this.stats.blobs++;
        this.stats.blobBytes += size;
      }
      this.pendingBlobs.delete(hash);
    }
    for (const [seg, want] of targets) {
      const from = this.uploaded.get(seg) ?? 0;
      const file = path.join(this.o.layout.journalDir, segmentName(seg));
      if (want > from && localSize(file) < want) {
        // gc rewrote or removed this closed segment meanwhile: the bucket keeps what it had
        this.o.log.warn({ segment: seg, uploaded: from }, 'journal mirror: a segment changed by gc before all of it was uploaded; the bucket keeps the part it had');
        this.wanted.delete(seg);
        continue;
      }
      if (want > from) {
        const data = await readRange(file, from, want - from);
        const at = { writer: this.state.writer, segment: seg, offset: from };
        this.state.seen[this.state.writer] = { segment: seg, offset: from };
        if (await this.o.remote.putPart(at, data)) {
          this.stats.parts++;
          this.stats.partBytes += data.length;
          this.uploaded.set(seg, from + data.length);
        } else {
          // an attempt this spool forgot (a crash before mirror.json was written): its length counts
          const there = (await this.o.remote.listParts(at.writer, at)).find((p) => p.segment === seg && p.offset === from);
          this.uploaded.set(seg, from + (there?.size ?? 0));
          continue; // the rest goes up in the next part
        }
      }
      if ((this.uploaded.get(seg) ?? 0) >= (this.wanted.get(seg) ?? 0)) this.wanted.delete(seg);
    }
    if (this.pendingBlobs.size === 0) this.state.blobsSyncedAt = began;
    this.rememberUploads();
  }

  private rememberUploads(): void {
    // a pass a timed-out drain left running: the lock (and mirror.json) may be another's now
    if (this.closed) return;
    for (const [seg, bytes] of this.uploaded) this.state.uploaded[String(seg)] = bytes;
    writeState(this.stateFile, this.state);
  }

  /**
   * Upload what is left, for at most `timeoutMs`; then stop the timer. Returns whether the
   * bucket has everything; if not, says so in the log (the spool keeps it, and the next mount or
   * journal command on this state directory uploads it).
   */
  async drain(timeoutMs: number): Promise<boolean> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const deadline = Date.now() + timeoutMs;
    let lastErr: unknown;
    while (this.backlog > 0 && Date.now() < deadline) {
      try {
        await withTimeout(this.pump(), deadline - Date.now());
      } catch (err) {
        lastErr = err;
        await new Promise((r) => setTimeout(r, Math.min(this.retryMs, Math.max(0, deadline - Date.now()))));
      }
    }
    this.closed = true;
    const left = this.backlog;
    this.o.log.info({ ...this.stats, writer: this.state.writer, bucket: this.o.remote.location }, 'journal mirror: closed');
    if (left > 0) {
      this.o.log.error(
        { backlog: left, bucket: this.o.remote.location, spool: this.o.layout.root, err: lastErr ? (lastErr as Error).message : undefined },
        `journal mirror: ${left} journal part(s)/blob(s) not uploaded to ${this.o.remote.location} within ${timeoutMs} ms; they are kept in ${this.o.layout.root} and uploaded by the next mount or rollback there`,
      );
    }
    return left === 0;
  }
}


function readState(file: string): MirrorState | null {
  try {
    const s = JSON.parse(fs.readFileSync(file, 'utf8')) as Partial<MirrorState>;
    if (typeof s.writer !== 'string' || !/^[A-Za-z0-9._-]+$/.test(s.writer)) return null;
    return { writer: s.writer, imported: s.imported ?? {}, seen: s.seen ?? {}, uploaded: s.uploaded ?? {}, blobsSyncedAt: s.blobsSyncedAt ?? 0 };
  } catch {
    return null;
  }
}

function writeState(file: string, s: MirrorState): void {
  const tmp = `${file}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify(s, null, 2) + '\n', { mode: 0o600 });
  fs.renameSync(tmp, file);
}

function localSize(file: string): number {
  try {
    return fs.statSync(file).size;
  } catch {
    return 0;
  }
}

async function readRange(file: string, start: number, length: number): Promise<Buffer> {
  const fh = await fs.promises.open(file, 'r');
  try {
    const buf = Buffer.allocUnsafe(length);
    let off = 0;
    while (off < length) {
      const { bytesRead } = await fh.read(buf, off, length - off, start + off);
      if (bytesRead === 0) throw new Error(`${file} is shorter than the journal wrote`);
      off += bytesRead;
    }
    return buf;
  } finally {
    await fh.close();
  }
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let t: NodeJS.Timeout | undefined;
  return Promise.race([p, new Promise<T>((_, reject) => (t = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), Math.max(0, ms))))]).finally(() => clearTimeout(t));
}
