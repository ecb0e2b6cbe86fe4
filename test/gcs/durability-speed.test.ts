import { spawn } from 'node:child_process';
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
    const m = await startMount({ gcs: { emulator: g.emulator, bucket: g.bucket }, args: ['--durability', 'journal', '--state', state(), '--metadata-ttl', '5'] }); // the default TTL: the cache knows what the mount made
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

  /** The object's bytes in the bucket (undefined: absent). */
  const inBucket = async (name: string): Promise<string | undefined> => {
    const f = g.storage.bucket(g.bucket).file(name);
    const [exists] = await f.exists();
    return exists ? (await f.download())[0].toString() : undefined;
  };
  const eventually = async (what: string, cond: () => Promise<boolean>, ms = 60_000) => {
    const end = Date.now() + ms;
    while (!(await cond())) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };

  it('a file created, written and closed in a directory the mount made: no request before close returns, shown until it lands, one upload', async () => {
    const m = await mount();
    sh('mkdir d', m.mnt);
    await slowUploads(3000); // the create at open was one of these (an empty object first)
    expect(ms("fd = os.open('d/new', os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)\nos.write(fd, b'fresh')\nos.close(fd)", m.mnt)).toBeLessThan(1500);
    expect(sh('ls d; stat -c %s:%a d/new; cat d/new', m.mnt)).toBe('new\n5:640\nfresh');
    expect(await inBucket('d/new')).toBeUndefined(); // not even an empty object yet
    await eventually('d/new uploaded', async () => (await inBucket('d/new')) === 'fresh');
    const uploads = (await g.requestLog(0)).filter((r) => r.method === 'POST' && /d%2Fnew|d\/new/.test(r.path + r.query));
    expect(uploads.length).toBe(1);
  });

  it('a daemon killed while a new file is open keeps its create: the next mount uploads it', { timeout: 180_000 }, async () => {
    const a = await mount();
    sh('mkdir d', a.mnt);
    await slowUploads(60_000); // nothing reaches the bucket before the kill
    const holder = spawn('python3', ['-c', "import os, sys, time\nfd = os.open('d/held', os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)\nprint('open', flush=True)\ntime.sleep(30)"], { cwd: a.mnt, stdio: ['ignore', 'pipe', 'ignore'] });
    await new Promise<void>((r) => holder.stdout.once('data', () => r()));
    process.kill(a.daemon.pid as number, 'SIGKILL');
    await new Promise<void>((r) => (a.daemon.exitCode !== null || a.daemon.signalCode !== null ? r() : a.daemon.once('exit', () => r())));
    holder.kill('SIGKILL');
    await a.stop().catch(() => undefined);
    await g.clearFaults();
    const b = await mount();
    expect(sh('stat -c %s:%a d/held', b.mnt)).toBe('0:600\n');
    await eventually('d/held uploaded', async () => (await inBucket('d/held')) === '');
  });
});
