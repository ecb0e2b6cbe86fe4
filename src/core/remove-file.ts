import fs from 'node:fs';

/**
 * Remove one file in the background (a staging or cache file nobody waits for): one unlink on
 * libuv's thread pool. Not fs.rm(file, {force: true}), which lstats the path twice before it
 * unlinks it (its options check, then rimraf's own): three trips through the pool per file, and
 * on a busy host each trip's wake-ups of a pool thread and of the event loop cost more than the
 * unlink. A file already gone is no error; any other failure leaves the file (the directory it
 * is in is removed or swept later).
 */
export function removeFileSoon(file: string): void {
  fs.unlink(file, () => undefined);
}
