import fs from 'node:fs';
import { BlobStore } from './blobs.js';
import { encodeRecord, scanSegment } from './codec.js';
import { buildHistory, type History, type Operation } from './history.js';
import { listSegments, stateLayout, syncDir } from './layout.js';
import { type LocatedRecord, readIntactJournal } from './reader.js';
import type { JournalRecord } from './record.js';
import { replaceFileSync } from '../core/index.js';

export interface GcResult {
  /** nothing was changed: what a gc would remove */
  dryRun: boolean;
  cutoff: string;
  /** sessions dropped, each whole (gc never drops part of one) */
  droppedSessions: string[];
  droppedOperations: number;
  keptOperations: number;
  /** the oldest seq still in the journal: the furthest a rollback can go back to is one before it */
  firstSeq: number | null;
  segmentsRemoved: number;
  segmentsRewritten: number;
  blobsRemoved: number;
  bytesFreed: number;
  /** where dropping stopped short of the cutoff, and why (a session that goes on after it) */
  stoppedAt: { seq: number; session: string; reason: string } | null;
  /** --max-bytes: the bound, and the journal's size (segments and before-images) before gc */
  maxBytes?: number;
  bytesBefore?: number;
}

export interface GcOptions {
  /** change nothing: the result says what would be removed */
  dryRun?: boolean;
  /** also drop the oldest whole sessions until segments and before-images take at most this */
  maxBytes?: number;
  /** sessions never dropped (the mount's own: still being written) */
  protect?: readonly string[];
}

/** Every blob the operations refer to. */
export function referencedBlobs(ops: Iterable<Operation>): Set<string> {
  const refs = new Set<string>();
  for (const op of ops) {
    for (const s of op.before) {
      if (s?.blob) refs.add(s.blob);
      for (const r of s?.ranges ?? []) refs.add(r.blob);
    }
    if (op.capture) refs.add(op.capture.blob);
    for (const r of op.ranges ?? []) if (r.blob) refs.add(r.blob);
  }
  return refs;
}

function lastTime(op: Operation): number {
  let t = op.time;
  for (const r of op.records) if (r.record.time > t) t = r.record.time;
  return t;
}

/**
 * The operations to drop: the longest run from the start of the journal that ended before the
 * cutoff, made of whole sessions only (a session part of which is kept keeps all of it, so a
 * rollback of a session undoes all of it or says why not). Always a prefix, so what remains is a
 * contiguous history that rolls back correctly to any point after its start. Unresolved
 * operations are never dropped.
 */
function dropPrefix(h: History, cutoff: number, protect: ReadonlySet<string> = new Set()): { drop: Set<number>; stoppedAt: GcResult['stoppedAt'] } {
  let end = 0;
  let stoppedAt: GcResult['stoppedAt'] = null;
  for (const op of h.ops) {
    if (protect.has(op.session)) {
      if (lastTime(op) < cutoff) stoppedAt = { seq: op.seq, session: op.session, reason: 'the session is still mounted' };
      break;
    }
    if (lastTime(op) >= cutoff || op.status === 'open' || op.status === 'pending') {
      if (lastTime(op) < cutoff) stoppedAt = { seq: op.seq, session: op.session, reason: 'not finished' };
      break;
    }
    end++;
  }
  // a session with an operation past the end goes on after it: keep all of it
  const goesOn = new Set(h.ops.slice(end).map((op) => op.session));
  const drop = new Set<number>();
  for (const op of h.ops.slice(0, end)) {
    if (goesOn.has(op.session)) {
      stoppedAt = { seq: op.seq, session: op.session, reason: 'the session goes on after the cutoff; gc drops whole sessions only' };
      break;
    }
    drop.add(op.seq);
  }
  return { drop, stoppedAt };
}

