import fs from 'node:fs';
import path from 'node:path';
import { scanSegment, type ScannedSegment } from './codec.js';
import { listSegments, segmentBeingWritten, segmentName, stateLayout, type SegmentFile } from './layout.js';
import type { JournalRecord } from './record.js';

export interface LocatedRecord {
  record: JournalRecord;
  segment: number;
  offset: number;
}

/**
 * record: a line that does not read back (checksum, format); missing: a segment gone; cut: a
 * segment that lost records at its end or before its close record; framing: records where
 * they cannot be (after a close record, a segment's records under another number)
 */
export type JournalProblemKind = 'record' | 'missing' | 'cut' | 'framing';

export interface JournalProblem {
  kind: JournalProblemKind;
  /** the segment's path (or the name a missing one would have) */
  segment: string;
  index: number;
  offset: number;
  reason: string;
  /** the unreadable range lies after this operation's intent (none: from the journal's start) */
  afterSeq?: number;
  /** ... and before this one's (none: up to the journal's end) */
  beforeSeq?: number;
}

export interface JournalContents {
  records: LocatedRecord[];
  segments: SegmentFile[];
  /** damage: records that cannot be read, segments missing or cut short */
  problems: JournalProblem[];
  /**
   * A torn record at the end of the segment a writer was writing when it stopped (a crash; or,
   * in a journal of the first format, of the last segment): the next writer to start cuts it.
   */
  tornTail: (JournalProblem & { bytes: number; path: string }) | null;
  /** the segment a writer is writing, or was when it stopped (no close record yet) */
  unclosed: { path: string; index: number; end: number } | null;
  /** segments imported from another host's writer that has not closed them (yet) */
  openElsewhere: number[];
}

/** Segment numbers a GCS mirror imported from other hosts' writers (mirror.json), never ours to judge. */
function importedSegments(stateDir: string): Set<number> {
  try {
    const m = JSON.parse(fs.readFileSync(path.join(stateDir, 'mirror.json'), 'utf8')) as { imported?: Record<string, unknown> };
    return new Set(Object.keys(m.imported ?? {}).map(Number));
  } catch {
    return new Set();
  }
}

/**
 * What the integrity checks need to know of one segment, without its records: taken from a scan,
 * or (segment-index.ts) from an index entry of the same file unchanged since.
 */
export interface SegmentFacts {
  /** length of the file when it was scanned */
  size: number;
  lines: number;
  /** holds a `segment` or `close` record (else: a segment of the first format) */
  framed: boolean;
  /** the number named by a leading `segment` record */
  header: number | null;
  close: { offset: number; length: number; bytes: number; reason: string; after: number } | null;
  problems: { offset: number; reason: string }[];
  tornTail: ScannedSegment['tornTail'];
}

export function segmentFacts(scan: ScannedSegment, size: number): SegmentFacts {
  const first = scan.lines[0];
  const closeAt = scan.lines.findIndex((l) => l.record.kind === 'close');
  const close = closeAt >= 0 ? scan.lines[closeAt] : undefined;
  return {
    size,
    lines: scan.lines.length,
    framed: scan.lines.some((l) => l.record.kind === 'segment' || l.record.kind === 'close'),
    header: first?.record.kind === 'segment' ? first.record.index : null,
    close: close && close.record.kind === 'close' ? { offset: close.offset, length: close.length, bytes: close.record.bytes, reason: close.record.reason, after: scan.lines.length - 1 - closeAt } : null,
    problems: scan.problems,
    tornTail: scan.tornTail,
  };
}

export interface SegmentCheck {
  problems: JournalProblem[];
  tornTail: JournalContents['tornTail'];
  unclosed: JournalContents['unclosed'];
  openElsewhere: number[];
}

/** The whole-journal checks (gaps, framing, damage) over every segment's facts, in order. */
export function checkSegments(stateDir: string, segments: SegmentFile[], factsOf: (seg: SegmentFile) => SegmentFacts): SegmentCheck {
  const layout = stateLayout(stateDir);
  const writing = segmentBeingWritten(layout.journalDir);
  const imported = importedSegments(stateDir);
  const problems: JournalProblem[] = [];
  const openElsewhere: number[] = [];
  let tornTail: JournalContents['tornTail'] = null;
  let unclosed: JournalContents['unclosed'] = null;
  segments.forEach((seg, i) => {
    const prev = segments[i - 1];
    if (prev) {
      // gc removes segments from the start only: a gap after the first one is a loss
      for (let k = prev.index + 1; k < seg.index; k++) {
        problems.push({ kind: 'missing', segment: path.join(layout.journalDir, segmentName(k)), index: k, offset: 0, reason: `segment missing (${segmentName(prev.index)} and ${segmentName(seg.index)} exist)` });
      }
    }
    const f = factsOf(seg);
    const at = (offset: number, reason: string, kind: JournalProblemKind = 'record'): JournalProblem => ({ kind, segment: seg.path, index: seg.index, offset, reason });
    for (const p of f.problems) problems.push(at(p.offset, p.reason));
    const framed = f.framed || (f.lines === 0 && f.size > 0 && seg.index === writing);
    const isLast = i === segments.length - 1;
    if (!framed) {
      // first format: only the last segment may end torn, and nothing shows a cut at a line boundary
      if (f.tornTail) {
        const t = f.tornTail;
        if (isLast) tornTail = { ...at(t.offset, t.reason), bytes: t.bytes, path: seg.path };
        else problems.push(at(t.offset, `${t.reason} (${t.bytes} bytes) in a closed segment`, 'cut'));
      }
      return;
    }
    checkFraming(seg, f, { writing: seg.index === writing, imported: imported.has(seg.index), isLast }, {
      problem: (offset, reason, kind) => problems.push(at(offset, reason, kind)),
      torn: (t) => (tornTail = { ...at(t.offset, t.reason), bytes: t.bytes, path: seg.path }),
      unclosed: (end) => (unclosed = { path: seg.path, index: seg.index, end }),
      openElsewhere: () => openElsewhere.push(seg.index),
    });
  });
  return { problems, tornTail, unclosed, openElsewhere };
}

