import { constants as C } from 'node:fs';
import { type Backend, type Caller, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, isSpecial, isWithin, rebase, type SpecialType, VfsError } from '../core/index.js';
import type { Vfs } from '../vfs/index.js';
import type { BlobStore } from './blobs.js';
import { effective, partialUndo, splitSessionRefusal, undoneSeqs, type History, type Operation } from './history.js';
import { hashAt, mismatch, stateOf, type Aspect } from './node-state.js';
import { restorePlan } from './ranges.js';
import type { JournalOp, NodeState, Range, State } from './record.js';
import type { JournalStage } from './stage.js';
import type { JournalWriter } from './writer.js';

/** S_IFMT of the special files a rollback brings back with mknod */
const SPECIAL_IFMT: Record<SpecialType, number> = { fifo: C.S_IFIFO, socket: C.S_IFSOCK, chardev: C.S_IFCHR, blockdev: C.S_IFBLK };

/** What to roll back. Filters combine (an operation must match all that are given). */
export interface RollbackSelection {
  /** undo every operation after this seq (the state right after it is restored) */
  toSeq?: number;
  /** undo every operation after this time (ms since the epoch) */
  toTime?: number;
  session?: string;
  /** only operations that name a path at or below this one */
  path?: string;
  /** roll back what remains of a session an older gc split (history.ts splitSessionRefusal) */
  partial?: boolean;
}

export interface Conflict {
  seq: number;
  op: JournalOp;
  path: string;
  reason: string;
}

export interface PlannedStep {
  seq: number;
  time: number;
  session: string;
  op: JournalOp;
  paths: string[];
  /** what the undo does, in words */
  undo: string;
}

export interface RollbackResult {
  dryRun: boolean;
  /** the session the rollback's own mutations are journaled under (undo it with --session) */
  session: string | null;
  planned: PlannedStep[];
  /** operations already undone by an earlier rollback and therefore left alone */
  alreadyUndone: number;
  undone: number;
  conflicts: Conflict[];
  /** every planned operation was undone */
  complete: boolean;
  /** --force went past these conflicts */
  forced: Conflict[];
  /** --skip-conflicts left these operations as they are (and older ones on the same paths) */
  skipped?: Conflict[];
  /** earlier rollbacks that were cut short (killed) or stopped, with what they left undone */
  unfinished?: UnfinishedRollback[];
}

export interface UnfinishedRollback {
  session: string;
  target: string;
  time: number;
  /** operations of its plan it finished undoing */
  restored: number;
  total: number;
  /** what it left: operations neither it nor a later rollback undid, newest first */
  left: number[];
  /** it was cut short (no end record), rather than stopped by a conflict */
  interrupted: boolean;
}

/** Rollbacks whose plan is not all undone yet (by them or by a later rollback). */
export function unfinishedRollbacks(h: History): UnfinishedRollback[] {
  const undone = undoneSeqs(h);
  const out: UnfinishedRollback[] = [];
  for (const [session, run] of h.rollbacks) {
    // what it restored itself and a later rollback re-did (a rollback of this rollback) is not left
    const left = run.intent.ops.filter((seq) => !undone.has(seq) && !run.restored.has(seq) && h.bySeq.has(seq));
    if (left.length === 0) continue;
    out.push({
      session, target: run.intent.target, time: run.intent.time, restored: run.restored.size, total: run.intent.ops.length, left,
      interrupted: run.end === undefined,
    });
  }
  return out;
}

/**
 * The undo mutations a rollback cut short made towards undoing each operation (seq order):
 * its own partial work, which a re-run must not take for someone else's change.
 */
export function partialWork(h: History): Map<number, Operation[]> {
  const out = new Map<number, Operation[]>();
  for (const op of h.ops) {
    if (op.status === 'failed' || !partialUndo(h, op)) continue;
    const list = out.get(op.undoes as number);
    if (list) list.push(op);
    else out.set(op.undoes as number, [op]);
  }
  return out;
}

export class RollbackError extends Error {}

export function describeSelection(sel: RollbackSelection): string {
  const parts: string[] = [];
  if (sel.toSeq !== undefined) parts.push(`after #${sel.toSeq}`);
  if (sel.toTime !== undefined) parts.push(`after ${new Date(sel.toTime).toISOString()}`);
  if (sel.session !== undefined) parts.push(`of session ${sel.session}`);
  if (sel.path !== undefined) parts.push(`touching ${sel.path}`);
  return parts.join(', ');
}

/**
 * The operations to undo, newest first: the selected ones that changed something, minus those
 * an earlier rollback already undid, minus undo operations whose target is selected too (the
 * pair cancels out: the state is already as if neither happened).
 */
