import type { BackendFile } from '../backend/types.js';
import { isWithin, rebase } from './paths.js';

/**
 * The state shared by every handle open on one path: one backend file, so a process reads at
 * once what another wrote through the mount (close-to-open consistency and better). A state
 * follows its path through renames and is detached from the namespace when its path is
 * unlinked or renamed over, while the handles keep working on the old node.
 */
export class OpenFile {
  /** null once unlinked (or replaced by a rename) while open */
  path: string | null;
  file: BackendFile;
  handles = 0;
  /** a write session is in progress: something was written since open or the last fsync */
  dirty = false;

  constructor(path: string, file: BackendFile) {
    this.path = path;
    this.file = file;
  }
}

export class OpenFileTable {
  private readonly byPath = new Map<string, OpenFile>();

  get(path: string): OpenFile | undefined {
    return this.byPath.get(path);
  }

  add(of: OpenFile): void {
    if (of.path !== null) this.byPath.set(of.path, of);
  }

  /** Drop a state whose last handle closed. */
  remove(of: OpenFile): void {
    if (of.path !== null && this.byPath.get(of.path) === of) this.byPath.delete(of.path);
  }

  /** The node at `path` left the namespace (unlink, or replaced by a rename). */
  detach(path: string): void {
    const of = this.byPath.get(path);
    if (of) {
      this.byPath.delete(path);
      of.path = null;
    }
  }

  /** A rename moved `from` (a file or a whole directory) to `to`. */
  move(from: string, to: string): void {
    if (this.byPath.size === 0) return;
    const moved: OpenFile[] = [];
    for (const [p, of] of this.byPath) {
      if (isWithin(p, from)) {
        this.byPath.delete(p);
        of.path = rebase(p, from, to);
        moved.push(of);
      }
    }
    for (const of of moved) this.byPath.set(of.path as string, of);
  }

  get size(): number {
    return this.byPath.size;
  }
}
