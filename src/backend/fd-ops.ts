import { localAddon } from './local-addon.js';

/**
 * fallocate(2), copy_file_range(2), lseek(2) SEEK_DATA/SEEK_HOLE and FIEMAP on file descriptors, which
 * Node's fs lacks: native/ledgerfs_fdops.c, in the ledgerfs_local addon (local-addon.ts).
 * fallocate and seek are synchronous, like the local backend's other fs calls; a copy runs on libuv's thread pool,
 * and so does writeNewFiles (small new files, several in one trip, instead of Node's open, write, close each).
 * Failures throw (reject) Errors with the errno name as `code`.
 */
export interface FdOps {
  fallocate(fd: number, mode: number, offset: number, length: number): void;
  /** bytes copied; short only at the source's end. Both fds must stay open until it settles. */
  copyFileRange(fdIn: number, offIn: number, fdOut: number, offOut: number, length: number): Promise<number>;
  seek(fd: number, offset: number, whence: number): number;
  /** end of the last extent allocated at or past `from` (FIEMAP), `from` when none; EOPNOTSUPP where FIEMAP is not served */
  allocatedEnd(fd: number, from: number): number;
  /** create each of `paths` (O_EXCL, `mode`), write its buffer whole and close it, all in one thread-pool job; resolves with an errno per file (0: written; a failed write removes the file) */
  writeNewFiles(paths: string[], data: Buffer[], mode: number): Promise<number[]>;
  /** the CRC-32C (Castagnoli) of `data`, unsigned: GCS's upload checksum (SSE4.2 where the CPU has it) */
  crc32c(data: Buffer): number;
}

/** The helpers, or null when the addon was not built (the install said why). */
export function fdOps(): FdOps | null {
  return localAddon() as FdOps | null;
}
