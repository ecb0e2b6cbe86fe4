import fs from 'node:fs';
import { scanSegment } from './codec.js';
import { listSegments, stateLayout, type SegmentFile } from './layout.js';
import type { JournalRecord } from './record.js';

export interface LocatedRecord {
  record: JournalRecord;
  segment: number;
  offset: number;
}

export interface JournalProblem {
  segment: string;
  offset: number;
  reason: string;
}

export interface JournalContents {
  records: LocatedRecord[];
  segments: SegmentFile[];
  /** damage that is not a torn tail of the last segment */
  problems: JournalProblem[];
  /** an incomplete or damaged end of the last segment (cut by the next writer to start) */
  tornTail: (JournalProblem & { bytes: number; path: string; index: number }) | null;
}

/** Read every segment of the journal in a state directory. Never writes. */
export function readJournal(stateDir: string): JournalContents {
  const segments = listSegments(stateLayout(stateDir).journalDir);
  const records: LocatedRecord[] = [];
  const problems: JournalProblem[] = [];
  let tornTail: JournalContents['tornTail'] = null;
  segments.forEach((seg, i) => {
    const scan = scanSegment(fs.readFileSync(seg.path));
    const name = seg.path;
    for (const l of scan.lines) records.push({ record: l.record, segment: seg.index, offset: l.offset });
    for (const p of scan.problems) problems.push({ segment: name, offset: p.offset, reason: p.reason });
    if (scan.tornTail) {
      const t = scan.tornTail;
      if (i === segments.length - 1) {
        tornTail = { segment: name, path: seg.path, index: seg.index, offset: t.offset, bytes: t.bytes, reason: t.reason };
      } else {
        problems.push({ segment: name, offset: t.offset, reason: `${t.reason} (${t.bytes} bytes) in a closed segment` });
      }
    }
  });
  return { records, segments, problems, tornTail };
}
