import { createRequire } from 'node:module';
import path from 'node:path';

/*
 * native/ledgerfs_local.c: the local store's system calls that Node's fs lacks (openat2 beneath
 * its root: beneath.ts; fallocate, copy_file_range, SEEK_DATA/SEEK_HOLE: fd-ops.ts). Built by
 * scripts/build-native.mjs with the libfuse3 addons but linked to no libfuse, so any binding's
 * backend may use it.
 */
const ADDON = path.resolve(import.meta.dirname, '../../native/build/Release/ledgerfs_local.node');

let loaded: object | null | undefined;

/** The addon's exports, or null when it was not built (the install said why). */
export function localAddon(): object | null {
  if (loaded === undefined) {
    try {
      loaded = createRequire(import.meta.url)(ADDON) as object;
    } catch {
      loaded = null;
    }
  }
  return loaded;
}
