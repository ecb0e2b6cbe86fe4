import { type History, type Operation, undoneSeqs } from './history.js';
import type { ConflictRecord } from './record.js';

/** "1 byte", "7 bytes": the summaries are read by people. */
const bytes = (n: number | string): string => `${n} ${n === 1 ? 'byte' : 'bytes'}`;

/** One-line summary of an operation for `ledgerfs log`. */
export function summarize(op: Operation): string {
  const [p0, p1] = op.paths as [string, string | undefined];
  const b0 = op.before[0] ?? null;
  const a0 = op.after?.[0] ?? null;
  switch (op.op) {
    case 'write': {
      const from = b0?.size ?? 0;
      return a0 ? `write ${p0} (${from} -> ${bytes(a0.size)})` : `write ${p0} (from ${bytes(from)})`;
    }
    case 'truncate':
      return `truncate ${p0} (${b0?.size ?? 0} -> ${bytes(op.args?.size ?? a0?.size ?? '?')})`;
    case 'create': {
      // a create whose first write session continued its record ends with the content's size
      const written = op.endTime !== undefined && a0 ? `, ${bytes(a0.size)} written` : '';
      return b0 ? `create ${p0} (existing file, ${b0.size} bytes${b0.blob ? ', emptied' : ''}${written})` : `create ${p0}${written ? ` (${written.slice(2)})` : ''}`;
    }
    case 'rename': {
      const replaced = op.before[1] ?? null;
      return `rename ${p0} -> ${p1}${replaced ? ` (replacing a ${replaced.type})` : ''}`;
    }
    case 'symlink':
      return `symlink ${p0} -> ${op.args?.target ?? a0?.target ?? '?'}`;
    case 'mknod':
      return `mknod ${p0} (${a0?.type ?? 'special file'}${op.args?.rdev ? `, device ${op.args.rdev}` : ''})`;
    case 'link':
      return `link ${p0} (to ${p1})`;
    case 'chmod':
      return `chmod ${(b0?.mode ?? 0).toString(8)} -> ${((op.args?.mode ?? a0?.mode ?? 0) & 0o7777).toString(8)} ${p0}`;
    case 'chown':
      return `chown ${b0?.uid}:${b0?.gid} -> ${op.args?.uid ?? a0?.uid}:${op.args?.gid ?? a0?.gid} ${p0}`;
    case 'utimens':
      return `set times of ${p0}`;
    case 'unlink':
      return `unlink ${p0}${b0 ? ` (${b0.type === 'symlink' ? `symlink to ${b0.target}` : b0.type === 'file' ? `${bytes(b0.size)}` : b0.type})` : ''}`;
    case 'setxattr':
    case 'removexattr':
      return `${op.op} ${op.args?.xattr ?? ''} ${p0}`;
    default:
      return `${op.op} ${p0}`;
  }
}

/** Bracketed notes: status other than done, undo relations. */
export function statusNotes(op: Operation, undoneBy?: number): string[] {
  const n: string[] = [];
  if (op.status === 'pending') n.push('pending');
  if (op.status === 'open') n.push('writing');
  if (op.status === 'failed') n.push(`failed: ${op.errno}`);
  if (op.recovered) n.push('recovered after a crash');
  for (const c of op.conflicts ?? []) n.push(`conflict: ${describeConflict(c)}`);
  if (op.undoes !== undefined) n.push(`undoes #${op.undoes}`);
  if (undoneBy !== undefined) n.push(`undone by #${undoneBy}`);
  return n;
}

/**
 * Which op (the newest live one) undid each seq. With the history, only what undoneSeqs counts
 * (the part of an undo a rollback cut short does not make its operation "undone").
 */
export function undoneByMap(ops: Operation[], h?: History): Map<number, number> {
  const undone = new Map<number, number>();
  for (let i = ops.length - 1; i >= 0; i--) {
    const op = ops[i] as Operation;
    // as undoneSeqs: an undo that was itself undone no longer counts
    if (op.undoes === undefined || op.status === 'failed' || undone.has(op.seq)) continue;
    if (!undone.has(op.undoes)) undone.set(op.undoes, op.seq);
  }
  if (h) {
    const really = undoneSeqs(h);
    for (const seq of [...undone.keys()]) if (!really.has(seq)) undone.delete(seq);
  }
  return undone;
}

export function formatTime(ms: number): string {
  const d = new Date(ms);
  const pad = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** A local version that did not reach the bucket, in words (`log` notes, `show`). */
export function describeConflict(c: ConflictRecord): string {
  const why =
    c.reason === 'changed-remotely'
      ? `the object changed in the bucket meanwhile (generation ${c.expectedGeneration} -> ${c.currentGeneration ?? 'deleted'})`
      : 'the upload failed';
  return `not uploaded: ${why}; the local version (${bytes(c.size)}) is kept at ${c.localFile}`;
}
