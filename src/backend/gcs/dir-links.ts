import { isWithin, parentOf, rebase } from '../../core/index.js';

/**
 * A directory's link count as POSIX has it, 2 + its subdirectories, as far as this backend
 * knows them: from a listing of the directory, from having made it (a new directory is empty),
 * and from the mkdir, rmdir and renames made through it since. Asking the bucket for every stat
 * would cost a full listing of the directory; a directory this backend has not listed or made
 * counts 2, as every directory did before.
 */
export class DirLinks {
  /** directory -> subdirectories, where known */
  private readonly subdirs = new Map<string, number>();

  listed(dir: string, subdirs: number): void {
    this.subdirs.set(dir, subdirs);
  }

  nlink(dir: string): number {
    return 2 + (this.subdirs.get(dir) ?? 0);
  }

  made(dir: string): void {
    this.subdirs.set(dir, 0);
    this.add(parentOf(dir), 1);
  }

  removed(dir: string): void {
    this.forgetUnder(dir);
    if (dir !== '/') this.add(parentOf(dir), -1);
  }

  /** the directory `from` is now `to` (`replaced`: an empty directory was there) */
  renamed(from: string, to: string, replaced: boolean): void {
    const moved = [...this.subdirs].filter(([k]) => isWithin(k, from));
    this.forgetUnder(to);
    for (const [k] of moved) this.subdirs.delete(k);
    for (const [k, n] of moved) this.subdirs.set(rebase(k, from, to), n);
    this.add(parentOf(from), -1);
    if (!replaced) this.add(parentOf(to), 1);
  }

  private add(dir: string, d: number): void {
    const n = this.subdirs.get(dir);
    if (n !== undefined) this.subdirs.set(dir, Math.max(0, n + d));
  }

  private forgetUnder(dir: string): void {
    for (const k of [...this.subdirs.keys()]) if (isWithin(k, dir)) this.subdirs.delete(k);
  }
}