function keepRecord(r: JournalRecord, drop: Set<number>, cutoff: number, startKept: boolean): boolean {
  if (r.kind === 'segment' || r.kind === 'close') return true; // framing: rewritten with the segment
  if (r.kind === 'op') return !drop.has(r.seq);
  if (r.kind === 'start') return r.time >= cutoff || startKept;
  // a conflict tied to no operation goes by its time (its bytes stay in conflicts/ with their
  // note), and so does a rollback's intent and end
  if (!('of' in r) || r.of === undefined) return r.time >= cutoff;
  return !drop.has(r.of);
}

/**
 * The start records that stay although older than the cutoff: those of kept sessions, and the
 * last one before the first kept operation. A start record before a session's first operation is
 * what tells a whole session from one an older gc split (history.ts possiblySplit).
 */
function startsToKeep(records: LocatedRecord[], drop: Set<number>): Set<string> {
  const keep = new Set<string>();
  const keptSessions = new Set<string>();
  let lastStart: string | null = null;
  let firstKeptSeen = false;
  for (const { record: r, segment, offset } of records) {
    if (r.kind === 'start') lastStart = `${segment}:${offset}`;
    if (r.kind === 'op' && !drop.has(r.seq)) {
      keptSessions.add(r.session);
      if (!firstKeptSeen && lastStart) keep.add(lastStart);
      firstKeptSeen = true;
    }
  }
  for (const { record: r, segment, offset } of records) if (r.kind === 'start' && keptSessions.has(r.session)) keep.add(`${segment}:${offset}`);
  return keep;
}

/**
 * Drop records (whole sessions) older than the cutoff, and blobs no remaining record refers
 * to that are older than it too. Only closed segments are rewritten; the writer of the journal
 * (if any) rolls to a fresh segment first, so the caller holds the journal lock or is the daemon.
 * A damaged journal is refused (JournalDamagedError). With `dryRun`, nothing is changed: the result says what would be removed.
 */
export function collectGarbage(stateDir: string, timeCutoff: number, activeSegment: number | null, o: GcOptions = {}): GcResult {
  const dryRun = o.dryRun === true;
  const layout = stateLayout(stateDir);
  // on a damaged journal what is a whole session cannot be told: change nothing
  const contents = readIntactJournal(stateDir);
  const h = buildHistory(contents.records);
  const protect = new Set(o.protect ?? []);
  const blobList = [...new BlobStore(layout.blobsDir).list()];
  let cutoff = timeCutoff;
  let bytesBefore: number | undefined;
  if (o.maxBytes !== undefined) {
    const before = blobList.reduce((n, b) => n + b.size, 0) + contents.segments.reduce((n, seg) => n + fileSize(seg.path), 0);
    bytesBefore = before;
    cutoff = cutoffForSize(h, contents, blobList, timeCutoff, before - o.maxBytes, protect);
  }
  const { drop, stoppedAt } = dropPrefix(h, cutoff, protect);
  const keptStarts = startsToKeep(contents.records, drop);
  const dropped = h.ops.filter((op) => drop.has(op.seq));
  const result: GcResult = {
    dryRun, cutoff: new Date(cutoff).toISOString(), droppedSessions: [...new Set(dropped.map((op) => op.session))],
    droppedOperations: drop.size, keptOperations: h.ops.length - drop.size,
    firstSeq: null, segmentsRemoved: 0, segmentsRewritten: 0, blobsRemoved: 0, bytesFreed: 0, stoppedAt,
    ...(o.maxBytes !== undefined ? { maxBytes: o.maxBytes, bytesBefore } : {}),
  };
  const kept = h.ops.filter((op) => !drop.has(op.seq));
  result.firstSeq = kept.length ? (kept[0] as Operation).seq : null;

  // Segments go from the start only (a gap after the first one reads as a lost segment); one
  // after a segment that stays keeps its framing even when no other record is left in it.
  let leading = true;
  for (const seg of listSegments(layout.journalDir)) {
    if (activeSegment !== null && seg.index >= activeSegment) break;
    const buf = fs.readFileSync(seg.path);
    const scan = scanSegment(buf);
    // never rewrite a damaged segment: verify reports it, and its good records stay readable
    if (scan.problems.length > 0 || scan.tornTail) {
      leading = false;
      continue;
    }
    const keep = scan.lines.filter((l) => keepRecord(l.record, drop, cutoff, keptStarts.has(`${seg.index}:${l.offset}`)));
    const framing = keep.filter((l) => l.record.kind === 'segment' || l.record.kind === 'close').length;
    if (leading && keep.length === framing) {
      if (!dryRun) fs.rmSync(seg.path);
      result.segmentsRemoved++;
      result.bytesFreed += buf.length;
      continue;
    }
    leading = false;
    if (keep.length === scan.lines.length) continue;
    const parts: Buffer[] = [];
    let length = 0;
    for (const l of keep) {
      // a close record names the length before it: the rewritten one
      const part = l.record.kind === 'close' ? encodeRecord({ ...l.record, bytes: length }) : buf.subarray(l.offset, l.offset + l.length);
      parts.push(part);
      length += part.length;
    }
    const out = Buffer.concat(parts);
    result.segmentsRewritten++;
    result.bytesFreed += buf.length - out.length;
    if (dryRun) continue;
    replaceFileSync(seg.path, out, `${seg.path}.gc-tmp`);
  }
  if (!dryRun) syncDir(layout.journalDir);

  const refs = referencedBlobs(kept);
  const blobs = new BlobStore(layout.blobsDir);
  for (const b of blobList) {
    if (refs.has(b.hash) || b.mtimeMs >= cutoff) continue;
    if (!dryRun) blobs.remove(b.hash);
    result.blobsRemoved++;
    result.bytesFreed += b.size;
  }
  return result;
}