export function selectOperations(h: History, sel: RollbackSelection): { ops: Operation[]; alreadyUndone: number } {
  if (sel.toSeq === undefined && sel.toTime === undefined && sel.session === undefined && sel.path === undefined) {
    throw new RollbackError('say what to roll back: --to SEQ|TIME, --session ID and/or --path PREFIX');
  }
  if (sel.toSeq !== undefined && sel.toSeq < h.firstSeq - 1) {
    throw new RollbackError(`the journal starts at #${h.firstSeq} (older records were dropped by gc); cannot roll back to #${sel.toSeq}`);
  }
  const split = splitSessionRefusal(h, sel);
  if (split) throw new RollbackError(split);
  // a staged session's records describe its overlay, never the backend: undoing them against
  // the backend would be wrong (they are dropped with discard, or applied with apply)
  const staged = new Set(h.starts.filter((s) => s.staged).map((s) => s.session));
  if (sel.session !== undefined && staged.has(sel.session)) {
    throw new RollbackError(
      `session ${sel.session} is a staged session: none of its changes reached the backend, so there is nothing to roll back there. Drop them with 'ledgerfs discard --session ${sel.session}', or apply them with 'ledgerfs apply --session ${sel.session}' (an apply is a session of its own, which rollback undoes).`,
    );
  }
  const match = (op: Operation) =>
    !staged.has(op.session) &&
    effective(op) &&
    (sel.toSeq === undefined || op.seq > sel.toSeq) &&
    (sel.toTime === undefined || op.time > sel.toTime) &&
    (sel.session === undefined || op.session === sel.session) &&
    (sel.path === undefined || op.paths.some((p) => isWithin(p, sel.path as string)));
  const selected = h.ops.filter(match);
  const inSelection = new Set(selected.map((o) => o.seq));
  const undone = undoneSeqs(h);
  let alreadyUndone = 0;
  const ops: Operation[] = [];
  for (let i = selected.length - 1; i >= 0; i--) {
    const op = selected[i] as Operation;
    if (undone.has(op.seq)) {
      alreadyUndone++;
      continue;
    }
    if (op.undoes !== undefined && inSelection.has(op.undoes)) continue;
    ops.push(op);
  }
  return { ops, alreadyUndone };
}

export function describeUndo(op: Operation): string {
  const [p0, p1] = op.paths as [string, string | undefined];
  const b0 = op.before[0] ?? null;
  switch (op.op) {
    case 'create':
      return b0 ? `restore ${p0} as it was (${b0.size} bytes)` : `remove ${p0}`;
    case 'write':
    case 'truncate':
      return `restore the content of ${p0} (${b0?.size ?? 0} bytes)`;
    case 'unlink':
      return `recreate ${p0} (${b0?.type === 'symlink' ? `symlink to ${b0.target}` : b0 && b0.type !== 'file' ? b0.type : `${b0?.size ?? 0} bytes`})`;
    case 'rmdir':
      return `recreate directory ${p0}`;
    case 'mkdir':
      return `remove directory ${p0}`;
    case 'symlink':
    case 'link':
    case 'mknod':
      return `remove ${p0}`;
    case 'rename':
      return `move ${p1} back to ${p0}${op.before[1] ? `, recreate the ${op.before[1].type} it replaced at ${p1}` : ''}`;
    case 'chmod':
      return `chmod ${b0?.mode.toString(8)} ${p0}`;
    case 'chown':
      return `chown ${b0?.uid}:${b0?.gid} ${p0}`;
    case 'utimens':
      return `restore the times of ${p0}`;
    case 'setxattr':
    case 'removexattr':
      return `restore attribute ${op.args?.xattr} of ${p0}`;
  }
}

export function plannedSteps(ops: Operation[]): PlannedStep[] {
  return ops.map((op) => ({ seq: op.seq, time: op.time, session: op.session, op: op.op, paths: op.paths, undo: describeUndo(op) }));
}

/** The aspects of path `i` an undo of `op` relies on, and the state it expects there now. */
function expectation(op: Operation, i: number): { expected: State; aspects: Aspect[] } | null {
  const after = op.after;
  if (!after) return null;
  const a = after[i] ?? null;
  switch (op.op) {
    case 'create':
    case 'write':
    case 'truncate':
    case 'symlink':
      return i === 0 ? { expected: a, aspects: ['content'] } : null;
    case 'mknod':
      return i === 0 ? { expected: a, aspects: ['kind'] } : null;
    case 'link':
      return i === 0 ? { expected: a, aspects: ['content'] } : null;
    case 'unlink':
    case 'rmdir':
    case 'mkdir':
      return i === 0 ? { expected: a, aspects: ['kind'] } : null;
    case 'rename':
      if ((after[0] ?? null) !== null) return null; // a rename that changed nothing (two names of one node)
      return { expected: a, aspects: i === 0 ? ['kind'] : ['content'] };
    case 'chmod':
      return i === 0 ? { expected: a, aspects: ['mode'] } : null;
    case 'chown':
      return i === 0 ? { expected: a, aspects: ['owner'] } : null;
    case 'utimens':
      return i === 0 ? { expected: a, aspects: ['mtime'] } : null;
    case 'setxattr':
    case 'removexattr':
      return i === 0 ? { expected: a, aspects: ['kind'] } : null;
  }
}

export interface ConflictContext {
  backend: Backend;
  /** paths with a write session in progress (a live mount) */
  openWritePaths?: readonly string[];
  /** partialWork(): what an earlier, cut-short rollback already did towards each undo */
  partial?: Map<number, Operation[]>;
}

