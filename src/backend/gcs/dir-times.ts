import type { Attr } from '../../core/index.js';
import { isWithin, rebase } from '../../core/index.js';

/**
 * A directory's mtime and ctime as POSIX has them: they move when an entry is added, removed or
 * renamed. On a bucket that would cost a metadata patch of the directory's placeholder for every
 * create and unlink (twice the requests of a small file), so the times are kept here, for the
 * life of the backend, for the directories changed through it; an explicit utimens of the
 * directory is recorded in its placeholder as before and takes over. Another host, or the next
 * mount, sees the placeholder's recorded times.
 */
export class DirTimes {
  private readonly changed = new Map<string, bigint>();

  /** An entry of `dir` was added, removed or renamed now. */
  entriesChanged(dir: string, nowNs: bigint): void {
    const prev = this.changed.get(dir);
    // strictly later than the last change, even within one clock tick
    this.changed.set(dir, prev !== undefined && prev >= nowNs ? prev + 1n : nowNs);
  }

  changedAt(dir: string): bigint | undefined {
    return this.changed.get(dir);
  }

  /** utimens set the directory's mtime: its placeholder holds the time now. */
  timesSet(dir: string): void {
    this.changed.delete(dir);
  }

  /** The attributes of the directory `path` with its entries' last change applied. */
  apply(path: string, a: Attr): Attr {
    const t = this.changed.get(path);
    if (t === undefined) return a;
    a.mtimeNs = t;
    if (a.ctimeNs < t) a.ctimeNs = t;
    return a;
  }

  renamed(from: string, to: string): void {
    for (const k of [...this.changed.keys()]) if (isWithin(k, to)) this.changed.delete(k);
    for (const [k, t] of [...this.changed]) {
      if (!isWithin(k, from)) continue;
      this.changed.delete(k);
      this.changed.set(rebase(k, from, to), t);
    }
  }

  removed(dir: string): void {
    for (const k of [...this.changed.keys()]) if (isWithin(k, dir)) this.changed.delete(k);
  }
}
