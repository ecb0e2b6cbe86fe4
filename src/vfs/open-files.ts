import { type BackendFile, isWithin, rebase } from '../core/index.js';

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
  /** its last handle was released: the backend file is (being) closed, never hand it out again */
  released = false;
  /** a write session is in progress: something was written since open or the last fsync */
  dirty = false;
  /**
   * The file's size as the mutation path knows it (set at open, kept by the policy stage as
   * writes and truncates succeed), so a write's growth needs no fstat. undefined = unknown
   * (then fstat): e.g. a hard-linked file, whose other names may change it.
   */
  size: number | undefined;
  /** kept by the policy stage: where blocks reserved past the end (fallocate KEEP_SIZE) end; 0 none, undefined unknown */
  reservedTo: number | undefined = undefined;

  constructor(path: string, file: BackendFile, size?: number) {
    this.path = path;
    this.file = file;
    this.size = size;
  }
}

/**
 * libfuse 2 without hard_remove renames a file that is unlinked (or renamed over) while open to
 * `.fuse_hidden<16 hex digits>` in the same directory, and unlinks that name after the last close.
 */
export function isFuseHiddenName(path: string): boolean {
  return /\/\.fuse_hidden[0-9a-f]{16}$/.test(path);
}

export class OpenFileTable {
  private readonly byPath = new Map<string, OpenFile>();
  /** `.fuse_hidden*` names of states whose node was unlinked while open (never in the backend) */
  private readonly hiddenByPath = new Map<string, OpenFile>();
  /** hidden names of files libfuse still counted as open after the core had released them */
  private readonly goneHidden = new Set<string>();

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

  /** The node at `path` was unlinked while open; libfuse now calls it `alias` until the last close. */
  hide(path: string, alias: string): OpenFile | undefined {
    const of = this.byPath.get(path);
    if (!of) return undefined;
    this.detach(path);
    this.hiddenByPath.set(alias, of);
    return of;
  }

  hidden(alias: string): OpenFile | undefined {
    return this.hiddenByPath.get(alias);
  }

  /**
   * libfuse hid a file it still counted as open, but the core had already released it (the
   * release was answered and libfuse had not yet dropped its count when the unlink came in;
   * measured with libfuse 3 and sqlite's journal). The file is unlinked for real; libfuse may
   * or may not unlink the hidden name later, so the name is remembered, a bounded while.
   */
  markGone(alias: string): void {
    this.goneHidden.add(alias);
    if (this.goneHidden.size > 1024) this.goneHidden.delete(this.goneHidden.values().next().value as string);
  }

  /** libfuse unlinks the hidden name after the last close: forget it. */
  unhide(alias: string): boolean {
    return this.hiddenByPath.delete(alias) || this.goneHidden.delete(alias);
  }

  /** A rename moved `from` (a file or a whole directory) to `to`. */
  move(from: string, to: string): void {
    for (const [p, of] of [...this.hiddenByPath]) {
      if (isWithin(p, from)) {
        this.hiddenByPath.delete(p);
        this.hiddenByPath.set(rebase(p, from, to), of);
      }
    }
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
