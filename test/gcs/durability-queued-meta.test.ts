import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLI, startMount, type TestMount } from '../helpers/mount.js';
import { spooledVersions } from '../helpers/spool.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { NEEDS_OWN_EMULATOR } from '../helpers/gcs-external.js';
import { startGcsFixture, type GcsFixture } from './fixture.js';

/**
 * --durability journal: chmod, utimens and rename of a file whose closed version waits in the
 * upload queue go into the queue (a record in the spool's log) and return without waiting for
 * the upload (git writes each object so: create, write, close, rename into place). The
 * uploads are held by the emulator (every slot of the queue busy with slow uploads of other
 * files), the program times each call, then the daemon is SIGKILLed after a given step; the
 * next mount replays the spool, and the bucket must end exactly as the program left it, with a
 * strict rollback of the session giving back what was there before.
 */
const PROGRAM = String.raw`
import os, sys, time
root, upto = sys.argv[1], int(sys.argv[2])
T = 1_500_000_000_000_000_000
def put(name, data):
    fd = os.open(os.path.join(root, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, data)
    os.close(fd)
# 20 files whose uploads the emulator holds: every upload slot is busy after 0.3 s
for i in range(20):
    put(f'fill/f{i}', b'filler %d\n' % i)
time.sleep(1.5)
took = {}
def step(n, name, fn):
    if n > upto:
        return
    t = time.time()
    fn()
    took[name] = round((time.time() - t) * 1000)
def closed():
    put('a.tmp', b'the bytes of a\n' * 20)
    put('b.tmp', b'the bytes of b\n' * 30)
step(1, 'close', closed)
def attrs():
    os.chmod(os.path.join(root, 'a.tmp'), 0o444)
    os.utime(os.path.join(root, 'a.tmp'), ns=(T, T))
step(2, 'chmod+utime', attrs)
def rename_new():
    assert not os.access(os.path.join(root, 'objects/a'), os.F_OK)  # git looks first
    os.rename(os.path.join(root, 'a.tmp'), os.path.join(root, 'objects/a'))
step(3, 'rename', rename_new)
step(4, 'rename over', lambda: os.rename(os.path.join(root, 'b.tmp'), os.path.join(root, 'dst.txt')))
step(5, 'chmod after rename', lambda: os.chmod(os.path.join(root, 'dst.txt'), 0o600))
print('done', took, flush=True)
sys.stdin.readline()
`;

/** What the bucket and the view hold once the queue is replayed, after the program ran steps 1..upto. */
function expected(upto: number): { files: Record<string, string>; attrs: Record<string, string> } {
  const files: Record<string, string> = { 'dst.txt': 'the old dst\n' };
  for (let i = 0; i < 20; i++) files[`fill/f${i}`] = `filler ${i}\n`;
  const a = 'the bytes of a\n'.repeat(20);
  const b = 'the bytes of b\n'.repeat(30);
  const attrs: Record<string, string> = { 'dst.txt': '644' };
  if (upto >= 1) Object.assign(files, { 'a.tmp': a, 'b.tmp': b });
  if (upto >= 1) attrs['a.tmp'] = '644';
  if (upto >= 2) attrs['a.tmp'] = '444 1500000000';
  if (upto >= 3) {
    delete files['a.tmp'];
    delete attrs['a.tmp'];
    files['objects/a'] = a;
    attrs['objects/a'] = '444 1500000000';
  }
  if (upto >= 4) {
    delete files['b.tmp'];
    files['dst.txt'] = b;
  }
  if (upto >= 5) attrs['dst.txt'] = '600';
  return { files, attrs };
}

