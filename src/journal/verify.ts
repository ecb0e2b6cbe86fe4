import fs from 'node:fs';
import { BlobStore, hashFile } from './blobs.js';
import { buildHistory, type Operation } from './history.js';
import { segmentName, stateLayout } from './layout.js';
import { JournalLock } from './lock.js';
import { describeProblem, readJournal } from './reader.js';
import { keptByBackend } from './record.js';

/**
 * One piece of damage, for scripts: what kind, and where (a segment and byte, the records
 * around it; or a blob and the record that needs it). `message` is the line `problems` has.
 */
export interface VerifyDamage {
  kind: 'record' | 'missing-segment' | 'cut-segment' | 'framing' | 'reference' | 'blob-missing' | 'blob-size' | 'blob-hash';
  message: string;
  segment?: string;
  offset?: number;
  /** the unreadable records lie after this operation and before that one */
  afterSeq?: number;
  beforeSeq?: number;
  blob?: string;
  /** the operation whose before-image the blob is */
  seq?: number;
  path?: string;
}

export interface VerifyReport {
  /** damage: checksums, broken references, missing or wrong blobs (one line each; `damage` has them structured) */
  problems: string[];
  damage: VerifyDamage[];
  /** worth knowing, not damage (unresolved operations, a torn tail the next start cuts, stray blobs) */
  notes: string[];
  segments: number;
  records: number;
  operations: number;
  blobsChecked: number;
  blobBytes: number;
  firstSeq: number;
  lastSeq: number;
  /** a daemon (or CLI command) holds the journal: its last line may be being written */
  live: boolean;
}

export interface VerifyOptions {
  /** re-hash every referenced blob (default true) */
  hashBlobs?: boolean;
  onProgress?: (done: number, total: number) => void;
}

/** The size a blob must have: the state it belongs to, the capture's size, or the range's length. */
export function blobRefs(op: Operation): { hash: string; size: number; what: string; seq: number; path: string }[] {
  const out: { hash: string; size: number; what: string; seq: number; path: string }[] = [];
  op.before.forEach((s, i) => {
    if (s?.blob) out.push({ hash: s.blob, size: s.size, what: `#${op.seq} before-image of ${op.paths[i]}`, seq: op.seq, path: op.paths[i] as string });
    for (const r of s?.ranges ?? []) {
      out.push({ hash: r.blob, size: r.length, what: `#${op.seq} before-image of ${op.paths[i]} [${r.offset}, +${r.length})`, seq: op.seq, path: op.paths[i] as string });
    }
  });
  if (op.capture) out.push({ hash: op.capture.blob, size: op.capture.size, what: `#${op.seq} before-image of ${op.paths[0]}`, seq: op.seq, path: op.paths[0] as string });
  for (const r of op.ranges ?? []) {
    if (r.blob) out.push({ hash: r.blob, size: r.length, what: `#${op.seq} before-image of ${op.paths[0]} [${r.offset}, +${r.length})`, seq: op.seq, path: op.paths[0] as string });
  }
  return out;
}

