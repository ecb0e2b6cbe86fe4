import fs from 'node:fs';

/*
 * Replacing a file so that a crash leaves either the old content or the new, never a mix or an
 * empty file: write a temporary name beside it, fsync it, rename it over the file. (The rename
 * itself is durable once the directory is fsynced; callers that need that do it.)
 */

/** Replace `file` with `data`, whole or not at all (`tmp`: the temporary name beside it). */
export function replaceFileSync(file: string, data: string | Uint8Array, tmp = `${file}.tmp`): void {
  const fd = fs.openSync(tmp, 'w', 0o600);
  try {
    fs.writeFileSync(fd, data);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, file);
}

/** replaceFileSync on libuv's thread pool. */
export async function replaceFile(file: string, data: string | Uint8Array, tmp = `${file}.tmp`): Promise<void> {
  const h = await fs.promises.open(tmp, 'w', 0o600);
  try {
    await h.writeFile(data);
    await h.sync();
  } finally {
    await h.close();
  }
  await fs.promises.rename(tmp, file);
}

/** fsync a file or directory by name, on libuv's thread pool (what is in it, or its entries, reach the disk). */
export async function fsyncPath(file: string): Promise<void> {
  const h = await fs.promises.open(file, 'r');
  try {
    await h.sync();
  } finally {
    await h.close();
  }
}