/**
 * Is `now` at `path` what a rollback's own earlier partial undo of `op` left there (after its
 * newest mutation of that path), or the before-state `op` recorded (that part is undone)? Then
 * it is no one else's change.
 */
function ownWork(op: Operation, i: number, now: State, ctx: ConflictContext): boolean {
  const mine = ctx.partial?.get(op.seq);
  if (!mine) return false;
  const path = op.paths[i] as string;
  if (mismatch(op.before[i] ?? null, now, ['content']) === null) return true;
  for (let k = mine.length - 1; k >= 0; k--) {
    const u = mine[k] as Operation;
    const j = u.paths.indexOf(path);
    if (j < 0) continue;
    // unresolved (a dry run before recovery): what it left is not known yet; it is ours
    if (!u.after) return true;
    return mismatch(u.after[j] ?? null, now, ['content']) === null;
  }
  return false;
}

/**
 * The content is what the journal expects, by its hash, and only the mtime differs (a touch):
 * not a conflict, since the undo restores the mtime anyway. Files without a recorded hash (over
 * journal.contentHashMaxBytes) are judged by size and mtime alone.
 */
async function onlyTimesChanged(expected: State, now: State, aspects: readonly Aspect[], backend: Backend, path: string): Promise<boolean> {
  if (expected?.type !== 'file' || now?.type !== 'file' || !expected.sha256 || expected.size !== now.size) return false;
  if (!aspects.includes('content')) return false;
  // the other aspects (mode, owner) must hold by themselves
  if (mismatch(expected, now, aspects.filter((a) => a !== 'content' && a !== 'mtime')) !== null) return false;
  return (await hashAt(backend, path, now.size).catch(() => null)) === expected.sha256;
}

/** Why `op` cannot be undone as the journal says right now (path i only, or all paths). */
export async function conflictsOf(op: Operation, ctx: ConflictContext, only?: number): Promise<Conflict[]> {
  const out: Conflict[] = [];
  const add = (path: string, reason: string) => out.push({ seq: op.seq, op: op.op, path, reason });
  if (op.status === 'pending') {
    add(op.paths[0] as string, 'the operation has no outcome yet (still in progress, or a crash not yet recovered)');
    return out;
  }
  const contentOp = op.op === 'write' || op.op === 'truncate' || op.op === 'create';
  if (op.status === 'open' || (contentOp && ctx.openWritePaths?.includes(op.paths[0] as string))) {
    add(op.paths[0] as string, 'the file is open and being written by a running program (a write session is in progress)');
    return out;
  }
  for (let i = 0; i < op.paths.length; i++) {
    if (only !== undefined && i !== only) continue;
    const e = expectation(op, i);
    if (!e) continue;
    const path = op.paths[i] as string;
    const now = await stateOf(ctx.backend, path);
    const why = mismatch(e.expected, now, e.aspects);
    if (why && !ownWork(op, i, now, ctx) && !(await onlyTimesChanged(e.expected, now, e.aspects, ctx.backend, path))) {
      add(path, `${why} (someone changed it since #${op.seq})`);
    }
  }
  return out;
}

/**
 * Conflicts visible before anything is changed: each path is checked against the newest planned
 * operation that touches it (older ones are checked as the rollback reaches them). Paths below a
 * name that a newer planned rename moves are left to that moment too.
 */
export async function preflight(ops: Operation[], ctx: ConflictContext): Promise<Conflict[]> {
  const seen = new Set<string>();
  const moved: string[] = [];
  // files a newer planned operation changes, under whatever name (hard links share content)
  const touched = new Set<number>();
  const out: Conflict[] = [];
  for (const op of ops) {
    for (let i = 0; i < op.paths.length; i++) {
      const p = op.paths[i] as string;
      const ino = op.after?.[i]?.ino;
      if (seen.has(p) || moved.some((m) => isWithin(p, m))) continue;
      seen.add(p);
      if (ino !== undefined && touched.has(ino)) continue;
      out.push(...(await conflictsOf(op, ctx, i)));
    }
    if (op.op === 'rename') moved.push(...op.paths);
    for (const s of [...op.before, ...(op.after ?? [])]) if (s?.type === 'file') touched.add(s.ino);
  }
  return out;
}

export interface ApplyEnv {
  vfs: Vfs;
  stage: JournalStage;
  blobs: BlobStore;
  /** session and actor the undo mutations are journaled under */
  session: string;
  actor: string;
  force: boolean;
  /** leave operations with a conflict (and older ones on their paths) and undo the rest */
  skipConflicts?: boolean;
  openWritePaths?: () => readonly string[];
  onProgress?: (done: number, total: number) => void;
  /** every operation of the journal: where else a hard-linked file was seen */
  history?: readonly Operation[];
  /** where the rollback's intent and progress are journaled (none: not journaled, old style) */
  writer?: JournalWriter;
  /** the selection in words, for the intent */
  target?: string;
  /** partialWork() of the journal: undos an earlier rollback began; they are resumed */
  partial?: Map<number, Operation[]>;
  /**
   * resumedUndos(): operations an earlier rollback, cut short, finished undoing before it could
   * set the directory mtimes back; this one, taking up its work, sets them back at its end
   */
  resumed?: readonly Operation[];
}