/** Read every segment of the journal in a state directory. Never writes. */
export function readJournal(stateDir: string): JournalContents {
  const layout = stateLayout(stateDir);
  const segments = listSegments(layout.journalDir);
  const records: LocatedRecord[] = [];
  const check = checkSegments(stateDir, segments, (seg) => {
    const buf = fs.readFileSync(seg.path);
    const scan = scanSegment(buf);
    for (const l of scan.lines) records.push({ record: l.record, segment: seg.index, offset: l.offset });
    return segmentFacts(scan, buf.length);
  });
  placeProblems(check.problems, records);
  return { records, segments, ...check };
}

interface FramingSink {
  problem(offset: number, reason: string, kind: JournalProblemKind): void;
  torn(t: NonNullable<ScannedSegment['tornTail']>): void;
  unclosed(end: number): void;
  openElsewhere(): void;
}

/** A framed segment starts with its `segment` record and ends with its `close` record, at the length it names. */
function checkFraming(seg: SegmentFile, f: SegmentFacts, is: { writing: boolean; imported: boolean; isLast: boolean }, out: FramingSink): void {
  const size = f.size;
  if (f.header !== null && f.header !== seg.index) {
    out.problem(0, `holds the records of segment ${segmentName(f.header)} (renamed or copied over)`, 'framing');
  }
  const close = f.close;
  if (close) {
    const after = close.after;
    if (after > 0) out.problem(close.offset + close.length, `${after} record(s) after the segment's close record`, 'framing');
    else if (f.tornTail) out.problem(f.tornTail.offset, `${f.tornTail.bytes} bytes after the segment's close record`, 'framing');
    if (close.bytes !== close.offset) {
      out.problem(close.offset, close.bytes > close.offset
        ? `${close.bytes - close.offset} bytes of records missing before the close record (it was written at byte ${close.bytes})`
        : `${close.offset - close.bytes} bytes more before the close record than when it was written`, 'cut');
    }
    if (close.reason === 'roll' && is.isLast) {
      out.problem(size, `segment ${segmentName(seg.index + 1)} is missing: this one was closed to go on there`, 'missing');
    }
    return;
  }
  const tornTailF = f.tornTail;
  if (is.writing) {
    // the writer's own segment: it is being written, or a crash stopped it (the next start closes it)
    if (tornTailF) out.torn(tornTailF);
    out.unclosed(tornTailF ? tornTailF.offset : size);
    return;
  }
  if (is.imported) {
    // another host's writer may still be writing it: its parts arrive whole, so a torn end is damage
    if (tornTailF) out.problem(tornTailF.offset, `${tornTailF.reason} (${tornTailF.bytes} bytes) in a segment imported from another host`, 'cut');
    out.openElsewhere();
    return;
  }
  const end = tornTailF ? tornTailF.offset : size;
  const why = is.isLast ? 'its writer closed the journal' : 'a later segment exists';
  out.problem(end, `the segment ends at byte ${end}${tornTailF ? ` in ${tornTailF.bytes} bytes of a damaged record (${tornTailF.reason})` : ''} without its close record: records at its end were cut off (it was complete: ${why})`, 'cut');
}

/** Name the operations around each problem: what a reader cannot know lies between them. */
function placeProblems(problems: JournalProblem[], records: LocatedRecord[]): void {
  for (const p of problems) {
    let afterSeq: number | undefined;
    let beforeSeq: number | undefined;
    for (const r of records) {
      if (r.record.kind !== 'op') continue;
      if (r.segment < p.index || (r.segment === p.index && r.offset < p.offset)) afterSeq = r.record.seq;
      else {
        beforeSeq = r.record.seq;
        break;
      }
    }
    if (afterSeq !== undefined) p.afterSeq = afterSeq;
    if (beforeSeq !== undefined) p.beforeSeq = beforeSeq;
  }
}

/** "after #41 and before #57" */
export function describeRange(p: JournalProblem): string {
  if (p.afterSeq === undefined && p.beforeSeq === undefined) return 'anywhere in the journal';
  if (p.afterSeq === undefined) return `before #${p.beforeSeq}`;
  if (p.beforeSeq === undefined) return `after #${p.afterSeq}`;
  return `after #${p.afterSeq} and before #${p.beforeSeq}`;
}

export function describeProblem(p: JournalProblem): string {
  return `${p.segment} at byte ${p.offset}: ${p.reason} (records ${describeRange(p)})`;
}

/** The journal is damaged: what needs its whole history refuses rather than work from part of it. */
export class JournalDamagedError extends Error {
  constructor(readonly problems: JournalProblem[]) {
    const shown = problems.slice(0, 3).map(describeProblem);
    super(
      `the journal cannot be read whole, so nothing was done: ${shown.join('; ')}` +
        `${problems.length > shown.length ? `; and ${problems.length - shown.length} more` : ''}. 'ledgerfs verify' lists every problem`,
    );
  }
}

/** readJournal for what needs every record (rollback, log, show, diff): damage is refused. */
export function readIntactJournal(stateDir: string): JournalContents {
  const c = readJournal(stateDir);
  if (c.problems.length > 0) throw new JournalDamagedError(c.problems);
  return c;
}
