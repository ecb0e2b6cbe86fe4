import { callerProcess, type ErrnoCode, type Logger, type VfsError } from '../core/index.js';

export interface Denial {
  time: Date;
  /** the calling process, when the binding tells us */
  pid?: number;
  /** its command line at the time of the call */
  cmd?: string;
  op: string;
  path: string;
  /** which kind of rule refused it (denialRule), for metrics */
  rule: DenialRule;
  code: ErrnoCode;
  reason: string;
}

export type DenialRule = 'limit' | 'quota' | 'max-file-size' | 'read-only-root' | 'read-only-pattern' | 'hidden' | 'suffix' | 'cross-root' | 'view-structure' | 'other';

/**
 * The kind of rule behind a refusal, read off its errno and sentence (decide.ts and stage.ts
 * write them; refusals are rare, so reading the sentence costs nothing that matters).
 */
export function denialRule(err: VfsError): DenialRule {
  const r = err.reason;
  if (/ limit \((roots\[\d+\]\.)?limits\./.test(r)) return 'limit';
  if (err.code === 'EDQUOT') return 'quota';
  if (err.code === 'EFBIG') return 'max-file-size';
  if (err.code === 'EXDEV') return 'cross-root';
  if (/ is read-only; /.test(r)) return 'read-only-root';
  if (/read-only pattern|what is read-only/.test(r)) return 'read-only-pattern';
  if (/hidden by the policy|what the policy hides/.test(r)) return 'hidden';
  if (/only files ending in/.test(r)) return 'suffix';
  if (err.code === 'EROFS') return 'view-structure';
  return 'other';
}

/**
 * The latest refusals, newest last, for /.ledgerfs/denials; every refusal is also logged.
 * A fixed ring: a program looping on a forbidden write cannot grow the daemon's memory.
 */
export class DenialLog {
  private readonly ring: Denial[] = [];
  private next = 0;
  /** bumped on every record, so readers can tell that the text changed */
  version = 0;

  constructor(
    private readonly capacity: number,
    private readonly log?: Logger,
  ) {}

  /** told of every refusal (metrics count them by rule and root) */
  onRecord: ((d: Denial) => void) | undefined;

  record(op: string, path: string, err: VfsError, pid?: number): void {
    const d: Denial = { time: new Date(), op, path, rule: denialRule(err), code: err.code, reason: err.reason };
    const who = callerProcess(pid);
    const cmd = who?.cmd;
    if (who !== undefined) d.pid = who.pid;
    if (cmd !== undefined) d.cmd = cmd;
    if (this.ring.length < this.capacity) this.ring.push(d);
    else this.ring[this.next] = d;
    this.next = (this.next + 1) % this.capacity;
    this.version++;
    this.onRecord?.(d);
    this.log?.warn({ op, path, errno: err.code, reason: err.reason, ...(who !== undefined ? { callerPid: who.pid } : {}), ...(cmd !== undefined ? { callerCmd: cmd } : {}) }, 'denied by policy');
  }

  /** Oldest first. */
  list(): Denial[] {
    if (this.ring.length < this.capacity) return [...this.ring];
    return [...this.ring.slice(this.next), ...this.ring.slice(0, this.next)];
  }

  get size(): number {
    return this.ring.length;
  }
}
