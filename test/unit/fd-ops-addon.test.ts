import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fdOps } from '../../src/backend/fd-ops.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

// The GCS backend's helpers in native/ledgerfs_fdops.c: writeNewFiles (new files created, written
// and closed, several in one thread-pool job; the content cache keeps uploaded objects with it) and
// crc32c (the checksum every upload carries for GCS to verify).
const ops = fdOps();
describe.skipIf(!ops)('fdOps.writeNewFiles', () => {
  let tmp: string;
  beforeEach(() => {
    tmp = makeTemp('write-new-files');
  });
  afterEach(() => rmTemp(tmp));

  it('creates each file with its mode and every byte (past one write too), an empty one too', async () => {
    const big = Buffer.alloc(3 * 1024 * 1024 + 7);
    for (let i = 0; i < big.length; i++) big[i] = (i * 131) & 0xff;
    const files = ['a', 'b', 'e'].map((n) => path.join(tmp, n));
    expect(await ops!.writeNewFiles(files, [big, Buffer.from('small'), Buffer.alloc(0)], 0o640)).toEqual([0, 0, 0]);
    expect(fs.readFileSync(files[0]!).equals(big)).toBe(true);
    expect(fs.readFileSync(files[1]!, 'utf8')).toBe('small');
    expect(fs.statSync(files[2]!).size).toBe(0);
    expect(fs.statSync(files[0]!).mode & 0o777).toBe(0o640 & ~process.umask());
  });

  it('answers an errno per file: one that exists (EEXIST) is left as it was, a missing directory is ENOENT, the others are written', async () => {
    const old = path.join(tmp, 'old');
    fs.writeFileSync(old, 'old');
    const errs = await ops!.writeNewFiles([old, path.join(tmp, 'no', 'c'), path.join(tmp, 'new')], [Buffer.from('x'), Buffer.from('y'), Buffer.from('z')], 0o600);
    expect(errs).toEqual([os.constants.errno.EEXIST, os.constants.errno.ENOENT, 0]);
    expect(fs.readFileSync(old, 'utf8')).toBe('old');
    expect(fs.readFileSync(path.join(tmp, 'new'), 'utf8')).toBe('z');
  });

  it('wrong arguments throw a TypeError', () => {
    expect(() => ops!.writeNewFiles([path.join(tmp, 'f')], ['text' as unknown as Buffer], 0o600)).toThrow(TypeError);
    expect(() => ops!.writeNewFiles([path.join(tmp, 'f')], [], 0o600)).toThrow(TypeError);
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