function fileSize(p: string): number {
  try {
    return fs.statSync(p).size;
  } catch {
    return 0;
  }
}

/**
 * The cutoff (no earlier than `timeCutoff`, no later than now) whose drop frees at least `excess`
 * bytes, by the records and before-images it would remove: the smallest such, so gc drops as
 * little as the bound needs; if none is enough, now (everything gc may drop).
 */
function cutoffForSize(h: History, contents: ReturnType<typeof readIntactJournal>, blobs: { hash: string; size: number; mtimeMs: number }[], timeCutoff: number, excess: number, protect: ReadonlySet<string>): number {
  const now = Date.now();
  if (excess <= 0 || timeCutoff >= now) return timeCutoff;
  // each record's length: up to the next record of its segment (or the segment's end)
  const length = new Map<LocatedRecord, number>();
  const bySeg = new Map<number, LocatedRecord[]>();
  for (const r of contents.records) {
    const list = bySeg.get(r.segment);
    if (list) list.push(r);
    else bySeg.set(r.segment, [r]);
  }
  for (const seg of contents.segments) {
    const list = bySeg.get(seg.index) ?? [];
    const size = fileSize(seg.path);
    list.forEach((r, i) => length.set(r, (list[i + 1]?.offset ?? size) - r.offset));
  }
  const opBytes = new Map<number, number>();
  for (const op of h.ops) opBytes.set(op.seq, op.records.reduce((n, r) => n + (length.get(r) ?? 0), 0));
  const freed = (cutoff: number): number => {
    const { drop } = dropPrefix(h, cutoff, protect);
    let n = 0;
    for (const seq of drop) n += opBytes.get(seq) ?? 0;
    const refs = referencedBlobs(h.ops.filter((op) => !drop.has(op.seq)));
    for (const b of blobs) if (!refs.has(b.hash) && b.mtimeMs < cutoff) n += b.size;
    return n;
  };
  const candidates = [...new Set(h.ops.map((op) => lastTime(op) + 1))].filter((t) => t > timeCutoff && t <= now).sort((a, b) => a - b);
  candidates.push(now);
  let lo = 0;
  let hi = candidates.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (freed(candidates[mid] as number) >= excess) hi = mid;
    else lo = mid + 1;
  }
  return candidates[lo] as number;
}
