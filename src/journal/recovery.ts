import { DEFAULTS } from '../config/index.js';
import { type Backend, parentOf } from '../core/index.js';
import { effective, type History, type Operation } from './history.js';
import { mismatch, stateOf } from './node-state.js';
import type { State } from './record.js';
import type { JournalWriter } from './writer.js';

export interface RecoveryReport {
  /** pending operations found to have reached the backend */
  applied: number;
  /** pending operations found not to have */
  notApplied: number;
  /** write sessions a crash left open, ended with the file as it is now */
  sessionsEnded: number;
}

export interface UndurableReport {
  /** files whose journaled state the store never got (their changes were held for an upload the crash prevented) */
  files: number;
  /** operations recorded as lost (nothing of them reached the store) */
  lost: number;
  /** operations whose after-state was corrected to what the store holds (a create whose first write was lost) */
  corrected: number;
}

/**
 * The state of `path` right after `op`: the before-state the next operation on that path
 * recorded, or, if none did, what is there now.
 */
async function stateAfter(op: Operation, path: string, later: Operation[], backend: Backend): Promise<State> {
  for (const next of later) {
    if (next.seq <= op.seq) continue;
    const i = next.paths.indexOf(path);
    if (i >= 0) return next.before[i] ?? null;
  }
  return stateOf(backend, path);
}

/** `now` looks as `before` did: both nothing, or the same kind, content (size, mtime) and mode */
function unchanged(before: State, now: State): boolean {
  return before === null ? now === null : now !== null && mismatch(before, now, ['content', 'mode']) === null;
}

/**
 * Did a pending operation reach the backend? Only creations and removals can be told apart
 * by looking; for the rest "applied, with the state as found" is the safe answer: undoing it
 * restores the before-state either way.
 */
function reached(op: Operation, now: State[]): boolean {
  const b0 = op.before[0] ?? null;
  const n0 = now[0] ?? null;
  switch (op.op) {
    case 'create':
    case 'mkdir':
    case 'symlink':
    case 'mknod':
    case 'link':
      return b0 !== null || n0 !== null;
    case 'unlink':
    case 'rmdir':
    case 'rename':
      // Every name as it was: not applied. Inode numbers alone cannot say so on a store whose
      // numbers a new daemon gives afresh (GCS: a hash of the path; a node keeps the number of
      // a name it was moved from only in the daemon that moved it).
      if (b0 !== null && op.paths.every((_, i) => unchanged(op.before[i] ?? null, now[i] ?? null))) return false;
      return b0 === null || n0 === null || n0.ino !== b0.ino;
    default:
      return true;
  }
}

/**
 * A store without an atomic rename (GCS: a copy, then a delete of the source) killed between the
 * two leaves the source in place and its bytes already at the destination, whose own bytes are
 * gone. Journaled as "not applied", the rename would leave the destination changed with no record
 * saying why (a rollback then stops on it as changed by someone else); journaled as done, the
 * source would stay behind. So it is finished here, as the program asked: the source, still as
 * the journal saw it, is removed. `now` becomes what is there after. (Before anything else
 * changes the store: recovery runs right after the journal opens.) Only where the destination
 * is told apart from what it was (a different size or mtime), and is the source's: on a store
 * with an atomic rename that never holds (a hard link of the source has the source's looks
 * before and after, and is left alone).
 */
async function finishedHalfRename(op: Operation, now: State[], later: Operation[], backend: Backend): Promise<boolean> {
  if (op.op !== 'rename') return false;
  // (`now` must be the store's, not the before-state of a later operation on either name)
  if (later.some((l) => l.seq > op.seq && l.paths.some((p) => op.paths.includes(p)))) return false;
  const [b0, b1] = [op.before[0] ?? null, op.before[1] ?? null];
  const [n0, n1] = [now[0] ?? null, now[1] ?? null];
  const from = op.paths[0];
  if (from === undefined || b0 === null || n0 === null || n1 === null || b0.type === 'dir') return false;
  const copied = unchanged(b0, n0) && unchanged(b0, n1) && (b1 === null || mismatch(b1, n1, ['content']) !== null);
  if (!copied) return false;
  await backend.unlink(from);
  now[0] = null;
  return true;
}

