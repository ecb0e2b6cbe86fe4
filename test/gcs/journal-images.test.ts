import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLI, sh, startMount, type TestMount } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { startGcsFixture, type GcsFixture } from './fixture.js';

/**
 * Before-images of GCS content: objects the mount holds no local bytes for are kept by a
 * server-side copy into the bucket's reserved area (Backend.keepCopy; rollback fetches them,
 * crc32c-checked); an overwrite of a 3 MiB and of a small one is rolled back to the bytes it had.
 */
describe('gcs: the journal keeps before-images of bucket content', () => {
  let g: GcsFixture;
  let m: TestMount;
  let home: string;
  const state = () => path.join(home, 'state');
  beforeEach(async () => {
    g = await startGcsFixture();
    home = makeTemp('gcs-journal');
    m = await startMount({ gcs: { emulator: g.emulator, bucket: g.bucket }, args: ['--state', state(), '--attr-timeout', '0.2', '--entry-timeout', '0.2', '--metadata-ttl', '0.2'] });
  });
  afterEach(async () => {
    await m?.stop();
    await g?.stop();
    rmTemp(home);
  });

  it('an overwrite of a 3 MiB object and of a small one are rolled back to the exact bytes', () => {
    const big = crypto.randomBytes(3 * 1024 * 1024 + 17);
    fs.writeFileSync(path.join(home, 'big.src'), big);
    sh(`cp ${home}/big.src big.bin && printf 'small original' > small.txt`, m.mnt);
    const ledgerfs = (...args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 60_000, env: { ...process.env, ...m.env } });
    const log = JSON.parse(ledgerfs('log', '--state', state(), '--json').stdout) as { seq: number }[];
    const mark = Math.max(...log.map((e) => e.seq));
    sh('dd if=/dev/zero of=big.bin bs=64k seek=10 count=4 conv=notrunc status=none && printf XX | dd of=small.txt conv=notrunc status=none', m.mnt);
    expect(sh('sha256sum < big.bin', m.mnt)).not.toContain(crypto.createHash('sha256').update(big).digest('hex'));
    const r = ledgerfs('rollback', '--state', state(), '--to', String(mark));
    expect(r.status, r.stderr + r.stdout).toBe(0);
    expect(sh('sha256sum < big.bin', m.mnt).split(' ')[0]).toBe(crypto.createHash('sha256').update(big).digest('hex'));
    expect(sh('cat small.txt', m.mnt)).toBe('small original');
    // and the bucket itself, as another host reads it
    expect(fs.readFileSync(path.join(m.src, 'small.txt'), 'utf8')).toBe('small original');
    expect(ledgerfs('verify', '--state', state()).stdout).toMatch(/^clean$/m);
  });
});
