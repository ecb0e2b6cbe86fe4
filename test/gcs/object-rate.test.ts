import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMount, startTestEmulator, type TestEmulator, type TestMount } from '../helpers/mount.js';
import { NEEDS_OWN_EMULATOR } from '../helpers/gcs-external.js';

/**
 * GCS allows about one write per second to one object name and may answer 429 past it
 * (cloud.google.com/storage/quotas). A small file's create (an empty object) and its close (the
 * bytes) write its name milliseconds apart, so on a bucket that holds to the documented rate
 * every close is refused once. The retry must wait out the second, not spend its attempts on a
 * 100 ms backoff (4 of 6 attempts per close, and an EIO when a chmod or a journal write adds to
 * the name's load). The emulator holds to the rate here (`--object-rate-limit 1,1`).
 */
if (NEEDS_OWN_EMULATOR) console.warn(`test/gcs/object-rate.test.ts: ${NEEDS_OWN_EMULATOR}`);
describe.skipIf(!!NEEDS_OWN_EMULATOR)('gcs: a bucket that limits each object to one write per second', () => {
  const bucket = 'ledgerfs-object-rate';
  let emu: TestEmulator;
  let m: TestMount;
  let tmp: string;
  beforeAll(async () => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ledgerfs-objrate-'));
    emu = await startTestEmulator([bucket], 0, ['--object-rate-limit', '1,1']);
    m = await startMount({ gcs: { emulator: emu, bucket }, args: ['--state', path.join(tmp, 'state'), '--metadata-ttl', '5'] });
  }, 120_000);
  afterAll(async () => {
    await m?.stop();
    await emu?.stop();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('create+write+close: each close is retried once, after the second, and lands', async () => {
    const log = async (since = 0) =>
      ((await (await fetch(`${emu.url}/_emulator/requests?since=${since}`)).json()) as { requests: Array<{ seq: number; method: string; path: string; query: string }> }).requests;
    const r0 = ((await (await fetch(`${emu.url}/_emulator/stats`)).json()) as { requests: number }).requests;
    fs.mkdirSync(path.join(m.mnt, 'd'));
    const N = 4;
    for (let i = 0; i < N; i++) fs.writeFileSync(path.join(m.mnt, 'd', `f${i}`), `file ${i}\n`);
    for (let i = 0; i < N; i++) expect(fs.readFileSync(path.join(m.mnt, 'd', `f${i}`), 'utf8')).toBe(`file ${i}\n`);
    const uploads = (await log(r0)).filter((r) => r.method === 'POST' && r.path.startsWith('/upload/') && decodeURIComponent(r.query).includes('name=d/f'));
    const perFile = new Map<string, number>();
    for (const u of uploads) {
      const name = new URLSearchParams(u.query.slice(1)).get('name') as string;
      perFile.set(name, (perFile.get(name) ?? 0) + 1);
    }
    console.log(`uploads per file under 1 write/s per object: ${JSON.stringify(Object.fromEntries(perFile))}`);
    expect(perFile.size).toBe(N);
    // the create, the close refused (429), the close again after the second: 3, not 5 or 6
    for (const [name, n] of perFile) expect(n, name).toBeLessThanOrEqual(3);
    expect(m.errors()).toEqual([]);
  }, 120_000);
});