const WRITE_ONLY = C.O_WRONLY;
/** S_ISUID | S_ISGID: what a chown clears */
const PRIVILEGE_BITS = 0o6000;

/** Undoes operations through a Vfs, so the undo is journaled (and policy keeps usage exact). */
/** Where the journal saw a file: at `path`, at time `t` (2s-1: before op s; 2s+1: after it). */
interface Sighting {
  t: number;
  path: string;
}

class Undoer {
  /**
   * Identity of files across names, renames and rollbacks, for relinking hard links: inode ->
   * where the journal saw it; a union-find joining the inode of a file with the inode of the
   * copy a rollback recreated in its place (the copy stands for the original from then on); and
   * the renames, to follow a sighting through directory moves to the moment being restored.
   */
  private index: { seen: Map<number, Sighting[]>; parent: Map<number, number>; renames: { t: number; from: string; to: string }[] } | null = null;

  constructor(private readonly env: ApplyEnv) {}

  private find(ino: number): number {
    const parent = this.ids().parent;
    let r = ino;
    while (parent.has(r) && parent.get(r) !== r) r = parent.get(r) as number;
    return r;
  }

  private join(a: number, b: number): void {
    const ra = this.find(a);
    const rb = this.find(b);
    if (ra !== rb) this.ids().parent.set(ra, rb);
  }

  private sight(ino: number, t: number, path: string): void {
    const seen = this.ids().seen;
    let list = seen.get(ino);
    if (!list) {
      list = [];
      seen.set(ino, list);
    }
    list.push({ t, path });
  }

  private ids(): NonNullable<Undoer['index']> {
    if (this.index) return this.index;
    this.index = { seen: new Map(), parent: new Map(), renames: [] };
    const history = this.env.history ?? [];
    const bySeq = new Map(history.map((op) => [op.seq, op]));
    for (const op of history) {
      op.before.forEach((st, i) => {
        if (st?.type === 'file') this.sight(st.ino, 2 * op.seq - 1, op.paths[i] as string);
      });
      op.after?.forEach((st, i) => {
        if (st?.type === 'file') this.sight(st.ino, 2 * op.seq + 1, op.paths[i] as string);
      });
      if (op.op === 'rename' && op.status === 'done' && op.after && (op.after[0] ?? null) === null) {
        this.index.renames.push({ t: 2 * op.seq, from: op.paths[0] as string, to: op.paths[1] as string });
      }
      // an undo that brought a file back at a path: the new inode stands for the old one
      const undone = op.undoes !== undefined ? bySeq.get(op.undoes) : undefined;
      if (!undone || !op.after) continue;
      op.after.forEach((st, i) => {
        const j = undone.paths.indexOf(op.paths[i] as string);
        const old = j >= 0 ? undone.before[j] : null;
        if (st?.type === 'file' && old?.type === 'file') this.join(old.ino, st.ino);
      });
    }
    return this.index;
  }

  /** Where something seen at `s.path` at time s.t is at time t, following directory renames. */
  private at(s: Sighting, t: number): string {
    let p = s.path;
    const renames = this.ids().renames;
    if (s.t < t) {
      for (const r of renames) if (r.t > s.t && r.t < t && isWithin(p, r.from)) p = rebase(p, r.from, r.to);
    } else {
      for (let i = renames.length - 1; i >= 0; i--) {
        const r = renames[i] as { t: number; from: string; to: string };
        if (r.t < s.t && r.t > t && isWithin(p, r.to)) p = rebase(p, r.to, r.from);
      }
    }
    return p;
  }

  /**
   * A removed name of a file that had other names (undoing `op`): if one of them still holds
   * that file (the same inode, or the copy a rollback made of it, as it was then), link to it,
   * so the names share content again as they did.
   */
  private async relink(path: string, st: NodeState, op: Operation, caller: Caller): Promise<boolean> {
    if (st.type !== 'file' || st.nlink < 2 || !this.vfs.backend.capabilities.hardLinks) return false;
    const root = this.find(st.ino);
    const when = 2 * op.seq - 1; // undoing op: the tree is as before it, but for this node
    const candidates = new Set<string>();
    for (const [ino, list] of this.ids().seen) if (this.find(ino) === root) for (const s of list) candidates.add(this.at(s, when));
    candidates.delete(path);
    for (const other of candidates) {
      const now = await stateOf(this.vfs.backend, other);
      // inode numbers are reused: the same number must also hold the same content
      if (now?.type === 'file' && this.find(now.ino) === root && mismatch(st, now, ['content']) === null) {
        await this.vfs.link(other, path, caller);
        return true;
      }
    }
    return false;
  }

  private get vfs(): Vfs {
    return this.env.vfs;
  }

  private exists(path: string): Promise<boolean> {
    return stateOf(this.vfs.backend, path).then((s) => s !== null);
  }

