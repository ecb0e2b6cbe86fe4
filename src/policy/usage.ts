import { type Backend, joinPath, VfsError } from '../core/index.js';
import type { CompiledPolicy, CompiledRoot } from './compile.js';

/**
 * Per-root usage, counted like a file system counts for quotas:
 *  - bytes: the size of every file and symlink (its target's length) below the root, each
 *    inode once (hard links do not count twice); directories count no bytes;
 *  - files: every node below the root (files, directories, symlinks), each inode once, the
 *    root directory itself excluded (df's "inodes used").
 * Counted once at mount, then kept exact by the policy stage as mutations succeed.
 */
export interface Usage {
  bytes: number;
  files: number;
}

/** Walk `dir` in the backend; `skip(path)` leaves out reserved space (journal state). */
export async function countUsage(backend: Backend, dir: string, skip?: (path: string) => boolean): Promise<Usage> {
  const usage: Usage = { bytes: 0, files: 0 };
  const seen = new Set<number>();
  const stack = [dir];
  while (stack.length) {
    const d = stack.pop() as string;
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
      if (skip?.(p)) continue;
      if (e.type === 'dir') {
        usage.files++;
        stack.push(p);
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
      usage.files++;
      if (st.type !== 'dir') usage.bytes += st.size;
    }
  }
  return usage;
}

/** Usage of every counted root, indexed like policy.roots (null: not counted). */
export class UsageTable {
  constructor(readonly byRoot: (Usage | null)[]) {}

  of(root: CompiledRoot): Usage | null {
    return this.byRoot[root.index] ?? null;
  }

  /** Count every root that needs it (writable, or with a quota). */
  static async count(policy: CompiledPolicy, backend: Backend): Promise<UsageTable> {
    const byRoot: (Usage | null)[] = [];
    for (const root of policy.roots) {
      byRoot.push(root.counted ? await countRoot(root, backend) : null);
    }
    return new UsageTable(byRoot);
  }
}

/** A fresh count of one root's usage in the backend (also what tests compare against). */
export function countRoot(root: CompiledRoot, backend: Backend): Promise<Usage> {
  return countUsage(backend, root.source);
}
