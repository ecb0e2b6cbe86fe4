import fs from 'node:fs';
import nodePath from 'node:path';
import { randomUUID } from 'node:crypto';
import { fromNodeError, removeFileSoon } from '../../core/index.js';

export interface StagingFile {
  fd: number;
  file: string;
  /**
   * Its length, kept by the one handle that writes it (every write, truncate and fill goes
   * through GcsFile): a stat of an open file, a close's copy into the spool and the reuse check
   * here need no fstat (tar's create, write, chown, chmod, utimens and close asked 13 times
   * per file)
   */
  size: number;
}

/*
 * The staging files of open handles that write, reused. A handle's staging file used to be
 * created at its first write and removed at its close: for tar -x of 3,000 small files, 3,000
 * creates and unlinks in the staging directory. On ext4 without a journal (a common /tmp and
 * state-directory setup) a new inode is never one freed in the last few seconds, so each
 * create scanned past all the inodes just freed (the kernel's recently_deleted()): the more
 * files a program wrote per second, the more every create cost, the content cache's and the
 * program's own included. A closed handle's file is emptied instead (ftruncate) and the next
 * handle takes it, open, with no request to the disk at all.
 */
export class StagingFiles {
  private readonly free: StagingFile[] = [];
  private closed = false;

  constructor(
    private readonly dir: string,
    /** emptied files kept at most (each holds a descriptor) */
    private readonly keep: number,
    /** larger files are removed, not emptied (see give) */
    private readonly reuseMaxBytes: number,
  ) {}

  /** An empty staging file of this process's, open for reading and writing. */
  async take(what: string): Promise<StagingFile> {
    const reused = this.free.pop();
    if (reused) return reused;
    const file = nodePath.join(this.dir, `${Date.now()}-${randomUUID()}.stage`);
    // created on the thread pool: a new file costs the disk a metadata write (about 0.5 ms on an
    // ext4 state directory here), which the event loop every request waits for must not sit through
    const fd = await new Promise<number>((resolve, reject) => fs.open(file, 'wx+', 0o600, (err, n) => (err ? reject(fromNodeError(err, `stage ${what}`)) : resolve(n))));
    return { fd, file, size: 0 };
  }

  /**
   * A handle is done with `f` (its bytes are in the spool or the bucket): emptied for the next
   * one, or removed. A small file is emptied here, on the event loop: its ftruncate frees a few
   * blocks in memory, far less than a trip through the thread pool, whose wake-ups of a pool
   * thread and of the loop cost most on a busy host. A large one is removed on the pool (its
   * blocks are disk work), as is any file beyond the `keep` kept.
   */
  give(f: StagingFile): void {
    if (!this.closed && this.free.length < this.keep) {
      try {
        if (f.size <= this.reuseMaxBytes) {
          fs.ftruncateSync(f.fd, 0);
          f.size = 0;
          this.free.push(f);
          return;
        }
      } catch {
        // removed below
      }
    }
    fs.closeSync(f.fd);
    removeFileSoon(f.file);
  }

  /** Files still kept are removed (the backend closes). */
  close(): void {
    this.closed = true;
    for (const f of this.free.splice(0)) {
      fs.closeSync(f.fd);
      fs.rmSync(f.file, { force: true });
    }
  }
}
