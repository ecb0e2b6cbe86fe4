import type { LocatedRecord } from './reader.js';
import type { ConflictRecord, EndRecord, JournalOp, OpArgs, OpRecord, Range, RollbackEndRecord, RollbackIntentRecord, StartRecord, State, TagRecord } from './record.js';

export type OperationStatus = 'done' | 'failed' | 'pending' | 'open';

/** One mutation: its `op` record with the records that refer to it folded in. */
export interface Operation {
  seq: number;
  time: number;
  session: string;
  actor: string;
  pid?: number;
  /** the command line of `pid` when it made the change */
  cmd?: string;
  undoes?: number;
  op: JournalOp;
  paths: string[];
  before: State[];
  /** null while pending or open, or when it failed */
  after: State[] | null;
  args?: OpArgs;
  /** the mtimes of directories this op first changed in its session, before it (OpRecord.dirs) */
  dirs?: { path: string; mtimeNs: string }[];
  /**
   * done; failed (nothing changed); pending (no outcome: in flight, or a crash the next start
   * resolves); open (a write session not ended yet)
   */
  status: OperationStatus;
  errno?: string;
  /** write sessions: when and why they ended */
  endTime?: number;
  endReason?: EndRecord['reason'];
  /** resolved by recovery after a crash */
  recovered?: boolean;
  /** write sessions: the before-image, when the session overwrote or cut existing bytes */
  capture?: { blob: string; size: number };
  /** write sessions of large files: the old bytes of each extent the session changed (record order) */
  ranges?: Range[];
  /** (GCS) local versions of this operation that did not reach the bucket, kept aside */
  conflicts?: ConflictRecord[];
  records: LocatedRecord[];
}

/** A rollback that journaled its intent (rollback-intent), with its progress. */
export interface RollbackRun {
  intent: RollbackIntentRecord;
  /** operations it finished undoing (its `restored` records) */
  restored: Set<number>;
  /** how it ended; absent: it is running, or was cut short */
  end?: RollbackEndRecord;
}

export interface History {
  /** every operation in seq order */
  ops: Operation[];
  bySeq: Map<number, Operation>;
  starts: StartRecord[];
  firstSeq: number;
  lastSeq: number;
  /** records naming an operation the journal does not hold */
  orphans: LocatedRecord[];
  /** every conflict record (those tied to an operation are also in its `conflicts`) */
  conflicts: ConflictRecord[];
  /**
   * Sessions whose start the journal may have lost to an older gc, which dropped part of a
   * session: older history is gone and no start record comes before their first operation
   * (a writer records its start before anything else; gc keeps it for every kept session).
   */
  possiblySplit: Set<string>;
  /** rollbacks that journaled an intent, by their session, oldest first */
  rollbacks: Map<string, RollbackRun>;
  /** named checkpoints, by name */
  tags: Map<string, TagRecord>;
}

function fromOpRecord(r: OpRecord, loc: LocatedRecord): Operation {
  const op: Operation = {
    seq: r.seq, time: r.time, session: r.session, actor: r.actor, op: r.op, paths: r.paths, before: r.before,
    after: null, status: r.op === 'write' ? 'open' : 'pending', records: [loc],
  };
  if (r.pid !== undefined) op.pid = r.pid;
  if (r.cmd !== undefined) op.cmd = r.cmd;
  if (r.undoes !== undefined) op.undoes = r.undoes;
  if (r.args) op.args = r.args;
  if (r.dirs) op.dirs = r.dirs;
  return op;
}

/** A write session that reached an fsync goes on (a `resume` record): open again until its next end. */
function reopen(op: Operation): void {
  if (op.status === 'done' && op.endReason === 'fsync') {
    op.status = 'open';
    op.after = null;
  }
}

