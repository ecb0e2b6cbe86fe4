import { createRequire } from 'node:module';
import path from 'node:path';

/**
 * fallocate(2), copy_file_range(2) and lseek(2) SEEK_DATA/SEEK_HOLE on file descriptors, which
 * Node's fs lacks: native/ledgerfs_fdops.c in the ledgerfs_local addon, built with the libfuse3 addons by
 * scripts/build-native.mjs but linked to no libfuse, so a backend may use it. fallocate and seek
 * are synchronous, like the local backend's other fs calls; a copy runs on libuv's thread pool.
 * Failures throw (reject) Errors with the errno name as `code`.
 */
export interface FdOps {
  fallocate(fd: number, mode: number, offset: number, length: number): void;
  /** bytes copied; short only at the source's end. Both fds must stay open until it settles. */
  copyFileRange(fdIn: number, offIn: number, fdOut: number, offOut: number, length: number): Promise<number>;
  seek(fd: number, offset: number, whence: number): number;
}

const ADDON = path.resolve(import.meta.dirname, '../../native/build/Release/ledgerfs_local.node');

let loaded: FdOps | null | undefined;
/** The helpers, or null when the addon was not built (the install said why). */
export function fdOps(): FdOps | null {
  if (loaded === undefined) {
    try {
      loaded = createRequire(import.meta.url)(ADDON) as FdOps;
    } catch {
      loaded = null;
    }
  }
  return loaded;
}

// linux/falloc.h and unistd.h
export const FALLOC_FL_KEEP_SIZE = 0x01;
export const FALLOC_FL_PUNCH_HOLE = 0x02;
export const SEEK_DATA = 3;
export const SEEK_HOLE = 4;
