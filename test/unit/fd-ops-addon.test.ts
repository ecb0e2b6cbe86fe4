import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fdOps } from '../../src/backend/fd-ops.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

// The GCS backend's helpers in native/ledgerfs_fdops.c: writeNewFile (a new file created, written
// and closed in one thread-pool job; the content cache keeps each uploaded object with it) and
// crc32c (the checksum every upload carries for GCS to verify).
const ops = fdOps();
describe.skipIf(!ops)('fdOps.writeNewFile', () => {
  let tmp: string;
  beforeEach(() => {
    tmp = makeTemp('write-new-file');
  });
  afterEach(() => rmTemp(tmp));

  it('creates the file with its mode and every byte (past one write too)', async () => {
    const data = Buffer.alloc(3 * 1024 * 1024 + 7);
    for (let i = 0; i < data.length; i++) data[i] = (i * 131) & 0xff;
    const f = path.join(tmp, 'a');
    await ops!.writeNewFile(f, data, 0o640);
    expect(fs.readFileSync(f).equals(data)).toBe(true);
    expect(fs.statSync(f).mode & 0o777).toBe(0o640 & ~process.umask());
  });

  it('refuses a path that exists (EEXIST) and leaves it as it was; a missing directory is ENOENT', async () => {
    const f = path.join(tmp, 'b');
    fs.writeFileSync(f, 'old');
    await expect(ops!.writeNewFile(f, Buffer.from('new'), 0o600)).rejects.toMatchObject({ code: 'EEXIST' });
    expect(fs.readFileSync(f, 'utf8')).toBe('old');
    await expect(ops!.writeNewFile(path.join(tmp, 'no', 'c'), Buffer.from('x'), 0o600)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('an empty buffer makes an empty file; wrong arguments throw a TypeError', async () => {
    const f = path.join(tmp, 'e');
    await ops!.writeNewFile(f, Buffer.alloc(0), 0o600);
    expect(fs.statSync(f).size).toBe(0);
    expect(() => ops!.writeNewFile(f, 'text' as unknown as Buffer, 0o600)).toThrow(TypeError);
  });
});

describe.skipIf(!ops)('fdOps.crc32c', () => {
  it("is CRC-32C (the check value of '123456789', the empty input) and agrees with @google-cloud/storage's on any length and alignment", async () => {
    const { CRC32C } = await import('@google-cloud/storage');
    expect(ops!.crc32c(Buffer.from('123456789'))).toBe(0xe3069283);
    expect(ops!.crc32c(Buffer.alloc(0))).toBe(0);
    const big = randomBytes(70_000);
    for (const [start, end] of [[0, 1], [1, 8], [3, 17], [5, 4096], [7, 70_000], [0, 70_000]] as const) {
      const part = big.subarray(start, end);
      const c = new CRC32C();
      c.update(part);
      expect(Buffer.from(c.toString(), 'base64').readUInt32BE(0), `${start}-${end}`).toBe(ops!.crc32c(part));
    }
    expect(() => ops!.crc32c('text' as unknown as Buffer)).toThrow(TypeError);
  });
});
