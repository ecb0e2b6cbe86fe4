import fs from 'node:fs';
import { scanSegment } from './codec.js';
import { listSegments, stateLayout } from './layout.js';
import type { JournalRecord } from './record.js';

/**
 * Follow a journal as it is written (`ledgerfs log --follow`): the segments are read from where
 * the last look stopped, a whole line at a time (a line being written is read next time), and a
 * new segment is picked up when the writer rolls over. Reads files only, so it follows a live
 * daemon and an idle workspace alike, and never waits on the daemon.
 */
export class JournalFollower {
  private segment = 0;
  private offset = 0;

  constructor(private readonly stateDir: string) {}

  /** Records appended since the last call (the first call: everything there is). */
  poll(): JournalRecord[] {
    const out: JournalRecord[] = [];
    for (const seg of listSegments(stateLayout(this.stateDir).journalDir)) {
      if (seg.index < this.segment) continue;
      if (seg.index > this.segment) {
        this.segment = seg.index;
        this.offset = 0;
      }
      let buf: Buffer;
      try {
        const fd = fs.openSync(seg.path, 'r');
        try {
          const size = fs.fstatSync(fd).size;
          // gc rewrote the segment shorter: start it over
          if (size < this.offset) this.offset = 0;
          buf = Buffer.alloc(size - this.offset);
          let got = 0;
          while (got < buf.length) {
            const n = fs.readSync(fd, buf, got, buf.length - got, this.offset + got);
            if (n === 0) break;
            got += n;
          }
          buf = buf.subarray(0, got);
        } finally {
          fs.closeSync(fd);
        }
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue; // gc removed it meanwhile
        throw err;
      }
      const scan = scanSegment(buf);
      for (const l of scan.lines) out.push(l.record);
      const last = scan.lines.at(-1);
      if (last) this.offset += last.offset + last.length;
    }
    return out;
  }
}

/** The operation a record belongs to (its own seq, or the one it completes); undefined: none. */
export function recordSeq(r: JournalRecord): number | undefined {
  if ('seq' in r && typeof r.seq === 'number') return r.seq;
  if ('of' in r && typeof r.of === 'number') return r.of;
  return undefined;
}
