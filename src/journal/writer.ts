import fs from 'node:fs';
import { performance } from 'node:perf_hooks';
import { promisify } from 'node:util';
import { DEFAULTS } from '../config/index.js';
import { LatencyCounts, type Logger, VfsError } from '../core/index.js';
import { encodeRecord } from './codec.js';
import { listSegments, segmentName, syncDir, writingMarker } from './layout.js';
import type { JournalRecord } from './record.js';

const fsyncAsync = promisify(fs.fsync);

export interface WriterOptions {
  journalDir: string;
  /** roll to a new segment once the current one reaches this size */
  segmentBytes: number;
  /** group commit: fsync the journal at most this often while it has unsynced records */
  syncIntervalMs: number;
  /** records that may wait (outcomes) are written within this delay, or with the next intent */
  flushDelayMs: number;
  log: Logger;
  /** made durable before the journal is (blobs its records refer to) */
  beforeSync?: () => Promise<void>;
  /** whole records were written: segment `index` is now `bytes` long (the bucket mirror's feed) */
  onAppend?: (index: number, bytes: number) => void;
  /** records that could not be written because the state directory's file system is full */
  onFull?: (records: JournalRecord[], err: VfsError) => void;
}

/**
 * Appends records to the active segment. Two speeds:
 * - `appendNow` (intents): the record reaches the file (write(2), page cache) before the call
 *   returns, so a kill -9 right after cannot lose it; this is what lets every change that reached
 *   the backend be undone.
 * - `appendSoon` (outcomes): buffered briefly and written with the next intent or after
 *   `flushDelayMs`. Losing one to a crash is harmless: recovery re-derives it.
 * fsync is batched (group commit) on a timer off the event loop, and on demand by `sync()`,
 * which the fsync of workspace data waits for.
 */
export class JournalWriter {
  private fd: number;
  private segIndex: number;
  private segBytes: number;
  /** records waiting for the next write(2); encoded only then (a retracted one never is) */
  private pending: JournalRecord[] = [];
  private flushTimer: NodeJS.Timeout | null = null;
  private syncTimer: NodeJS.Timeout | null = null;
  /** bytes ever written by this writer, and how many of them are known durable */
  private written = 0;
  /** records written to the file by this writer (metrics) */
  recordsWritten = 0;
  /** how long each fsync of the journal took (metrics) */
  readonly fsyncLatency = new LatencyCounts(DEFAULTS.metricsLatencyBuckets);
  private durable = 0;
  private syncing: Promise<void> | null = null;
  private closed = false;
  private seq: number;
  /** the length of a segment holding only its `segment` record */
  private headerBytes = 0;

  private constructor(private readonly o: WriterOptions, lastSeq: number) {
    fs.mkdirSync(o.journalDir, { recursive: true });
    const segs = listSegments(o.journalDir);
    const last = segs[segs.length - 1];
    this.seq = lastSeq;
    // Every writer starts a segment of its own: a segment then ends with its close record, or is
    // the one a writer was writing when it stopped (named by writing.json), which is what lets a
    // reader tell a crash's torn tail from records lost later.
    this.segIndex = last ? last.index + 1 : 1;
    this.fd = this.openSegment();
    this.segBytes = 0;
    this.writeFraming({ kind: 'segment', index: this.segIndex, time: Date.now() });
    this.headerBytes = this.segBytes;
  }

  /** Name the segment about to be written (durably), then create it. */
  private openSegment(): number {
    const marker = writingMarker(this.o.journalDir);
    const tmp = fs.openSync(`${marker}.tmp`, 'w', 0o600);
    try {
      fs.writeSync(tmp, JSON.stringify({ segment: this.segIndex, pid: process.pid }) + '\n');
      fs.fsyncSync(tmp);
    } finally {
      fs.closeSync(tmp);
    }
    fs.renameSync(`${marker}.tmp`, marker);
    const fd = fs.openSync(`${this.o.journalDir}/${segmentName(this.segIndex)}`, fs.constants.O_WRONLY | fs.constants.O_APPEND | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o600);
    syncDir(this.o.journalDir);
    return fd;
  }

  /** A segment's first or last record: written at once, outside the batching of records. */
  private writeFraming(rec: JournalRecord): void {
    const data = encodeRecord(rec);
    let off = 0;
    while (off < data.length) off += fs.writeSync(this.fd, data, off, data.length - off);
    this.segBytes += data.length;
    this.written += data.length;
    this.recordsWritten++;
    this.o.onAppend?.(this.segIndex, this.segBytes);
  }

  private closeRecord(reason: 'roll' | 'close'): JournalRecord {
    return { kind: 'close', index: this.segIndex, time: Date.now(), reason, bytes: this.segBytes };
  }

  /** Open for appending after `lastSeq`. The caller has cut any torn tail already. */
  static open(o: WriterOptions, lastSeq: number): JournalWriter {
    return new JournalWriter(o, lastSeq);
  }

  nextSeq(): number {
    return ++this.seq;
  }

  get lastSeq(): number {
    return this.seq;
  }

  appendNow(rec: JournalRecord): void {
    this.pending.push(rec);
    try {
      this.flush();
    } catch (err) {
      // the caller's change does not happen: its record must not be written later either (the
      // records before it, outcomes of changes made, wait for room: see flush)
      const i = this.pending.lastIndexOf(rec);
      if (i >= 0) this.pending.splice(i, 1);
      throw err;
    }
  }

