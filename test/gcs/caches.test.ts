import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sh, startMount, type TestMount } from '../helpers/mount.js';
import { NEEDS_OWN_EMULATOR } from '../helpers/gcs-external.js';
import { startGcsFixture, type GcsFixture } from './fixture.js';

/**
 * The cache layers around the GCS backend, measured on a real mount against the emulator by
 * its request counter: `ls -l` of a big directory is a listing (pages of 1,000), not a lookup
 * per entry; a warm stat of a tree asks nothing at all.
 */
if (NEEDS_OWN_EMULATOR) console.warn(`test/gcs/caches.test.ts (the request counts): ${NEEDS_OWN_EMULATOR}`);
describe('gcs: metadata caches keep ls -l and stat off the network per entry', () => {
  let g: GcsFixture;
  let m: TestMount;
  beforeAll(async () => {
    g = await startGcsFixture();
    const flat = Array.from({ length: 10_000 }, (_, i) => `big/f${String(i).padStart(5, '0')}`);
    const tree = Array.from({ length: 3_000 }, (_, i) => `tree/d${i % 30}/s${i % 7}/f${i}`);
    await g.seed([...flat, ...tree], 'x', 48);
    m = await startMount({ gcs: { emulator: g.emulator, bucket: g.bucket }, args: ['--no-journal', '--metadata-ttl', '60'] });
  }, 300_000);
  afterAll(async () => {
    await m?.stop();
    await g?.stop();
  });

  it.skipIf(!!NEEDS_OWN_EMULATOR)('ls -l of 10,000 objects: about one request per 1,000 entries cold, none warm', async () => {
    const r0 = await g.requests();
    expect(sh('ls -l big | wc -l', m.mnt).trim()).toBe('10001'); // "total" + 10,000 entries
    const cold = (await g.requests()) - r0;
    expect(cold).toBeLessThan(40);
    const r1 = await g.requests();
    expect(sh('ls -l big | wc -l', m.mnt).trim()).toBe('10001');
    const warm = (await g.requests()) - r1;
    console.log(`ls -l of 10,000 objects: ${cold} requests cold, ${warm} warm`);
    expect(warm).toBeLessThanOrEqual(2);
  }, 120_000);

  it.skipIf(!!NEEDS_OWN_EMULATOR)('stat of every file of a 3,000-file tree: listings cold, nothing warm', async () => {
    const r0 = await g.requests();
    expect(sh('find tree -type f -exec stat -c %s {} + | wc -l', m.mnt).trim()).toBe('3000');
    const cold = (await g.requests()) - r0;
    // not one lookup per file, nor one listing per directory (1 + 30 + 210): pages of the
    // subtree's objects, 1,000 at a time, fill the listings of the directories they hold
    expect(cold).toBeLessThan(30);
    const r1 = await g.requests();
    expect(sh('find tree -type f -exec stat -c %s {} + | wc -l', m.mnt).trim()).toBe('3000');
    const warm = (await g.requests()) - r1;
    console.log(`stat of a 3,000-file tree: ${cold} requests cold, ${warm} warm`);
    expect(warm).toBeLessThanOrEqual(2);
  }, 120_000);

  it('the listings a tree walk filled are the tree: every directory and file, nothing more', async () => {
    const m2 = await startMount({ gcs: { emulator: g.emulator, bucket: g.bucket }, args: ['--no-journal', '--metadata-ttl', '60'] });
    try {
      const files = sh('find tree -type f | sort', m2.mnt).trim().split('\n');
      const want = Array.from({ length: 3_000 }, (_, i) => `tree/d${i % 30}/s${i % 7}/f${i}`).sort();
      expect(files).toEqual(want);
      expect(sh('find tree -type d | wc -l', m2.mnt).trim()).toBe('241');
      expect(sh('ls tree/d17/s6 | wc -l && ls tree | wc -l', m2.mnt)).toBe(`${want.filter((f) => f.startsWith('tree/d17/s6/')).length}\n30\n`);
    } finally {
      await m2.stop();
    }
  }, 120_000);
});
