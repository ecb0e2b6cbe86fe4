import fs from 'node:fs';
import { BlobStore } from './blobs.js';
import { scanSegment } from './codec.js';
import { buildHistory, type History, type Operation } from './history.js';
import { listSegments, stateLayout, syncDir } from './layout.js';
import { readJournal } from './reader.js';
import type { JournalRecord } from './record.js';

export interface GcResult {
  cutoff: string;
  droppedOperations: number;
  keptOperations: number;
  /** the oldest seq still in the journal: the furthest a rollback can go back to is one before it */
  firstSeq: number | null;
  segmentsRemoved: number;
  segmentsRewritten: number;
  blobsRemoved: number;
  bytesFreed: number;
}

/** Every blob the operations refer to. */
export function referencedBlobs(ops: Iterable<Operation>): Set<string> {
  const refs = new Set<string>();
  for (const op of ops) {
    for (const s of op.before) if (s?.blob) refs.add(s.blob);
    if (op.capture) refs.add(op.capture.blob);
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
 * cutoff. Always a prefix, so what remains is a contiguous history that rolls back correctly to
 * any point after its start. Unresolved operations are never dropped.
 */
function dropPrefix(h: History, cutoff: number): Set<number> {
  const drop = new Set<number>();
  for (const op of h.ops) {
    if (lastTime(op) >= cutoff || op.status === 'open' || op.status === 'pending') break;
    drop.add(op.seq);
  }
  return drop;
}

function keepRecord(r: JournalRecord, drop: Set<number>, cutoff: number): boolean {
  if (r.kind === 'op') return !drop.has(r.seq);
  if (r.kind === 'start') return r.time >= cutoff;
  // a conflict tied to no operation goes by its time (its bytes stay in conflicts/ with their
  // note), and so does a rollback's intent and end
  if (!('of' in r) || r.of === undefined) return r.time >= cutoff;
  return !drop.has(r.of);
}

/**
 * Drop records (whole operations) older than the cutoff, and blobs no remaining record refers
 * to that are older than it too. Only closed segments are rewritten; the writer of the journal
 * (if any) rolls to a fresh segment first, so the caller holds the journal lock or is the daemon.
 */
export function collectGarbage(stateDir: string, cutoff: number, activeSegment: number | null): GcResult {
  const layout = stateLayout(stateDir);
  const h = buildHistory(readJournal(stateDir).records);
  const drop = dropPrefix(h, cutoff);
  const result: GcResult = {
    cutoff: new Date(cutoff).toISOString(), droppedOperations: drop.size, keptOperations: h.ops.length - drop.size,
    firstSeq: null, segmentsRemoved: 0, segmentsRewritten: 0, blobsRemoved: 0, bytesFreed: 0,
  };
  const kept = h.ops.filter((op) => !drop.has(op.seq));
  result.firstSeq = kept.length ? (kept[0] as Operation).seq : null;

  for (const seg of listSegments(layout.journalDir)) {
    if (activeSegment !== null && seg.index >= activeSegment) continue;
    const buf = fs.readFileSync(seg.path);
    const scan = scanSegment(buf);
    // never rewrite a damaged segment: verify reports it, and its good records stay readable
    if (scan.problems.length > 0 || scan.tornTail) continue;
    const keep = scan.lines.filter((l) => keepRecord(l.record, drop, cutoff));
    if (keep.length === scan.lines.length) continue;
    if (keep.length === 0) {
      fs.rmSync(seg.path);
      result.segmentsRemoved++;
      result.bytesFreed += buf.length;
      continue;
    }
    const out = Buffer.concat(keep.map((l) => buf.subarray(l.offset, l.offset + l.length)));
    const tmp = `${seg.path}.gc-tmp`;
    const fd = fs.openSync(tmp, 'w', 0o600);
    try {
      fs.writeSync(fd, out);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, seg.path);
    result.segmentsRewritten++;
    result.bytesFreed += buf.length - out.length;
  }
  syncDir(layout.journalDir);

  const refs = referencedBlobs(kept);
  const blobs = new BlobStore(layout.blobsDir);
  for (const b of blobs.list()) {
    if (refs.has(b.hash) || b.mtimeMs >= cutoff) continue;
    blobs.remove(b.hash);
    result.blobsRemoved++;
    result.bytesFreed += b.size;
  }
  return result;
}