/**
 * Resolve operations a crash left without an outcome, by comparing with the backend, so that
 * every one of them can be rolled back (or is known to need nothing). Run by a writer right
 * after it opened the journal, before anything else changes the backend.
 */
export async function recoverPending(h: History, backend: Backend, writer: JournalWriter): Promise<RecoveryReport> {
  const report: RecoveryReport = { applied: 0, notApplied: 0, sessionsEnded: 0 };
  const unresolved = h.ops.filter((op) => op.status === 'pending' || op.status === 'open');
  if (unresolved.length === 0) return report;
  const later = h.ops.filter((op) => op.seq > (unresolved[0] as Operation).seq);
  for (const op of unresolved) {
    const now = await Promise.all(op.paths.map((p) => stateAfter(op, p, later, backend)));
    const time = Date.now();
    if (op.status === 'open') {
      writer.appendNow({ kind: 'end', of: op.seq, time, after: now, reason: 'recovered' });
      op.status = 'done';
      op.after = now;
      op.endReason = 'recovered';
      report.sessionsEnded++;
    } else if (await finishedHalfRename(op, now, later, backend)) {
      writer.appendNow({ kind: 'done', of: op.seq, time, after: now, recovered: true });
      op.status = 'done';
      op.after = now;
      report.applied++;
    } else if (reached(op, now)) {
      writer.appendNow({ kind: 'done', of: op.seq, time, after: now, recovered: true });
      op.status = 'done';
      op.after = now;
      report.applied++;
    } else {
      writer.appendNow({ kind: 'failed', of: op.seq, time, errno: 'not applied (daemon stopped before)', recovered: true });
      op.status = 'failed';
      report.notApplied++;
    }
    op.recovered = true;
  }
  await writer.sync();
  return report;
}

/** Metadata changes a store may hold back with an open file's pending upload (GCS: they go with it). */
const DEFERRABLE_META: ReadonlySet<string> = new Set(['chmod', 'chown', 'utimens']);
/** What "the store holds the state the journal recorded" compares (content: size and mtime). */
const SAME: ['content', 'mode', 'owner'] = ['content', 'mode', 'owner'];

/** A write session's operation (a `write`, or a `create` its first write session continued). */
function isSession(op: Operation): boolean {
  return op.op === 'write' || (op.op === 'create' && op.endReason !== undefined);
}

/** The after-states of the fsyncs a session reached before its last end (each one was in the store once). */
function fsyncStates(op: Operation): State[] {
  const out: State[] = [];
  for (const l of op.records) if (l.record.kind === 'end' && l.record.reason === 'fsync') out.push(l.record.after[0] ?? null);
  return out;
}

type Verdict = { lost: Operation[]; correct?: { op: Operation; after: State } } | null;

/**
 * How the ops of one file a crash interrupted line up with what the store holds (`chain`: its
 * operations since its first write session that ended before its close, oldest first). A store
 * that uploads at close (GCS) held the session's bytes, and the chmod/chown/utimens made while
 * the file was open, for that upload; a crash before it lost them all, while the journal already
 * recorded their after-states. Newest first, the first operation whose before-state is exactly
 * what the store holds marks where the store stopped: it and what follows are lost. A create
 * whose first write session continued its record made the empty object itself (the open did):
 * an empty file there is that create's own result. A session that reached an fsync had that
 * fsync's state in the store: if that is what is there, the session stands with it. Anything
 * else is not explained, and stays as the journal says (rollback then names the conflict).
 */
function explain(chain: Operation[], now: State): Verdict {
  for (let k = chain.length - 1; k >= 0; k--) {
    const op = chain[k] as Operation;
    const lost = chain.slice(k + 1);
    if (mismatch(op.before[0] ?? null, now, SAME) === null) return { lost: [op, ...lost] };
    if (!isSession(op)) continue;
    if (fsyncStates(op).some((s) => mismatch(s, now, SAME) === null)) return { lost, correct: { op, after: now } };
    if (op.op === 'create' && (op.before[0] ?? null) === null && now?.type === 'file' && now.size === 0) return { lost, correct: { op, after: now } };
  }
  return null;
}

