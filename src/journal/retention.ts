import fs from 'node:fs';
import type { JournalRetention } from '../config/index.js';
import type { Logger } from '../core/index.js';
import { BlobStore } from './blobs.js';
import { scanSegment } from './codec.js';
import type { GcResult } from './gc.js';
import { listSegments, stateLayout } from './layout.js';
import type { JournalService } from './service.js';

/** Bytes the journal takes: its segments and before-images. */
export function journalBytes(stateDir: string): number {
  const layout = stateLayout(stateDir);
  let n = 0;
  for (const seg of listSegments(layout.journalDir)) {
    try {
      n += fs.statSync(seg.path).size;
    } catch {
      /* gone meanwhile */
    }
  }
  for (const b of new BlobStore(layout.blobsDir).list()) n += b.size;
  return n;
}

/** Time of the first record of the oldest segment (its first few KiB are enough), or null. */
function oldestTime(stateDir: string): number | null {
  const first = listSegments(stateLayout(stateDir).journalDir)[0];
  if (!first) return null;
  try {
    const fd = fs.openSync(first.path, 'r');
    try {
      const buf = Buffer.alloc(4096);
      const n = fs.readSync(fd, buf, 0, buf.length, 0);
      const line = scanSegment(buf.subarray(0, n)).lines[0];
      return line ? line.record.time : null;
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return null;
  }
}

/**
 * A mount's `journal:` retention, run in the background: gc only when the journal is over
 * maxBytes or holds something older than keep, never the mount's own session (the service
 * protects it), and not again while a run that could drop nothing meets the same journal.
 */
export class RetentionRunner {
  private idle: { first: string | undefined; bytes: number } | null = null;
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly service: JournalService, private readonly stateDir: string, private readonly r: JournalRetention, private readonly log: Logger) {}

  start(firstMs: number, everyMs: number): void {
    const tick = () => {
      this.runOnce().catch((err: unknown) => this.log.warn({ err: (err as Error).message }, 'journal retention: gc failed; tried again later'));
    };
    this.timer = setTimeout(() => {
      tick();
      this.timer = setInterval(tick, everyMs);
      this.timer.unref();
    }, firstMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  /** One look: gc if the journal is over its bounds. The result, or null when nothing needed doing. */
  async runOnce(): Promise<GcResult | null> {
    const bytes = journalBytes(this.stateDir);
    const oldest = oldestTime(this.stateDir);
    const over = this.r.maxBytes !== undefined && bytes > this.r.maxBytes;
    const old = this.r.keepMs !== undefined && oldest !== null && oldest < Date.now() - this.r.keepMs;
    if (!over && !old) return null;
    const first = listSegments(stateLayout(this.stateDir).journalDir)[0]?.path;
    // the last run could drop nothing from this same journal (a mounted or unfinished session
    // holds it): wait until it changed, by a new oldest segment or a tenth (at least 1 MiB) more bytes
    if (this.idle && this.idle.first === first && bytes < this.idle.bytes + Math.max(this.idle.bytes / 10, 1024 * 1024)) return null;
    const result = await this.service.gc(this.r.keepMs, { ...(this.r.maxBytes !== undefined ? { maxBytes: this.r.maxBytes } : {}), background: true });
    const dropped = result.droppedOperations > 0 || result.blobsRemoved > 0 || result.segmentsRemoved > 0;
    this.idle = dropped ? null : { first, bytes };
    if (dropped) {
      this.log.info(
        { sessions: result.droppedSessions, operations: result.droppedOperations, blobs: result.blobsRemoved, bytesFreed: result.bytesFreed, firstSeq: result.firstSeq },
        `journal retention: dropped ${result.droppedSessions.length} session(s) (${result.droppedSessions.join(', ')}), ${result.droppedOperations} mutation(s), ${result.blobsRemoved} before-image(s): ${result.bytesFreed} bytes freed`,
      );
    }
    const after = bytes - result.bytesFreed;
    if (this.r.maxBytes !== undefined && after > this.r.maxBytes) {
      this.log.warn(
        { bytes: after, maxBytes: this.r.maxBytes, stoppedAt: result.stoppedAt },
        `journal retention: the journal takes ${after} bytes, over journal.maxBytes ${this.r.maxBytes}${result.stoppedAt ? `: dropping stopped at #${result.stoppedAt.seq} (session ${result.stoppedAt.session}: ${result.stoppedAt.reason})` : ''}`,
      );
    }
    return result;
  }
}
