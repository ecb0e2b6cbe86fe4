import { callerProcess, describeCause, type Caller, failureLevel, type Logger, VfsError } from '../core/index.js';
import { DEFAULTS } from '../config/index.js';

/**
 * Unexpected failures of FUSE requests (the backend answering 503, a disk error, a bug), logged
 * once where the request is answered, with what an operator needs to find the cause: the op,
 * the path, the errno the program saw, the cause underneath, and who asked.
 *
 * A backend outage fails every request; one line each would fill the disk. A sliding window
 * lets at most `perSecond` lines out in any second; what it holds back is counted and reported
 * in one "N more suppressed" line (which counts against the window too) as soon as room frees.
 */
export class FailureLog {
  /** when each of the last `perSecond` lines went out (a ring; the oldest at `next`) */
  private readonly sent: Float64Array;
  private next = 0;
  private suppressed = 0;
  private suppressedSince = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly log: Logger,
    private readonly perSecond = DEFAULTS.failureLogPerSecond,
    private readonly now: () => number = Date.now,
  ) {
    this.sent = new Float64Array(perSecond).fill(-Infinity);
  }

  /** Log `err` if it is unexpected (failureLevel) and the window has room; false: not logged. */
  report(op: string, path: string | null, caller: Caller, err: unknown): boolean {
    const level = failureLevel(err);
    if (level === undefined) return false;
    const now = this.now();
    if (this.suppressed > 0 && this.room(now)) this.flush(now);
    if (!this.room(now)) {
      if (this.suppressed++ === 0) this.suppressedSince = now;
      this.schedule(now);
      return false;
    }
    this.take(now);
    const who = callerProcess(caller.pid);
    const cause = describeCause(err);
    this.log[level](
      {
        op, path,
        errno: err instanceof VfsError ? err.code : 'EIO',
        reason: err instanceof VfsError ? err.reason : String((err as Error)?.message ?? err),
        ...(cause !== undefined ? { cause } : {}),
        ...(who !== undefined ? { callerPid: who.pid, ...(who.cmd !== undefined ? { callerCmd: who.cmd } : {}) } : {}),
        // a bug, not the backend: its stack says where
        ...(err instanceof VfsError ? {} : { stack: (err as Error)?.stack }),
      },
      'request failed',
    );
    return true;
  }

  /** Report what is still held back (at unmount). */
  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.suppressed > 0) this.flush(this.now());
  }

  private room(now: number): boolean {
    return (this.sent[this.next] as number) <= now - 1000;
  }

  private take(now: number): void {
    this.sent[this.next] = now;
    this.next = (this.next + 1) % this.perSecond;
  }

  private flush(now: number): void {
    this.take(now);
    this.log.warn({ suppressed: this.suppressed, forMs: Math.round(now - this.suppressedSince) }, `${this.suppressed} more failed requests suppressed (at most ${this.perSecond} lines a second)`);
    this.suppressed = 0;
  }

  private schedule(now: number): void {
    if (this.timer) return;
    const wait = Math.max(1, (this.sent[this.next] as number) + 1000 - now);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      const t = this.now();
      if (this.suppressed === 0) return;
      if (this.room(t)) this.flush(t);
      else this.schedule(t);
    }, wait);
    this.timer.unref();
  }
}
