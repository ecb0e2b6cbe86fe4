import { isWithin, rebase } from '../../core/index.js';
import { inodeNumber } from './metadata.js';

/**
 * Inode numbers for the life of a mount. An object has no identity of its own, so a path's
 * number is a hash of the path (the same on every mount and host) until a rename moves the node:
 * then the number goes with it (POSIX: rename keeps the inode; `find`, `rsync`, git and editors
 * that watch a file rely on it) and the vacated path gets a fresh number, so a new node made
 * there is not mistaken for the moved one. What renames remember lives in this process only: the
 * next mount numbers every path by its hash again.
 */
export class InodeNumbers {
  /** path -> number, for paths a rename touched (everything else: the hash) */
  private readonly moved = new Map<string, number>();
  /** fresh numbers sit above the 48-bit hashes and stay exact as JS numbers */
  private next = 2 ** 48;

  of(path: string): number {
    return this.moved.get(path) ?? inodeNumber(path);
  }

  /**
   * `from` was renamed to `to`. `below`: paths under `from` that moved with it (objects and the
   * directories between), for a directory; their numbers follow too.
   */
  renamed(from: string, to: string, below: Iterable<string> = []): void {
    const carried = new Map<string, number>([[from, this.of(from)]]);
    for (const p of below) if (isWithin(p, from)) carried.set(p, this.of(p));
    for (const [p, n] of this.moved) if (isWithin(p, from)) carried.set(p, n);
    // whatever `to` held (replaced) and anything numbered under it is gone
    for (const p of [...this.moved.keys()]) if (isWithin(p, to)) this.moved.delete(p);
    for (const [p, n] of carried) {
      this.moved.set(rebase(p, from, to), n);
      this.moved.set(p, this.fresh());
    }
  }

  /**
   * A file (or symlink) at `from` was renamed to `to`: as renamed(), without looking for paths
   * below either (a file has none; a path left from a directory once there keeps a number no
   * live node has). Constant time: git renames every object it writes, and a scan of all the
   * moved paths per rename made a 3,000-file `git add` spend 2 s of CPU here.
   */
  renamedFile(from: string, to: string): void {
    const n = this.of(from);
    this.moved.set(to, n);
    this.moved.set(from, this.fresh());
  }

  private fresh(): number {
    return this.next++;
  }
}