  appendSoon(rec: JournalRecord): void {
    this.pending.push(rec);
    if (!this.flushTimer && !this.closed) {
      this.flushTimer = setTimeout(() => {
        this.flushTimer = null;
        try {
          this.flush();
        } catch (err) {
          // a full state disk: the records wait (written with the next flush that finds room)
          if ((err as VfsError).code === 'ENOSPC') this.o.log.warn({ err: (err as Error).message, waiting: this.pending.length }, 'journal: buffered records wait for room on the state disk');
          else this.o.log.error({ err: (err as Error).message }, 'journal: writing buffered records failed');
        }
      }, this.o.flushDelayMs);
      this.flushTimer.unref();
    }
  }

  /**
   * Take back a record given to appendSoon that is still waiting (true), e.g. an outcome a later
   * record makes redundant; false once it reached the file.
   */
  retract(rec: JournalRecord): boolean {
    const i = this.pending.lastIndexOf(rec);
    if (i < 0) return false;
    this.pending.splice(i, 1);
    return true;
  }

  /** bytes written to the journal by this writer */
  get bytesWritten(): number {
    return this.written;
  }

  /** Write buffered records to the file now. Throws VfsError(EIO) if the journal cannot be written. */
  flush(): void {
    if (this.pending.length === 0) return;
    if (this.closed) throw new VfsError('EIO', 'journal: writer is closed');
    const batch = this.pending;
    const records = batch.length;
    const data = batch.length === 1 ? encodeRecord(batch[0] as JournalRecord) : Buffer.concat(batch.map(encodeRecord));
    this.pending = [];
    let off = 0;
    try {
      while (off < data.length) off += fs.writeSync(this.fd, data, off, data.length - off);
    } catch (err) {
      // Never leave half a line that later records would follow: cut back to the last whole one.
      try {
        fs.ftruncateSync(this.fd, this.segBytes);
      } catch {
        /* the reader treats it as damage; the next start reports it */
      }
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOSPC' || code === 'EDQUOT') {
        // a full state disk: the change is refused (ENOSPC, as a full disk answers) rather than made unrecorded
        const full = new VfsError('ENOSPC', `journal: the state directory's file system is full (${this.o.journalDir}): the change was refused rather than made without its record`);
        // nothing of the batch reached the file: keep it for the next flush, once there is room
        this.pending = batch.concat(this.pending);
        this.o.onFull?.(batch, full);
        throw full;
      }
      throw new VfsError('EIO', `journal: cannot append to ${this.o.journalDir}: ${(err as Error).message}`);
    }
    this.segBytes += data.length;
    this.written += data.length;
    this.recordsWritten += records;
    this.o.onAppend?.(this.segIndex, this.segBytes);
    if (this.segBytes >= this.o.segmentBytes) this.roll();
    this.scheduleSync();
  }

  private scheduleSync(): void {
    if (this.syncTimer || this.closed) return;
    this.syncTimer = setTimeout(() => {
      this.syncTimer = null;
      this.sync().catch((err: unknown) => this.o.log.error({ err: (err as Error).message }, 'journal: group commit fsync failed'));
    }, this.o.syncIntervalMs);
    this.syncTimer.unref();
  }

  /** Start a new segment; the old one is closed and made durable first so segments only ever end whole. */
  private roll(): void {
    const old = this.fd;
    this.writeFraming(this.closeRecord('roll'));
    fs.fsyncSync(old);
    this.durable = this.written;
    // An fsync may still be running on the old descriptor in the thread pool: close it after.
    if (this.syncing) void this.syncing.catch(() => undefined).finally(() => fs.closeSync(old));
    else fs.closeSync(old);
    this.segIndex++;
    this.fd = this.openSegment();
    this.segBytes = 0;
    this.writeFraming({ kind: 'segment', index: this.segIndex, time: Date.now() });
    this.headerBytes = this.segBytes;
  }

  /** Close the active segment and open the next one now (gc compacts closed segments only). */
  rollNow(): void {
    this.flush();
    if (this.segBytes > this.headerBytes) this.roll();
  }

  get activeSegment(): number {
    return this.segIndex;
  }

  /** Resolve once every record appended so far is durable (batched with concurrent callers). */
  async sync(): Promise<void> {
    this.flush();
    const target = this.written;
    while (this.durable < target) {
      if (!this.syncing) {
        const upTo = this.written;
        const fd = this.fd;
        this.syncing = (async () => {
          try {
            if (this.o.beforeSync) await this.o.beforeSync();
            const t0 = performance.now();
            await fsyncAsync(fd);
            this.fsyncLatency.observe((performance.now() - t0) / 1000);
            if (upTo > this.durable) this.durable = upTo;
          } finally {
            this.syncing = null;
          }
        })();
      }
      await this.syncing;
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    if (this.flushTimer) clearTimeout(this.flushTimer);
    if (this.syncTimer) clearTimeout(this.syncTimer);
    this.flushTimer = this.syncTimer = null;
    let clean = false;
    try {
      await this.sync();
      this.writeFraming(this.closeRecord('close'));
      await this.sync();
      clean = true;
    } finally {
      this.closed = true;
      if (this.syncing) await this.syncing.catch(() => undefined);
      fs.closeSync(this.fd);
    }
    // Only once the close record is durable: from now on a segment without one has lost records.
    if (clean) {
      fs.rmSync(writingMarker(this.o.journalDir), { force: true });
      syncDir(this.o.journalDir);
    }
  }
}