  /**
   * Undo `op`. `resume`: an earlier rollback was cut short part way through this very undo, so
   * each step checks whether it is done already (a removal whose name is gone, a rename already
   * moved back) and a node it was recreating is made again from the start.
   */
  async undo(op: Operation, caller: Caller, resume = false): Promise<void> {
    const [p0, p1] = op.paths as [string, string | undefined];
    const b0 = op.before[0] ?? null;
    if (resume) {
      switch (op.op) {
        case 'create':
        case 'symlink':
        case 'link':
          if (!b0 && !(await this.exists(p0))) return;
          break;
        case 'mkdir':
          if (!(await this.exists(p0))) return;
          break;
        case 'unlink':
        case 'rmdir':
          if (b0) await this.clearPartial(p0, b0, caller);
          break;
        case 'rename': {
          if (op.after && (op.after[0] ?? null) !== null) return;
          if (!(await this.exists(p0)) && (await this.exists(p1 as string))) await this.vfs.rename(p1 as string, p0, caller);
          const b1 = op.before[1] ?? null;
          if (b1) {
            await this.clearPartial(p1 as string, b1, caller);
            if (!(await this.exists(p1 as string))) await this.recreate(p1 as string, b1, op, caller);
          }
          return;
        }
        default:
          break;
      }
    }
    switch (op.op) {
      case 'create':
        if (b0?.ranges) return this.restoreRanges(p0, b0, b0.ranges, b0.rangesFrom ?? 0, caller);
        if (b0) return this.restoreContent(p0, b0, b0.blob, caller);
        return this.vfs.unlink(p0, caller);
      case 'write':
      case 'truncate':
        if (!b0) return; // nothing was there when it began (cannot happen through the Vfs)
        if (op.ranges) return this.restoreRanges(p0, b0, op.ranges, null, caller);
        if (b0.ranges) return this.restoreRanges(p0, b0, b0.ranges, b0.rangesFrom ?? 0, caller);
        return this.restoreContent(p0, b0, op.capture?.blob ?? b0.blob, caller);
      case 'unlink':
      case 'rmdir':
        if (b0) await this.recreate(p0, b0, op, caller);
        return;
      case 'mkdir':
        return this.vfs.rmdir(p0, caller);
      case 'symlink':
      case 'link':
      case 'mknod':
        return this.vfs.unlink(p0, caller);
      case 'rename': {
        if (op.after && (op.after[0] ?? null) !== null) return;
        await this.vfs.rename(p1 as string, p0, caller);
        const b1 = op.before[1] ?? null;
        if (b1) await this.recreate(p1 as string, b1, op, caller);
        return;
      }
      case 'chmod':
        if (b0) await this.vfs.chmod(p0, b0.mode, caller);
        return;
      case 'chown':
        if (b0) {
          await this.vfs.chown(p0, b0.uid, b0.gid, caller);
          // the chown cleared setuid/setgid (the kernel does, for any caller), and so did this one
          await this.restorePrivilegeBits(p0, b0, caller);
        }
        return;
      case 'utimens':
        if (b0) await this.vfs.utimens(p0, { atimeNs: BigInt(b0.atimeNs ?? b0.mtimeNs), mtimeNs: BigInt(b0.mtimeNs) }, caller);
        return;
      case 'setxattr':
      case 'removexattr': {
        const name = op.args?.xattr ?? '';
        const old = op.args?.xattrBefore ?? null;
        if (old === null) {
          await this.vfs.removexattr(p0, name, caller).catch((err: unknown) => {
            if (!(err instanceof VfsError && err.code === 'ENODATA')) throw err;
          });
        } else {
          await this.vfs.setxattr(p0, name, Buffer.from(old, 'base64'), 0, caller);
        }
        return;
      }
    }
  }

  /** Write a file's content back in place (hard links keep sharing it), then its mtime. */
  private async restoreContent(path: string, st: NodeState, blob: string | undefined, caller: Caller): Promise<void> {
    const fh = await this.vfs.open(path, WRITE_ONLY, caller);
    try {
      await this.vfs.ftruncate(fh, st.size, caller);
      // Without a before-image the session only appended: the first st.size bytes are intact.
      if (blob) await this.writeBlob(fh, blob, caller);
      await this.vfs.flush(fh, caller);
    } finally {
      await this.vfs.release(fh, caller);
    }
    await this.vfs.utimens(path, { mtimeNs: BigInt(st.mtimeNs) }, caller);
  }