export function buildHistory(records: LocatedRecord[]): History {
  const ops: Operation[] = [];
  const bySeq = new Map<number, Operation>();
  const starts: StartRecord[] = [];
  const orphans: LocatedRecord[] = [];
  const conflicts: ConflictRecord[] = [];
  const beforeAnyStart = new Set<string>();
  const rollbacks = new Map<string, RollbackRun>();
  const tags = new Map<string, TagRecord>();
  for (const loc of records) {
    const r = loc.record;
    if (r.kind === 'tag') {
      if (!tags.has(r.name)) tags.set(r.name, r); // the first one: a later duplicate was never accepted
      continue;
    }
    if (r.kind === 'rollback-intent') {
      rollbacks.set(r.session, { intent: r, restored: new Set() });
      continue;
    }
    if (r.kind === 'restored') {
      rollbacks.get(r.session)?.restored.add(r.of);
      continue;
    }
    if (r.kind === 'rollback-end') {
      const run = rollbacks.get(r.session);
      if (run) run.end = r;
      continue;
    }
    if (r.kind === 'op') {
      if (starts.length === 0) beforeAnyStart.add(r.session);
      const op = fromOpRecord(r, loc);
      ops.push(op);
      bySeq.set(r.seq, op);
      continue;
    }
    if (r.kind === 'start') {
      starts.push(r);
      continue;
    }
    if (r.kind === 'segment' || r.kind === 'close') continue; // framing, read by reader.ts
    if (r.kind === 'conflict') {
      conflicts.push(r);
      const of = r.of === undefined ? undefined : bySeq.get(r.of);
      if (of) {
        (of.conflicts ??= []).push(r);
        of.records.push(loc);
      }
      continue;
    }
    const op = bySeq.get(r.of);
    if (!op) {
      orphans.push(loc);
      continue;
    }
    op.records.push(loc);
    switch (r.kind) {
      case 'done':
        op.status = 'done';
        op.after = r.after;
        if (r.recovered) op.recovered = true;
        break;
      case 'failed':
        op.status = 'failed';
        op.errno = r.errno;
        if (r.recovered) op.recovered = true;
        break;
      case 'capture':
        op.capture = { blob: r.blob, size: r.size };
        break;
      case 'range':
        (op.ranges ??= []).push(r.blob === undefined ? { offset: r.offset, length: r.length } : { offset: r.offset, length: r.length, blob: r.blob });
        break;
      case 'resume':
        reopen(op);
        break;
      case 'end':
        op.status = 'done';
        op.after = r.after;
        op.endTime = r.time;
        op.endReason = r.reason;
        if (r.reason === 'recovered') op.recovered = true;
        break;
    }
  }
  // Segments are appended in order, so ops are in seq order already; gc keeps that. (The
  // highest, not the last: a build of 2026-11-27 could write two concurrent records out of
  // order, and numbering on from the last would give a later record a number already used.)
  let lastSeq = 0;
  for (const op of ops) if (op.seq > lastSeq) lastSeq = op.seq;
  for (const s of starts) if (s.lastSeq !== undefined && s.lastSeq > lastSeq) lastSeq = s.lastSeq;
  const firstSeq = ops.length ? (ops[0] as Operation).seq : lastSeq + 1;
  const possiblySplit = firstSeq > 1 ? beforeAnyStart : new Set<string>();
  return { ops, bySeq, starts, orphans, conflicts, rollbacks, tags, firstSeq, lastSeq, possiblySplit };
}

/** Operations that changed something (or may have: pending and open ones). */
export function effective(op: Operation): boolean {
  return op.status !== 'failed';
}

/**
 * Seqs whose effect a rollback has reversed, and which that rollback still stands for. An undo
 * that was itself undone no longer counts: newest first, an undo marks its target only if the
 * undo is not already marked.
 */
export function undoneSeqs(h: History): Set<number> {
  const undone = new Set<number>();
  for (let i = h.ops.length - 1; i >= 0; i--) {
    const op = h.ops[i] as Operation;
    if (op.undoes !== undefined && effective(op) && !undone.has(op.seq) && !partialUndo(h, op)) undone.add(op.undoes);
  }
  // A rollback that resumed an undo an earlier one cut short may have found every change made
  // already, and made none itself: its `restored` stands for the earlier partial mutations, as
  // long as none of them was undone since. (So does a restored undo that needed no change.)
  let undosOf: Map<number, Operation[]> | null = null;
  for (const run of h.rollbacks.values()) {
    for (const seq of run.restored) {
      if (undone.has(seq)) continue;
      if (!undosOf) {
        undosOf = new Map();
        for (const op of h.ops) {
          if (op.undoes === undefined || !effective(op)) continue;
          const list = undosOf.get(op.undoes);
          if (list) list.push(op);
          else undosOf.set(op.undoes, [op]);
        }
      }
      if ((undosOf.get(seq) ?? []).every((u) => !undone.has(u.seq))) undone.add(seq);
    }
  }
  return undone;
}

/**
 * Why a rollback of `session` must not go ahead on its own (an older gc may have dropped its
 * first part, so undoing what remains would leave the tree between two states), or null.
 */
export function splitSessionRefusal(h: History, sel: { session?: string; partial?: boolean }): string | null {
  if (sel.session === undefined || sel.partial || !h.possiblySplit.has(sel.session)) return null;
  const first = h.ops.find((op) => op.session === sel.session);
  return (
    `session ${sel.session} began before the oldest record the journal still holds (#${h.firstSeq}): an older gc dropped its start, ` +
    `so a rollback would undo only the part that remains${first ? ` (from #${first.seq})` : ''}, not the whole session. ` +
    `--partial undoes that part anyway; --to SEQ undoes everything after a point`
  );
}

/**
 * An undo mutation of a rollback that journaled its intent but not (yet) that it finished
 * undoing this operation: a part of an undo cut short, not an undo.
 */
export function partialUndo(h: History, op: Operation): boolean {
  if (op.undoes === undefined) return false;
  const run = h.rollbacks.get(op.session);
  return run !== undefined && !run.restored.has(op.undoes);
}
