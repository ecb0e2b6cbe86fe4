import fs from 'node:fs';

/**
 * `size` bytes of an open file from `offset`, read through its descriptor (a close's copy needs
 * no open, fstat and close of the path); fewer only where the file ends first.
 */
export function readRange(fd: number, size: number, offset: number): Buffer {
  const buf = Buffer.allocUnsafe(size);
  let n = 0;
  while (n < size) {
    const got = fs.readSync(fd, buf, n, size - n, offset + n);
    if (got === 0) break;
    n += got;
  }
  return n === size ? buf : buf.subarray(0, n);
}
