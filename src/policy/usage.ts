import { type Attr, type Backend, joinPath, VfsError } from '../core/index.js';
import { POLICY_DEFAULTS } from '../config/index.js';
import { type CompiledPolicy, type CompiledRoot, isKeptName } from './compile.js';

/**
 * Per-root usage, counted like a file system counts for quotas:
 *  - bytes: every file and symlink below the root (a symlink: its target's length), each inode
 *    once (hard links do not count twice); directories count no bytes. A file costs its size,
 *    or, when fallocate --keep-size reserved blocks past its end, where that reservation ends
 *    (chargeOf): what the program could grow it to without new space, which it may not hold
 *    beyond its quota;
 *  - files: every node below the root (files, directories, symlinks), each inode once, the
 *    root directory itself excluded (df's "inodes used").
 * Hidden names (the policy's `hide`) are counted apart: they cost the program nothing (its
 * usage, quota and df leave them out, so they cannot be detected by their cost); the operator
 * sees them in the mount's log.
 * Counted once at mount, then kept exact by the policy stage as mutations succeed.
 */
export interface Usage {
  bytes: number;
  files: number;
}

const BLOCK = POLICY_DEFAULTS.reservationBlockBytes;

/** What a file of `size` bytes costs, with blocks reserved up to `reservedTo` (0: none). */
export function chargeOf(size: number, reservedTo: number): number {
  return reservedTo > Math.ceil(size / BLOCK) * BLOCK ? reservedTo : size;
}

/** Whether a stat shows blocks past the file's size (then it may hold a --keep-size reservation). */
export function mayHoldReservation(st: Attr): boolean {
  return st.type === 'file' && st.blocks * 512 > Math.ceil(st.size / BLOCK) * BLOCK;
}

/** Where `path`'s reservation past its size ends (0: none), asking the store. */
async function reservationOf(backend: Backend, path: string, st: Attr): Promise<number> {
  if (!mayHoldReservation(st)) return 0;
  const f = await backend.open(path, { write: false });
  try {
    if (!f.allocatedEnd) return 0;
    const end = await f.allocatedEnd();
    return chargeOf(st.size, end) === st.size ? 0 : end;
  } finally {
    await f.close();
  }
}

/** What a walk found: usage, and what the same walk saw of hidden names and reservations. */
export interface Count {
  visible: Usage;
  hidden: Usage;
  /** inode -> where its reservation past the end ends (only inodes that have one) */
  reserved: Map<number, number>;
  /** directories kept for their hidden names (POLICY_DEFAULTS.keptPrefix) */
  kept: number;
}

/**
 * Walk `dir` in the backend. `hidden(path)` (a backend path) says a node is hidden: it and
 * everything below it are counted in `hidden`.
 */
export async function countUsage(backend: Backend, dir: string, hidden?: (path: string) => boolean): Promise<Count> {
  const out: Count = { visible: { bytes: 0, files: 0 }, hidden: { bytes: 0, files: 0 }, reserved: new Map(), kept: 0 };
  const seen = new Set<number>();
  const stack: Array<[string, boolean]> = [[dir, false]];
  while (stack.length) {
    const [d, inHidden] = stack.pop() as [string, boolean];
    let entries;
    try {
      entries = await backend.readdir(d);
    } catch (err) {
      // a directory removed beside the mount while we walk: it no longer counts
      if (err instanceof VfsError && err.code === 'ENOENT' && d !== dir) continue;
      throw err;
    }
    for (const e of entries) {
      const p = joinPath(d, e.name);
      const h = inHidden || (hidden?.(p) ?? false);
      const u = h ? out.hidden : out.visible;
      if (e.type === 'dir') {
        u.files++;
        if (isKeptName(e.name)) out.kept++;
        stack.push([p, h]);
        continue;
      }
      let st;
      try {
        st = await backend.stat(p);
      } catch (err) {
        if (err instanceof VfsError && err.code === 'ENOENT') continue;
        throw err;
      }
      if (st.nlink > 1) {
        if (seen.has(st.ino)) continue;
        seen.add(st.ino);
      }
      u.files++;
      if (st.type === 'dir') continue;
      const reservedTo = await reservationOf(backend, p, st).catch(() => 0);
      if (reservedTo > 0) out.reserved.set(st.ino, reservedTo);
      u.bytes += chargeOf(st.size, reservedTo);
    }
  }
  return out;
}

/** Usage of every counted root, indexed like policy.roots (null: not counted). */
export class UsageTable {
  constructor(
    /** what the program's usage, quota and df see */
    readonly byRoot: (Usage | null)[],
    /** hidden names, per root: for the operator */
    readonly hiddenByRoot: (Usage | null)[] = byRoot.map((u) => (u ? { bytes: 0, files: 0 } : null)),
    /** inode -> end of the blocks fallocate --keep-size reserved past its size, as charged */
    readonly reserved = new Map<number, number>(),
    /** directories kept for their hidden names (a mkdir then looks for one to bring back) */
    public kept = 0,
  ) {}

  of(root: CompiledRoot): Usage | null {
    return this.byRoot[root.index] ?? null;
  }

  /** Take a new count's numbers: a staged mount's view after its overlay was applied or dropped. */
  takeFrom(o: UsageTable): void {
    this.byRoot.splice(0, this.byRoot.length, ...o.byRoot);
    this.hiddenByRoot.splice(0, this.hiddenByRoot.length, ...o.hiddenByRoot);
    this.reserved.clear();
    for (const [k, v] of o.reserved) this.reserved.set(k, v);
    this.kept = o.kept;
  }

  hiddenOf(root: CompiledRoot): Usage | null {
    return this.hiddenByRoot[root.index] ?? null;
  }

  /** Count every root that needs it (writable, or with a quota). */
  static async count(policy: CompiledPolicy, backend: Backend): Promise<UsageTable> {
    const byRoot: (Usage | null)[] = [];
    const hiddenByRoot: (Usage | null)[] = [];
    const reserved = new Map<number, number>();
    let kept = 0;
    for (const root of policy.roots) {
      if (!root.counted) {
        byRoot.push(null);
        hiddenByRoot.push(null);
        continue;
      }
      const c = await countRoot(root, backend);
      byRoot.push(c.visible);
      hiddenByRoot.push(c.hidden);
      for (const [ino, end] of c.reserved) reserved.set(ino, end);
      kept += c.kept;
    }
    return new UsageTable(byRoot, hiddenByRoot, reserved, kept);
  }
}

/** A fresh count of one root's usage in the backend (also what tests compare against). */
export function countRoot(root: CompiledRoot, backend: Backend): Promise<Count> {
  return countUsage(backend, root.source, (p) => root.isHidden(root.toView(p)));
}