/**
 * After a crash: reconcile the crashed writer's journaled after-states with what the store
 * really holds, for the files whose changes the store may have held back until a close that
 * never came (a write session ended early, by an fsync or by a chmod/utimens/... of the open
 * file, as tar's futimens before close does). Where the store holds an earlier state the journal
 * explains (see `explain`), the lost operations get a `failed` record (recovered: "lost") and a
 * create that stands with other bytes an `end` record with the state found, so a strict rollback
 * restores exactly what was there before, and never takes bytes the store does not hold for
 * someone else's change. On a store that writes in place (local) every state matches: nothing
 * is recorded. Run after recoverPending (which ends the sessions left open with what it finds).
 */
export async function reconcileUndurable(h: History, backend: Backend, writer: JournalWriter): Promise<UndurableReport> {
  const report: UndurableReport = { files: 0, lost: 0, corrected: 0 };
  const start = h.starts[h.starts.length - 1];
  const from = start?.lastSeq ?? 0;
  const crashed = h.ops.filter((op) => op.seq > from && effective(op));
  // paths whose write session ended before the file's close (the bytes may not have gone up)
  const chains = new Map<string, Operation[]>();
  for (const op of crashed) {
    const p = op.paths[0] as string;
    const chain = chains.get(p);
    if (chain) chain.push(op);
    else if (isSession(op) && (op.endReason === 'split' || op.endReason === 'fsync')) chains.set(p, [op]);
  }
  // every later operation naming the path must be one that waits for the close (else: left alone)
  for (const op of crashed) {
    for (let i = 0; i < op.paths.length; i++) {
      const p = op.paths[i] as string;
      const chain = chains.get(p);
      if (!chain || op.seq < (chain[0] as Operation).seq) continue;
      if (i > 0 || !(isSession(op) || DEFERRABLE_META.has(op.op))) chains.delete(p);
    }
  }
  // by directory: where several files of one directory are to be looked at (tar), its listing
  // first, which a metadata cache below fills every entry's attributes from (GCS: one request
  // for the directory instead of one per file)
  const byDir = new Map<string, [string, Operation[]][]>();
  for (const entry of chains) {
    const dir = parentOf(entry[0]);
    const list = byDir.get(dir);
    if (list) list.push(entry);
    else byDir.set(dir, [entry]);
  }
  const todo = [...byDir];
  const check = async (path: string, chain: Operation[]) => {
    const last = chain[chain.length - 1] as Operation;
    const now = await stateOf(backend, path);
    // (an after-state recoverPending just took from the store proves nothing about the ones before it)
    if (!last.recovered && mismatch(last.after?.[0] ?? null, now, SAME) === null) return;
    const v = explain(chain, now);
    if (!v) return;
    const time = Date.now();
    report.files++;
    if (v.correct) {
      writer.appendNow({ kind: 'end', of: v.correct.op.seq, time, after: [v.correct.after], reason: 'recovered' });
      v.correct.op.after = [v.correct.after];
      v.correct.op.endReason = 'recovered';
      v.correct.op.recovered = true;
      report.corrected++;
    }
    for (const op of v.lost) {
      writer.appendNow({ kind: 'failed', of: op.seq, time, errno: LOST, recovered: true });
      op.status = 'failed';
      op.errno = LOST;
      op.recovered = true;
      report.lost++;
    }
  };
  const work = async () => {
    for (let next = todo.shift(); next; next = todo.shift()) {
      const [dir, entries] = next;
      if (entries.length >= DEFAULTS.journal.reconcileListFrom) await backend.readdir(dir).catch(() => undefined);
      for (const [path, chain] of entries) await check(path, chain);
    }
  };
  await Promise.all(Array.from({ length: Math.min(DEFAULTS.journal.reconcileStatConcurrency, todo.length) }, work));
  if (report.files > 0) await writer.sync();
  return report;
}

/** the `failed` record's reason for a change the crash took before it reached the store */
export const LOST = 'lost: held for the upload at close, which the crash prevented (the store never got it)';
