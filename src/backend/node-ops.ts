import { UTIME_NOW, UTIME_OMIT } from '../core/index.js';
import { localAddon } from './local-addon.js';

/**
 * Extended attributes and nanosecond times on a node the local backend resolved beneath its
 * root, given as an O_PATH descriptor of the node itself (a symlink is not followed):
 * native/ledgerfs_xattr.c, in the ledgerfs_local addon. Node's fs has no xattr calls, and its
 * utimes takes seconds as a double (microseconds at best, and only near 1970).
 * Failures throw Errors with the errno name as `code`.
 */
export interface NodeOps {
  getxattr(fd: number, name: string): Buffer;
  /** the names, each followed by a NUL */
  listxattr(fd: number): Buffer;
  setxattr(fd: number, name: string, value: Buffer, flags: number): void;
  removexattr(fd: number, name: string): void;
  /** utimensat(2): seconds as signed 64-bit, nanoseconds 0..999999999, or UTIME_NOW / UTIME_OMIT */
  utimens(fd: number, atimeSec: bigint, atimeNsec: number, mtimeSec: bigint, mtimeNsec: number): void;
}


/** The helpers, or null when the addon was not built (or is an older build without them). */
export function nodeOps(): NodeOps | null {
  const a = localAddon() as Partial<NodeOps> | null;
  return a && typeof a.getxattr === 'function' && typeof a.utimens === 'function' ? (a as NodeOps) : null;
}

/** A time in nanoseconds since the epoch (any sign, any size) as utimensat's (seconds, nanoseconds). */
export function splitNs(ns: bigint): [bigint, number] {
  let sec = ns / 1_000_000_000n;
  let rem = ns % 1_000_000_000n;
  if (rem < 0n) {
    rem += 1_000_000_000n;
    sec -= 1n;
  }
  return [sec, Number(rem)];
}

const OMIT: readonly [bigint, number] = [0n, UTIME_OMIT];
const NOW: readonly [bigint, number] = [0n, UTIME_NOW];

/** One of a TimeSpec's times as utimensat's (seconds, nanoseconds): left alone, the kernel's now, or exact. */
export function utimePart(t: bigint | 'now' | undefined): readonly [bigint, number] {
  return t === undefined ? OMIT : t === 'now' ? NOW : splitNs(t);
}