  /**
   * Write range before-images back in place, then the mtime. `from`: the ranges are a node
   * state's data extents, every other byte of [from, size) was a hole; null: a write session's
   * extents (each one data or a hole), other bytes untouched by it. The span the ranges cover up
   * to the old size is cut and regrown (its holes come back as holes, an append goes), the
   * holes below it are punched, then the data is written.
   */
  private async restoreRanges(path: string, st: NodeState, ranges: readonly Range[], from: number | null, caller: Caller): Promise<void> {
    const plan = from === null ? restorePlan(ranges, st.size) : { cutAt: from, holesBelow: [] };
    const fh = await this.vfs.open(path, WRITE_ONLY, caller);
    try {
      if (plan.cutAt < st.size) await this.vfs.ftruncate(fh, plan.cutAt, caller);
      await this.vfs.ftruncate(fh, st.size, caller);
      for (const r of plan.holesBelow) await this.zero(fh, r.offset, r.length, caller);
      for (const r of ranges) if (r.blob) await this.writeBlob(fh, r.blob, caller, r.offset);
      await this.vfs.flush(fh, caller);
    } finally {
      await this.vfs.release(fh, caller);
    }
    await this.vfs.utimens(path, { mtimeNs: BigInt(st.mtimeNs) }, caller);
  }

  /** Make [offset, offset + length) zeros again: a hole where the store can punch one. */
  private async zero(fh: number, offset: number, length: number, caller: Caller): Promise<void> {
    try {
      await this.vfs.fallocate(fh, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length, caller);
      return;
    } catch (err) {
      if (!(err instanceof VfsError && (err.code === 'EOPNOTSUPP' || err.code === 'ENOSYS'))) throw err;
    }
    const zeros = Buffer.alloc(Math.min(length, 1 << 20));
    for (let done = 0; done < length; ) {
      const n = await this.vfs.write(fh, zeros, Math.min(zeros.length, length - done), offset + done, caller);
      if (n <= 0) throw new VfsError('EIO', 'short write while restoring content');
      done += n;
    }
  }

  private async writeBlob(fh: number, blob: string, caller: Caller, at = 0): Promise<void> {
    let off = at;
    for await (const chunk of this.env.blobs.chunks(blob)) {
      let done = 0;
      while (done < chunk.length) {
        const sub = done === 0 ? chunk : chunk.subarray(done);
        const n = await this.vfs.write(fh, sub, sub.length, off + done, caller);
        if (n <= 0) throw new VfsError('EIO', 'short write while restoring content');
        done += n;
      }
      off += chunk.length;
    }
  }

  /**
   * Resuming: what a cut-short rollback left at `path` while recreating `st` there. A directory
   * stays (its content may be back already); a file or symlink is removed and made again
   * (a partial copy cannot be told from a whole one cheaply).
   */
  private async clearPartial(path: string, st: NodeState, caller: Caller): Promise<void> {
    const now = await stateOf(this.vfs.backend, path);
    if (!now) return;
    if (now.type === 'dir' && st.type === 'dir') {
      this.skipCreate.add(path);
      return;
    }
    if (now.type !== 'dir') await this.vfs.unlink(path, caller);
  }

  /** directories a resumed undo found already made: only their metadata is restored */
  private readonly skipCreate = new Set<string>();

  /** Bring back a node that was removed (or replaced): type, content, mode, owner, mtime. */
  private async recreate(path: string, st: NodeState, op: Operation, caller: Caller): Promise<void> {
    if (st.type === 'dir') {
      if (!this.skipCreate.delete(path)) await this.vfs.mkdir(path, st.mode, caller);
    } else if (st.type === 'symlink') {
      await this.vfs.symlink(st.target ?? '', path, caller);
    } else if (isSpecial(st.type)) {
      await this.vfs.mknod(path, SPECIAL_IFMT[st.type] | st.mode, st.rdev ?? 0, caller);
    } else {
      if (await this.relink(path, st, op, caller)) return;
      if (st.size > 0 && !st.blob && !st.ranges) throw new VfsError('EIO', `no before-image of ${path} was kept`);
      const fh = await this.vfs.create(path, st.mode, C.O_WRONLY | C.O_CREAT | C.O_EXCL, caller);
      try {
        if (st.blob) await this.writeBlob(fh, st.blob, caller);
        if (st.ranges) {
          // a sparse file: its size, then its data (the rest stays holes)
          await this.vfs.ftruncate(fh, st.size, caller);
          for (const r of st.ranges) await this.writeBlob(fh, r.blob, caller, r.offset);
        }
        await this.vfs.flush(fh, caller);
      } finally {
        await this.vfs.release(fh, caller);
      }
    }
    await this.fixMeta(path, st, op, caller);
  }

  /** Mode (creation modes pass through the umask), owner and file mtime as recorded. */
  private async fixMeta(path: string, st: NodeState, op: Operation, caller: Caller): Promise<void> {
    const now = await stateOf(this.vfs.backend, path);
    if (!now) return;
    if (st.type === 'file') {
      // this copy now stands for the recorded file: other names of it link here
      this.join(st.ino, now.ino);
      this.sight(now.ino, 2 * op.seq - 1, path); // as it was before op

    }
    // owner first: a chown clears setuid/setgid, which the chmod after it sets again
    let mode = now.mode;
    if (this.vfs.backend.capabilities.owners && (now.uid !== st.uid || now.gid !== st.gid)) {
      await this.vfs.chown(path, st.uid, st.gid, caller);
      mode = (await stateOf(this.vfs.backend, path))?.mode ?? mode;
    }
    if (st.type !== 'symlink' && mode !== st.mode) await this.vfs.chmod(path, st.mode, caller);
    for (const [name, value] of Object.entries(st.xattrs ?? {})) await this.vfs.setxattr(path, name, Buffer.from(value, 'base64'), 0, caller);
    // (a directory's entries are put back after this, which sets its mtime again: applyRollback
    // sets it once more at the end)
    await this.vfs.utimens(path, { mtimeNs: BigInt(st.mtimeNs) }, caller);
  }

