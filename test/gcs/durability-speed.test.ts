import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { py, sh, startMount, type TestMount } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { NEEDS_OWN_EMULATOR } from '../helpers/gcs-external.js';
import { startGcsFixture, type GcsFixture } from './fixture.js';

/**
 * --durability journal on the path a program waits for (issue 19's bar: tar -x within 2x of the
 * local backend): what tar and git do (create, write, close; fix up directory times at the end)
 * costs no request to the bucket before the call returns, and never waits for the uploads.
 * Uploads are slowed by the emulator's fault rules so any wait for them shows.
 */
if (NEEDS_OWN_EMULATOR) console.warn(`test/gcs/durability-speed.test.ts (injects upload delays): ${NEEDS_OWN_EMULATOR}`);
describe.skipIf(!!NEEDS_OWN_EMULATOR)('gcs: --durability journal, the request path', () => {
  let g: GcsFixture;
  let home: string;
  const mounts: TestMount[] = [];
  const state = () => path.join(home, 'state');
  const mount = async () => {
    const m = await startMount({ gcs: { emulator: g.emulator, bucket: g.bucket }, args: ['--durability', 'journal', '--state', state()] });
    mounts.push(m);
    return m;
  };
  beforeEach(async () => {
    g = await startGcsFixture('ledgerfs-durability-speed');
    home = makeTemp('gcs-durability-speed');
  });
  afterEach(async () => {
    for (const m of mounts.splice(0)) await m.stop().catch(() => undefined);
    await g?.stop();
    rmTemp(home);
  });
  const slowUploads = (delayMs: number) => g.fault({ status: 0, delayMs, count: -1, method: 'POST', pathPrefix: '/upload/' });
  const ms = (script: string, cwd: string) => Number(py(`import os, time\nt = time.time()\n${script}\nprint(round((time.time() - t) * 1000))`, cwd).trim());

  it("a directory's chmod and utimens do not wait for the uploads under it", async () => {
    const m = await mount();
    sh('mkdir d', m.mnt);
    await slowUploads(3000);
    py("open('d/f', 'w').write('queued')", m.mnt);
    // tar's last step: the directories' modes and times, after their files were closed
    expect(ms("os.chmod('d', 0o750); os.utime('d', (1000000000, 1000000000))", m.mnt)).toBeLessThan(1500);
    expect(sh('stat -c %a:%Y d; cat d/f', m.mnt)).toBe('750:1000000000\nqueued');
  });
});
