import fs from 'node:fs';
import { DEFAULTS } from '../config/index.js';
import type { Logger } from '../core/index.js';

export interface StateSpace {
  freeBytes: number;
  totalBytes: number;
  /** below DEFAULTS.journal.lowSpaceFraction of the file system, or lowSpaceBytes */
  low: boolean;
}

/** How much room the file system holding `dir` has left for an unprivileged writer (statfs). */
export function stateSpace(dir: string, limits = { fraction: DEFAULTS.journal.lowSpaceFraction, bytes: DEFAULTS.journal.lowSpaceBytes }): StateSpace {
  const s = fs.statfsSync(dir);
  const freeBytes = s.bavail * s.bsize;
  const totalBytes = s.blocks * s.bsize;
  return { freeBytes, totalBytes, low: freeBytes < limits.bytes || (totalBytes > 0 && freeBytes / totalBytes < limits.fraction) };
}

function mib(n: number): string {
  return `${(n / 1024 / 1024).toFixed(n < 10 * 1024 * 1024 ? 1 : 0)} MiB`;
}

/**
 * Looks at the state directory's free space now and then: a file system running low is a
 * warning in the log (once each time it becomes low) and a line in /.ledgerfs/usage (note()),
 * before a full one starts refusing changes (ENOSPC: nothing is changed unjournaled).
 */
export class StateSpaceWatch {
  private last: StateSpace | null = null;
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly dir: string, private readonly log: Logger) {}

  check(): StateSpace | null {
    let now: StateSpace;
    try {
      now = stateSpace(this.dir);
    } catch {
      return this.last;
    }
    if (now.low && !this.last?.low) {
      this.log.warn({ state: this.dir, freeBytes: now.freeBytes, totalBytes: now.totalBytes }, `journal: the state directory's file system is low on space (${mib(now.freeBytes)} free of ${mib(now.totalBytes)}); when it is full, changes are refused with ENOSPC. Free space, or drop old history: ledgerfs gc --max-bytes SIZE`);
    }
    this.last = now;
    return now;
  }

  start(everyMs: number): void {
    this.check();
    this.timer = setInterval(() => this.check(), everyMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** A line for /.ledgerfs/usage when the space is low, else null. */
  note(): string | null {
    const s = this.last;
    if (!s?.low) return null;
    return `warning: the journal's state directory is low on space: ${mib(s.freeBytes)} free of ${mib(s.totalBytes)}; when it is full, changes are refused (ENOSPC) state_free_bytes=${s.freeBytes}`;
  }
}