if (NEEDS_OWN_EMULATOR) console.warn(`test/gcs/durability-queued-meta.test.ts (holds uploads): ${NEEDS_OWN_EMULATOR}`);
describe.skipIf(!!NEEDS_OWN_EMULATOR)('gcs --durability journal: chmod, utimens and rename of a queued file', () => {
  let g: GcsFixture;
  let home: string;
  let program: ChildProcess | null = null;
  const mounts: TestMount[] = [];
  const state = () => path.join(home, 'state');
  const mount = async (session: string) => {
    const m = await startMount({
      gcs: { emulator: g.emulator, bucket: g.bucket },
      // a metadata cache as by default: it tells the store a rename's destination is known absent
      args: ['--durability', 'journal', '--state', state(), '--session', session, '--attr-timeout', '0', '--entry-timeout', '0', '--metadata-ttl', '5'],
    });
    mounts.push(m);
    return m;
  };
  const ledgerfs = (...args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 300_000, env: { ...process.env, LEDGERFS_GCS_ENDPOINT: g.emulator.url } });
  const bucketFiles = () => g.objects({ placeholders: false });

  beforeEach(async () => {
    g = await startGcsFixture('ledgerfs-queued-meta');
    home = makeTemp('gcs-queued-meta');
  });
  afterEach(async () => {
    if (program && program.exitCode === null) program.kill('SIGKILL');
    for (const m of mounts.splice(0)) await m.stop().catch(() => undefined);
    await g?.stop();
    if (home) rmTemp(home);
  });

  // killed after: the closes; the chmod and utime; the rename to a new name; the rename over a
  // file; the chmod of the renamed file
  it.each([1, 2, 3, 4, 5])('killed after step %i: each call returned while the uploads were held; the next mount replays the spool exactly; a strict rollback restores the state before', async (upto) => {
    const first = await mount('before');
    fs.mkdirSync(path.join(first.mnt, 'fill'));
    fs.mkdirSync(path.join(first.mnt, 'objects'));
    const fd = fs.openSync(path.join(first.mnt, 'dst.txt'), 'w');
    fs.writeSync(fd, 'the old dst\n');
    fs.fsyncSync(fd); // in the bucket
    fs.closeSync(fd);
    await first.stop();
    const before = await bucketFiles();
    expect(before).toEqual({ 'dst.txt': 'the old dst\n' });

    const m = await mount('killed');
    // every upload held 15 s, then refused (no effect): the queue's slots stay busy, nothing lands
    await g.fault({ status: 503, delayMs: 15_000, count: -1, method: 'POST', pathPrefix: '/upload/' });
    const p = spawn('python3', ['-c', PROGRAM, m.mnt, String(upto)], { stdio: ['pipe', 'pipe', 'inherit'] });
    program = p;
    const out = await new Promise<string>((resolve, reject) => {
      let buf = '';
      const timer = setTimeout(() => reject(new Error(`the program did not finish its steps within 120 s: ${buf}`)), 120_000);
      p.stdout?.on('data', (d: Buffer) => {
        buf += d.toString();
        if (buf.includes('\n')) {
          clearTimeout(timer);
          resolve(buf);
        }
      });
    });
    const took = JSON.parse(out.replace(/^done /, '').trim().replace(/'/g, '"')) as Record<string, number>;
    // none waited for an upload (held 15 s, behind 16 others held as long)
    for (const [what, ms] of Object.entries(took)) expect(ms, `${what} took ${ms} ms`).toBeLessThan(5000);
    // the journal's records reach its file within its flush delay
    await new Promise((r) => setTimeout(r, 2500));
    process.kill(m.daemon.pid as number, 'SIGKILL');
    await m.stop().catch(() => undefined);
    p.kill('SIGKILL');
    await g.clearFaults();
    expect(spooledVersions(path.join(state(), 'upload-spool'))).toBeGreaterThan(0);

    const want = expected(upto);
    const after = await mount('after');
    // nothing the program was answered is lost: the journal and the spool agree
    expect(after.logs()).not.toMatch(/never got what the journal recorded/);
    for (const [name, mode] of Object.entries(want.attrs)) {
      const st = fs.statSync(path.join(after.mnt, name));
      const got = (st.mode & 0o7777).toString(8) + (mode.includes(' ') ? ` ${Math.floor(st.mtimeMs / 1000)}` : '');
      expect(got, name).toBe(mode);
    }
    expect(fs.existsSync(path.join(after.mnt, 'a.tmp'))).toBe(upto < 3);
    await after.stop(); // waits for the queue
    expect(spooledVersions(path.join(state(), 'upload-spool'))).toBe(0);
    expect(await bucketFiles()).toEqual(want.files);
    expect(fs.existsSync(path.join(state(), 'conflicts')) ? fs.readdirSync(path.join(state(), 'conflicts')) : []).toEqual([]);
    // what landed carries the attributes (a fresh mount reads them from the bucket)
    const check = await mount('check');
    for (const [name, mode] of Object.entries(want.attrs)) {
      const st = fs.statSync(path.join(check.mnt, name));
      expect((st.mode & 0o7777).toString(8) + (mode.includes(' ') ? ` ${Math.floor(st.mtimeMs / 1000)}` : ''), name).toBe(mode);
    }
    await check.stop();

    const r = ledgerfs('rollback', '--state', state(), '--source', `gs://${g.bucket}`, '--session', 'killed');
    expect(r.status, r.stderr + r.stdout).toBe(0);
    expect(r.stdout).not.toMatch(/conflict/i);
    expect(await bucketFiles()).toEqual(before);
  }, 600_000);
});
