import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMount } from '../helpers/mount.js';
import { NEEDS_OWN_EMULATOR } from '../helpers/gcs-external.js';
import { startGcsFixture, type GcsFixture } from './fixture.js';

/**
 * A server that answers 200 to a `dir/` placeholder upload but does not keep it (fake-gcs-server's
 * default filesystem backend) loses empty directories and directory attributes without any error:
 * a mount on a custom endpoint reads its probe placeholder back and says so in its log. Here the
 * project emulator plays that server through a fault rule: every read of the probe is a 404.
 */
const WARNING = 'does not keep objects whose names end in';
if (NEEDS_OWN_EMULATOR) console.warn(`test/gcs/server-checks.test.ts: ${NEEDS_OWN_EMULATOR}`);
describe.skipIf(!!NEEDS_OWN_EMULATOR)('gcs: a server that drops directory placeholders is named at mount', () => {
  let g: GcsFixture;
  let tmp: string;
  beforeAll(async () => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ledgerfs-srvcheck-'));
    g = await startGcsFixture('ledgerfs-server-checks');
  }, 60_000);
  afterAll(async () => {
    await g?.stop();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  const probes = async () => (await g.storage.bucket(g.bucket).getFiles({ prefix: '.ledgerfs/probe-' }))[0].map((f) => f.name);

  it('a placeholder that cannot be read back: the log warns, naming the fix', async () => {
    await g.fault({ status: 404, count: -1, method: 'GET', pathPrefix: `/storage/v1/b/${g.bucket}/o/.ledgerfs/probe-` });
    const m = await startMount({ gcs: { emulator: g.emulator, bucket: g.bucket }, args: ['--state', path.join(tmp, 'a')] });
    try {
      const warn = m.logs().split('\n').find((l) => l.includes(WARNING));
      expect(warn, m.logs()).toBeDefined();
      expect(warn).toContain('-backend memory');
      expect(JSON.parse(warn as string)).toMatchObject({ level: 40, endpoint: g.emulator.url });
      // the mount works all the same
      fs.mkdirSync(path.join(m.mnt, 'd'));
      expect(fs.statSync(path.join(m.mnt, 'd')).isDirectory()).toBe(true);
    } finally {
      await m.stop();
      await g.clearFaults();
    }
  }, 120_000);

  it('a server that keeps placeholders (GCS, the project emulator): no warning, no probe left behind', async () => {
    // the probes of the faulted mounts above stay (they could not be read back to be removed)
    const before = await probes();
    const m = await startMount({ gcs: { emulator: g.emulator, bucket: g.bucket }, args: ['--state', path.join(tmp, 'b')] });
    try {
      expect(m.logs()).not.toContain(WARNING);
      // this mount's probes (its own and its test mirror's) went
      expect(await probes()).toEqual(before);
    } finally {
      await m.stop();
    }
  }, 120_000);
});
