import fs from 'node:fs';
import { localAddon } from './local-addon.js';

/**
 * The process's open-file limit (RLIMIT_NOFILE). The daemon raises its soft limit to the hard
 * one at start (`raiseFdLimit`), and the local store sizes its pool of backing descriptors below
 * what `fdLimit` then reads (src/backend/fd-pool.ts). Node has no setrlimit: native/ledgerfs_limits.c
 * in the ledgerfs_local addon. Node itself raises the soft limit at startup too, but only as an
 * embedder's default (and not in every build or embedding), so the daemon does not count on it.
 */
export interface FdLimit {
  /** the soft limit now; Infinity when unlimited */
  soft: number;
  hard: number;
  /** the soft limit before raiseFdLimit raised it (absent when it did not change) */
  raisedFrom?: number;
}

interface Addon {
  noFileLimit(raise: boolean): [number, number];
}

const inf = (n: number) => (n < 0 ? Infinity : n);

/** Without the addon: what the kernel says in /proc/self/limits (no raising possible). */
function fromProc(): FdLimit | null {
  try {
    const line = fs.readFileSync('/proc/self/limits', 'utf8').split('\n').find((l) => l.startsWith('Max open files'));
    const m = line?.match(/^Max open files\s+(\S+)\s+(\S+)/);
    if (!m) return null;
    const n = (s: string) => (s === 'unlimited' ? Infinity : Number(s));
    return { soft: n(m[1] as string), hard: n(m[2] as string) };
  } catch {
    return null;
  }
}

/** The current limit, or null when it cannot be read. */
export function fdLimit(): FdLimit | null {
  const addon = localAddon() as Partial<Addon> | null;
  if (typeof addon?.noFileLimit !== 'function') return fromProc();
  try {
    const [soft, hard] = addon.noFileLimit(false);
    return { soft: inf(soft), hard: inf(hard) };
  } catch {
    return fromProc();
  }
}

/**
 * Raise the soft limit to the hard limit. Returns the limit as it then is, or the reason it
 * could not be raised (the addon is not built, or setrlimit refused).
 */
export function raiseFdLimit(): FdLimit | { error: string; limit: FdLimit | null } {
  const addon = localAddon() as Partial<Addon> | null;
  const before = fdLimit();
  if (typeof addon?.noFileLimit !== 'function') {
    return { error: 'native/ledgerfs_local is not built (node scripts/build-native.mjs)', limit: before };
  }
  try {
    const [soft, hard] = addon.noFileLimit(true);
    const now: FdLimit = { soft: inf(soft), hard: inf(hard) };
    if (before && before.soft !== now.soft) now.raisedFrom = before.soft;
    return now;
  } catch (err) {
    return { error: (err as Error).message, limit: before };
  }
}