  /** Set the setuid/setgid bits of `path` back to the recorded state's (a chown cleared them). */
  private async restorePrivilegeBits(path: string, st: NodeState, caller: Caller): Promise<void> {
    if (st.type === 'symlink' || (st.mode & PRIVILEGE_BITS) === 0) return;
    const now = await stateOf(this.vfs.backend, path);
    if (now && (now.mode & PRIVILEGE_BITS) !== (st.mode & PRIVILEGE_BITS)) {
      await this.vfs.chmod(path, (now.mode & ~PRIVILEGE_BITS) | (st.mode & PRIVILEGE_BITS), caller);
    }
  }
}

/**
 * Undo `ops` (newest first) through the Vfs. Each undo is checked against the current state
 * first; on a conflict the rollback stops there (what was undone stays undone, and is itself
 * journaled) unless `force`, which restores the before-state anyway and reports what it overrode.
 */
export async function applyRollback(ops: Operation[], env: ApplyEnv): Promise<{ undone: number; conflicts: Conflict[]; forced: Conflict[]; skipped: Conflict[] }> {
  const undoer = new Undoer(env);
  const ctx = (): ConflictContext => {
    const c: ConflictContext = { backend: env.vfs.backend };
    const open = env.openWritePaths?.();
    if (open) c.openWritePaths = open;
    if (env.partial) c.partial = env.partial;
    return c;
  };
  const forced: Conflict[] = [];
  const skipped: Conflict[] = [];
  /** paths of skipped operations: an older operation on them (or above or below) is skipped too */
  const left: { path: string; seq: number }[] = [];
  let undone = 0;
  let restored = 0;
  const dirTimes = new Map<string, DirTime>();
  const note = (op: Operation) => {
    // an older utimens of a directory set its mtime further back than what a newer change of
    // its entries recorded: that one must not win at the end
    if (op.op === 'utimens') dirTimes.delete(op.paths[0] as string);
    moveDirTimes(dirTimes, op);
    noteDirTimes(dirTimes, op);
  };
  // what an earlier rollback cut short undid, in the order it undid it, among this one's undos
  const resumed = [...(env.resumed ?? [])].sort((a, b) => b.seq - a.seq);
  const noteResumed = (above: number) => {
    while (resumed.length > 0 && (resumed[0] as Operation).seq > above) note(resumed.shift() as Operation);
  };
  // the intent reaches the journal file before the first change: a rollback cut short is known
  env.writer?.appendNow({
    kind: 'rollback-intent', time: Date.now(), session: env.session, actor: env.actor, target: env.target ?? '',
    ops: ops.map((o) => o.seq), ...(env.force ? { force: true as const } : {}),
  });
  const finish = (conflicts: Conflict[]) => {
    env.writer?.appendNow({ kind: 'rollback-end', time: Date.now(), session: env.session, restored, complete: restored === ops.length });
    return { undone, conflicts, forced, skipped };
  };
  const skip = (op: Operation, why: Conflict[]) => {
    skipped.push(...why);
    for (const p of op.paths) left.push({ path: p, seq: op.seq });
  };
  for (const op of ops) {
    noteResumed(op.seq);
    if (env.skipConflicts) {
      const after = left.find((l) => op.paths.some((p) => isWithin(p, l.path) || isWithin(l.path, p)));
      if (after) {
        skip(op, [{ seq: op.seq, op: op.op, path: after.path, reason: `left as it is: the undo of #${after.seq} on ${after.path} was skipped` }]);
        continue;
      }
    }
    const conflicts = await conflictsOf(op, ctx());
    if (conflicts.length > 0) {
      if (env.skipConflicts) {
        skip(op, conflicts);
        continue;
      }
      if (!env.force) return finish(conflicts);
      forced.push(...conflicts);
      // a program's write session on it ends here, so the undo is not recorded as part of it
      for (const p of op.paths) await env.stage.endSessionAt(p);
    }
    const caller: Caller = { operator: true };
    env.stage.tag(caller, { session: env.session, actor: env.actor, undoes: op.seq });
    try {
      await undoer.undo(op, caller, env.partial?.has(op.seq) ?? false);
      env.writer?.appendSoon({ kind: 'restored', of: op.seq, time: Date.now(), session: env.session });
      restored++;
      note(op);
    } catch (err) {
      const reason = err instanceof VfsError ? err.reason : (err as Error).message;
      const c: Conflict = { seq: op.seq, op: op.op, path: op.paths[0] as string, reason: `undo failed: ${reason}` };
      if (env.skipConflicts) {
        skip(op, [c]);
        continue;
      }
      if (!env.force) return finish([c]);
      forced.push(c);
    }
    undone++;
    env.onProgress?.(undone, ops.length);
  }
  noteResumed(-1);
  return finish(await restoreDirTimes(dirTimes, env));
}

