import fs from 'node:fs';
import { pidAlive } from '../core/index.js';

/** What a refusal says of the lock's holder. */
export function inUse(holder: LockInfo): string {
  return `the journal is in use by pid ${holder.pid} (${holder.role}, since ${holder.since})`;
}

export class JournalLockedError extends Error {
  constructor(
    message: string,
    readonly holder: LockInfo,
  ) {
    super(message);
  }
}

export interface LockInfo {
  pid: number;
  /** what holds it: "mount /mnt/ws", "rollback", "gc" */
  role: string;
  /** the holder's start time in clock ticks (/proc/PID/stat), so a reused pid is not mistaken for it */
  start?: string;
  since: string;
}

/** /proc/PID/stat's fields after the command name (state first), or undefined when it is gone */
function statFields(pid: number): string[] | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // the command name (field 2) may hold spaces and parentheses: count from the last ')'
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/** the process's start time in clock ticks (field 22) */
function processStart(pid: number): string | undefined {
  return statFields(pid)?.[19];
}

function alive(info: LockInfo): boolean {
  if (!pidAlive(info.pid)) return false;
  const fields = statFields(info.pid);
  // killed but not yet reaped by its parent (a shell's background job after kill -9): holds nothing
  if (fields?.[0] === 'Z') return false;
  const start = fields?.[19];
  return info.start === undefined || start === undefined || start === info.start;
}

/**
 * One writer per journal: the mount daemon, or a CLI command working on an unmounted workspace.
 * A lock left by a process that died (kill -9) is taken over.
 */
export class JournalLock {
  private constructor(private readonly file: string) {}

  static acquire(file: string, role: string): JournalLock {
    const info: LockInfo = { pid: process.pid, role, since: new Date().toISOString() };
    const start = processStart(process.pid);
    if (start !== undefined) info.start = start;
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        fs.writeFileSync(file, JSON.stringify(info) + '\n', { flag: 'wx', mode: 0o600 });
        return new JournalLock(file);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      const holder = JournalLock.holder(file);
      if (holder && alive(holder)) {
        throw new JournalLockedError(inUse(holder), holder);
      }
      fs.rmSync(file, { force: true }); // stale: its process is gone
    }
    throw new Error(`could not take the journal lock ${file}`);
  }

  /** The live holder of the lock, or null. */
  static liveHolder(file: string): LockInfo | null {
    const h = JournalLock.holder(file);
    return h && alive(h) ? h : null;
  }

  private static holder(file: string): LockInfo | null {
    try {
      return JSON.parse(fs.readFileSync(file, 'utf8')) as LockInfo;
    } catch {
      return null;
    }
  }

  release(): void {
    const h = JournalLock.holder(this.file);
    if (h && h.pid === process.pid) fs.rmSync(this.file, { force: true });
  }
}
