import fs from 'node:fs';
import { DEFAULTS } from '../config/defaults.js';

/*
 * Who a pid is, for the journal and /.ledgerfs/denials: its command line as /proc has it at the
 * time of the call. Read lazily, only where a record or a refusal is written, and only when the
 * binding told us the pid (fuse-native does not: then this costs nothing). A short-lived cache
 * keeps a program that creates a thousand files from reading /proc a thousand times; the TTL is
 * short because pids are reused.
 */

interface Entry {
  cmd: string | undefined;
  at: number;
}

const cache = new Map<number, Entry>();

/** Shell-like quoting, so the line can be read (and mostly pasted) by a person. */
function quote(arg: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}

function cut(s: string): string {
  const max = DEFAULTS.callers.commandMaxChars;
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

function readCommand(pid: number): string | undefined {
  try {
    const raw = fs.readFileSync(`/proc/${pid}/cmdline`);
    const args = raw.toString('utf8').split('\0');
    if (args.at(-1) === '') args.pop();
    if (args.length > 0) return cut(args.map(quote).join(' '));
    // kernel threads and zombies have no command line; their name is still there
    return `[${fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim()}]`;
  } catch {
    return undefined; // gone already, or another pid namespace's
  }
}

/** The command line of `pid` (cached for a moment), or undefined if unknown. */
export function commandOf(pid: number | undefined): string | undefined {
  if (pid === undefined || pid <= 0) return undefined;
  const now = Date.now();
  const hit = cache.get(pid);
  if (hit !== undefined && now - hit.at < DEFAULTS.callers.commandTtlMs) return hit.cmd;
  const cmd = readCommand(pid);
  if (cache.size >= DEFAULTS.callers.cacheSize) cache.clear();
  cache.set(pid, { cmd, at: now });
  return cmd;
}

/** Forget everything (tests). */
export function clearCommandCache(): void {
  cache.clear();
}
