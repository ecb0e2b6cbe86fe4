import fs from 'node:fs';
import { DEFAULTS } from '../config/index.js';

/*
 * Who called, for the journal and /.ledgerfs/denials: the process and its command line as /proc
 * has them at the time of the call. Read lazily, only where a record or a refusal is written,
 * and only when the binding told us the caller (fuse-native does not: then this costs nothing).
 * A short-lived cache keeps a program that creates a thousand files from reading /proc a
 * thousand times; the TTL is short because ids are reused.
 *
 * FUSE names the calling *thread* (fuse_context.pid is a thread id); a multi-threaded program
 * would show up under many ids, none of which `ps` lists. The thread's process (its Tgid) is
 * what people look for, so that is what is reported.
 */

export interface CallerProcess {
  /** the process id (the thread group of the calling thread) */
  pid: number;
  /** its command line, shell-quoted and cut to DEFAULTS.callers.commandMaxChars */
  cmd?: string;
}

interface Entry {
  who: CallerProcess;
  at: number;
}

const cache = new Map<number, Entry>();

/**
 * Shell-like quoting, so the line can be read (and mostly pasted) by a person. Always one line:
 * it ends up in one-line-per-entry places (/.ledgerfs/denials, log output), and `python3 -c`
 * scripts carry newlines; those arguments take bash's $'...' form with escapes.
 */
export function shellQuote(arg: string): string {
  if (/^[A-Za-z0-9_@%+=:,./-]+$/.test(arg)) return arg;
  if (!/[\x00-\x1f\x7f]/.test(arg)) return `'${arg.replace(/'/g, `'\\''`)}'`;
  const esc = arg.replace(/[\\'\x00-\x1f\x7f]/g, (c) => {
    if (c === '\n') return '\\n';
    if (c === '\t') return '\\t';
    if (c === '\\' || c === "'") return `\\${c}`;
    return `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`;
  });
  return `$'${esc}'`;
}

function cut(s: string): string {
  const max = DEFAULTS.callers.commandMaxChars;
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

function readProcess(tid: number): CallerProcess {
  try {
    const status = fs.readFileSync(`/proc/${tid}/status`, 'utf8');
    const tgid = Number(/^Tgid:\s*(\d+)/m.exec(status)?.[1] ?? tid);
    const args = fs.readFileSync(`/proc/${tid}/cmdline`).toString('utf8').split('\0');
    if (args.at(-1) === '') args.pop();
    // kernel threads and zombies have no command line; their name is still there
    const cmd = args.length > 0 ? cut(args.map(shellQuote).join(' ')) : `[${/^Name:\s*(.*)$/m.exec(status)?.[1] ?? '?'}]`;
    return { pid: tgid, cmd };
  } catch {
    return { pid: tid }; // gone already, or another pid namespace's
  }
}

/** The process behind a caller's pid (cached for a moment); undefined if no pid is known. */
export function callerProcess(pid: number | undefined): CallerProcess | undefined {
  if (pid === undefined || pid <= 0) return undefined;
  const now = Date.now();
  const hit = cache.get(pid);
  if (hit !== undefined && now - hit.at < DEFAULTS.callers.commandTtlMs) return hit.who;
  const who = readProcess(pid);
  if (cache.size >= DEFAULTS.callers.cacheSize) cache.clear();
  cache.set(pid, { who, at: now });
  return who;
}

/** Forget everything (tests). */
export function clearCallerCache(): void {
  cache.clear();
}

/** Whether process `pid` exists (EPERM: it does, owned by someone else). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