/**
 * The operations earlier rollbacks finished undoing (and still stand for) where such a rollback
 * was cut short or stopped and `ops` take up what it left: it never got to set the directory
 * mtimes those undos noted back, so the run that finishes its work does.
 */
export function resumedUndos(h: History, ops: readonly Operation[]): Operation[] {
  const planned = new Set(ops.map((o) => o.seq));
  const undone = undoneSeqs(h);
  const out: Operation[] = [];
  for (const run of h.rollbacks.values()) {
    if (run.end?.complete) continue;
    if (!run.intent.ops.some((seq) => planned.has(seq) && !run.restored.has(seq))) continue;
    for (const seq of run.intent.ops) {
      const op = h.bySeq.get(seq);
      if (op && run.restored.has(seq) && undone.has(seq) && !planned.has(seq)) out.push(op);
    }
  }
  return out;
}

/** A directory's mtime to set back once the rollback is done, and the operation that recorded it. */
interface DirTime {
  mtimeNs: string;
  op: Operation;
}

/**
 * The directory mtimes `op` recorded as they were before it (its parents' at the session's first
 * change of them, and a removed directory's own). Ops come newest first: the oldest one's wins.
 */
function noteDirTimes(times: Map<string, DirTime>, op: Operation): void {
  const b0 = op.before[0] ?? null;
  if (op.op === 'rmdir' && b0?.type === 'dir') times.set(op.paths[0] as string, { mtimeNs: b0.mtimeNs, op });
  const b1 = op.before[1] ?? null;
  if (op.op === 'rename' && b1?.type === 'dir') times.set(op.paths[1] as string, { mtimeNs: b1.mtimeNs, op });
  for (const d of op.dirs ?? []) times.set(d.path, { mtimeNs: d.mtimeNs, op });
}

/**
 * Keep the noted mtimes with their directories as `op`'s undo moves or removes them: the undo of
 * a mkdir removes the directory (what was noted at or below it was another directory's than the
 * one a later undo may put at that name), the undo of a rename moves what was noted at or below
 * its new name back to the old one (which held nothing of its own until then).
 */
function moveDirTimes(times: Map<string, DirTime>, op: Operation): void {
  const [p0, p1] = op.paths as [string, string | undefined];
  if (op.op === 'mkdir') {
    for (const k of [...times.keys()]) if (isWithin(k, p0)) times.delete(k);
    return;
  }
  if (op.op !== 'rename' || p1 === undefined || (op.after && (op.after[0] ?? null) !== null)) return;
  const moved: [string, DirTime][] = [];
  for (const [k, v] of [...times]) {
    if (isWithin(k, p0)) times.delete(k);
    else if (isWithin(k, p1)) {
      times.delete(k);
      moved.push([rebase(k, p1, p0), v]);
    }
  }
  for (const [k, v] of moved) times.set(k, v);
}

/**
 * Set the directories' mtimes back (noteDirTimes) now that their entries are: each undo that
 * put an entry back set its directory's mtime to the rollback's time. A directory no longer
 * there (a later undo removed or moved it) is left; a failure is reported as the recording op's.
 */
async function restoreDirTimes(times: Map<string, DirTime>, env: ApplyEnv): Promise<Conflict[]> {
  for (const [path, { mtimeNs, op }] of times) {
    try {
      const now = await stateOf(env.vfs.backend, path);
      if (now?.type !== 'dir' || now.mtimeNs === mtimeNs) continue;
      // journaled as part of that op's undo: a later rollback to the same point has nothing left to do
      const caller: Caller = { operator: true };
      env.stage.tag(caller, { session: env.session, actor: env.actor, undoes: op.seq });
      await env.vfs.utimens(path, { mtimeNs: BigInt(mtimeNs) }, caller);
    } catch (err) {
      if (err instanceof VfsError && (err.code === 'ENOENT' || err.code === 'ENOTDIR')) continue;
      const reason = err instanceof VfsError ? err.reason : (err as Error).message;
      return [{ seq: op.seq, op: op.op, path, reason: `setting the directory's mtime back failed: ${reason}` }];
    }
  }
  return [];
}

/**
 * What a rollback would do, and the conflicts visible now, without changing anything (the
 * result of a dry run). Needs only the journal's history and a backend to look at.
 */
export async function planRollback(h: History, sel: RollbackSelection, ctx: ConflictContext): Promise<{ ops: Operation[]; result: RollbackResult }> {
  const { ops, alreadyUndone } = selectOperations(h, sel);
  const partial = partialWork(h);
  const conflicts = await preflight(ops, { ...ctx, partial });
  const unfinished = unfinishedRollbacks(h);
  return {
    ops,
    result: {
      dryRun: true, session: null, planned: plannedSteps(ops), alreadyUndone, undone: 0, conflicts, complete: conflicts.length === 0, forced: [],
      ...(unfinished.length ? { unfinished } : {}),
    },
  };
}
