import type { Backend } from '../core/index.js';
import type { History, Operation } from './history.js';
import { stateOf } from './node-state.js';
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
      return b0 === null || n0 === null || n0.ino !== b0.ino;
    default:
      return true;
  }
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