/** Check a journal without changing it: record checksums, references between records, blobs. */
export async function verifyJournal(stateDir: string, o: VerifyOptions = {}): Promise<VerifyReport> {
  const layout = stateLayout(stateDir);
  const live = JournalLock.liveHolder(layout.lockFile) !== null;
  const contents = readJournal(stateDir);
  const h = buildHistory(contents.records);
  const damage: VerifyDamage[] = [];
  const KIND = { record: 'record', missing: 'missing-segment', cut: 'cut-segment', framing: 'framing' } as const;
  for (const p of contents.problems) {
    damage.push({
      kind: KIND[p.kind], message: describeProblem(p), segment: p.segment, offset: p.offset,
      ...(p.afterSeq !== undefined ? { afterSeq: p.afterSeq } : {}), ...(p.beforeSeq !== undefined ? { beforeSeq: p.beforeSeq } : {}),
    });
  }
  // every other finding is a sentence about records (references) or blobs
  const problems = {
    push(message: string, extra: Partial<VerifyDamage> = {}): void {
      damage.push({ kind: 'reference', message, ...extra });
    },
  };
  const notes: string[] = [];
  const t = contents.tornTail;
  if (t) {
    if (live && t.reason === 'incomplete last line') {
      // the writer is mid-append; not damage
    } else if (live) {
      problems.push(`${t.segment} at byte ${t.offset}: ${t.reason} (${t.bytes} bytes) while a writer holds the journal`, { kind: 'record', segment: t.segment, offset: t.offset });
    } else {
      notes.push(`${t.segment} ends in a torn record (${t.bytes} bytes: ${t.reason}), cut short by a crash while it was written; the next start cuts it`);
    }
  }
  const u = contents.unclosed;
  if (u && !live) notes.push(`${u.path} was being written when its writer stopped (a crash); the next start closes it`);
  for (const i of contents.openElsewhere) notes.push(`segment ${segmentName(i)} came from another host's writer that has not closed it (still writing, or stopped)`);
  const recovered = contents.records.flatMap((c) => (c.record.kind === 'close' && c.record.reason === 'recovered' ? [c.record] : []));
  if (recovered.length > 0) {
    const named = recovered.slice(-5).map((r) => `${segmentName(r.index)}${r.cut ? ` (a torn record of ${r.cut} bytes cut)` : ''}`);
    notes.push(`${recovered.length} segment(s) closed by the start after a crash${recovered.length > named.length ? ', the latest' : ''}: ${named.join(', ')}`);
  }
  let prev = 0;
  for (const op of h.ops) {
    if (op.seq <= prev) problems.push(`#${op.seq} follows #${prev}: sequence numbers must increase`);
    prev = op.seq;
    if (op.before.length !== op.paths.length) problems.push(`#${op.seq} has ${op.paths.length} paths but ${op.before.length} before-states`);
    if (op.after && op.after.length !== op.paths.length) problems.push(`#${op.seq} has ${op.paths.length} paths but ${op.after.length} after-states`);
    if (op.undoes !== undefined && op.undoes >= h.firstSeq && !h.bySeq.has(op.undoes)) {
      problems.push(`#${op.seq} undoes #${op.undoes}, which the journal does not hold`);
    }
  }
  for (const o2 of h.orphans) {
    const r = o2.record;
    problems.push(`a ${r.kind} record at byte ${o2.offset} of segment ${o2.segment} names #${'of' in r ? r.of : '?'}, which the journal does not hold`);
  }
  const unresolved = h.ops.filter((op) => op.status === 'pending' || op.status === 'open');
  if (unresolved.length > 0) {
    notes.push(
      live
        ? `${unresolved.length} operation(s) in progress (${unresolved.map((op) => `#${op.seq}`).slice(0, 10).join(', ')})`
        : `${unresolved.length} operation(s) without an outcome (a crash); the next start resolves them`,
    );
  }

  const refs = new Map<string, ReturnType<typeof blobRefs>[number]>();
  for (const op of h.ops) for (const r of blobRefs(op)) if (!refs.has(r.hash)) refs.set(r.hash, r);
  const blobs = new BlobStore(layout.blobsDir);
  let checked = 0;
  let bytes = 0;
  const total = refs.size;
  let kept = 0;
  for (const [hash, ref] of refs) {
    if (keptByBackend(hash)) {
      kept++; // a server-side copy in the bucket: nothing of it is in the spool to check
      o.onProgress?.(++checked, total);
      continue;
    }
    const p = blobs.pathOf(hash);
    const at = { blob: hash, seq: ref.seq, path: ref.path };
    let size: number;
    try {
      size = fs.statSync(p).size;
    } catch {
      problems.push(`${ref.what}: blob ${hash} is missing`, { kind: 'blob-missing', ...at });
      o.onProgress?.(++checked, total);
      continue;
    }
    bytes += size;
    if (size !== ref.size) problems.push(`${ref.what}: blob ${hash} has ${size} bytes, expected ${ref.size}`, { kind: 'blob-size', ...at });
    else if (o.hashBlobs !== false && (await hashFile(p)) !== hash) problems.push(`${ref.what}: blob ${hash} does not match its hash (damaged)`, { kind: 'blob-hash', ...at });
    o.onProgress?.(++checked, total);
  }
  if (kept > 0) notes.push(`${kept} before-image(s) kept in the bucket as server-side copies (not checked here)`);
  let stray = 0;
  for (const b of blobs.list()) if (!refs.has(b.hash)) stray++;
  if (stray > 0) notes.push(`${stray} blob(s) no record refers to (gc removes them once older than its retention)`);

  return {
    problems: damage.map((d) => d.message), damage, notes, segments: contents.segments.length, records: contents.records.length, operations: h.ops.length,
    blobsChecked: checked, blobBytes: bytes, firstSeq: h.firstSeq, lastSeq: h.lastSeq, live,
  };
}
