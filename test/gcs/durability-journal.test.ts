import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLI, py, sh, startMount, type TestMount } from '../helpers/mount.js';
import { spooledVersions } from '../helpers/spool.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { NEEDS_OWN_EMULATOR } from '../helpers/gcs-external.js';
import { startGcsFixture, type GcsFixture } from './fixture.js';

/**
 * --durability journal (issue 19): close(2) returns once the version is durable in the state
 * directory's upload spool; uploads run in the background, in order per object, before any
 * namespace change that depends on them; reads see the queued version; fsync waits for the
 * bucket; a SIGKILLed daemon's queue is uploaded by the next mount; a late 412 is a conflict.
 * Uploads are slowed (or refused) by the emulator's fault rules so the queue is seen at work.
 */
if (NEEDS_OWN_EMULATOR) console.warn(`test/gcs/durability-journal.test.ts (injects upload delays): ${NEEDS_OWN_EMULATOR}`);
describe.skipIf(!!NEEDS_OWN_EMULATOR)('gcs: --durability journal', () => {
  let g: GcsFixture;
  let home: string;
  const mounts: TestMount[] = [];
  const state = () => path.join(home, 'state');
  const spool = () => path.join(state(), 'upload-spool');
  const mount = async (extra: string[] = []) => {
    const m = await startMount({
      gcs: { emulator: g.emulator, bucket: g.bucket },
      args: ['--durability', 'journal', '--state', state(), '--attr-timeout', '0', '--entry-timeout', '0', '--metadata-ttl', '0.2', ...extra],
    });
    mounts.push(m);
    return m;
  };
  beforeEach(async () => {
    g = await startGcsFixture('ledgerfs-durability');
    home = makeTemp('gcs-durability');
  });
  afterEach(async () => {
    for (const m of mounts.splice(0)) await m.stop().catch(() => undefined); // a killed one reports its death
    await g?.stop();
    rmTemp(home);
  });

  /** The object's bytes in the bucket, as another client reads them (undefined: absent). */
  const inBucket = async (name: string): Promise<string | undefined> => {
    for (let i = 0; ; i++) {
      try {
        const f = g.storage.bucket(g.bucket).file(name);
        const [exists] = await f.exists();
        return exists ? (await f.download())[0].toString() : undefined;
      } catch (err) {
        if (i >= 3 || !/socket hang up|ECONNRESET/.test((err as Error).message)) throw err;
      }
    }
  };
  const eventually = async (what: string, cond: () => Promise<boolean>, ms = 60_000) => {
    const end = Date.now() + ms;
    while (!(await cond())) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  const spooled = () => spooledVersions(spool());
  const slowUploads = (delayMs: number, count = -1) => g.fault({ status: 0, delayMs, count, method: 'POST', pathPrefix: '/upload/' });

  it('close returns before the upload, reads see the queued version, fsync waits for the bucket', async () => {
    const m = await mount();
    // (long enough that the checks below run before it lands on a loaded machine too: at load 9
    // they once took more than 2.5 s; every upload: f's starts uploadDelayMs after its close,
    // and the journal mirror's may come first)
    await slowUploads(5000);
    // open, write, then time close(2) alone
    const out = py(
      `import os, time
fd = os.open('f', os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b'hello journal')
t = time.time(); os.close(fd); print(round((time.time() - t) * 1000))`,
      m.mnt,
    );
    expect(Number(out.trim())).toBeLessThan(1500);
    expect(spooled()).toBe(1);
    // read-your-writes while the upload waits
    expect(sh('cat f; stat -c %s f', m.mnt)).toBe('hello journal13\n');
    await new Promise((r) => setTimeout(r, 500)); // past the metadata cache's TTL: the backend answers
    expect(sh('stat -c %s f; ls -l f | cut -d" " -f5', m.mnt)).toBe('13\n13\n');
    expect(await inBucket('f')).toBeUndefined(); // a new file's create waits in the spool for its close's version
    await eventually('f uploaded', async () => (await inBucket('f')) === 'hello journal');
    await eventually('the spool emptied', async () => spooled() === 0);

    // fsync: in the bucket when it returns
    await g.clearFaults();
    await slowUploads(2500);
    const synced = py(
      `import os, time
fd = os.open('g', os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b'synced')
t = time.time(); os.fsync(fd); print(round((time.time() - t) * 1000)); os.close(fd)`,
      m.mnt,
    );
    expect(Number(synced.trim())).toBeGreaterThanOrEqual(2000);
    expect(await inBucket('g')).toBe('synced');
  });

  it('an fsync through a read-only descriptor waits for the upload of the version it reads, renamed in the queue since', async () => {
    const m = await mount();
    await slowUploads(1500);
    // the rename comes within uploadDelayMs of the close: the queued version takes the new name
    // (no upload yet); the fsync that follows must wait for it under that name
    const ms = py(
      `import os, time
with open('a', 'w') as f: f.write('version one')
r = os.open('a', os.O_RDONLY)
os.rename('a', 'b')
t = time.time(); os.fsync(r); print(round((time.time() - t) * 1000))
os.close(r)`,
      m.mnt,
    );
    expect(await inBucket('b'), `fsync returned after ${ms.trim()} ms`).toBe('version one');
    expect(await inBucket('a')).toBeUndefined();
  });

  it('a file read after its queued version landed is read from the content cache, not downloaded again', async () => {
    const m = await mount();
    const body = 'tar wrote it, git reads it\n'.repeat(200);
    fs.writeFileSync(path.join(m.mnt, 'src.txt'), body);
    await eventually('src.txt uploaded', async () => (await inBucket('src.txt')) === body);
    await eventually('the spool emptied', async () => spooled() === 0);
    const r0 = await g.requests();
    expect(fs.readFileSync(path.join(m.mnt, 'src.txt'), 'utf8')).toBe(body);
    // a read from an offset, across the end (the copy is the upload's bytes, kept in memory)
    const fd = fs.openSync(path.join(m.mnt, 'src.txt'), 'r');
    try {
      const part = Buffer.alloc(2000);
      const n = fs.readSync(fd, part, 0, 2000, 4000);
      expect(part.subarray(0, n).toString()).toBe(body.slice(4000));
    } finally {
      fs.closeSync(fd);
    }
    const log = await g.requestLog(r0);
    const downloads = log.filter((r) => r.query.includes('alt=media') && decodeURIComponent(r.path).endsWith('/src.txt'));
    expect(downloads, log.map((r) => `${r.method} ${r.path}${r.query}`).join('\n')).toEqual([]);
    // another client's new version is read from the bucket (the cache is keyed by generation)
    await g.storage.bucket(g.bucket).file('src.txt').save('changed elsewhere');
    await new Promise((r) => setTimeout(r, 300)); // past the metadata cache's TTL
    expect(fs.readFileSync(path.join(m.mnt, 'src.txt'), 'utf8')).toBe('changed elsewhere');
  });

  it('keeps each file\'s versions in order and lets no rename or delete overtake an upload', async () => {
    const m = await mount();
    sh('mkdir d; touch f h d/a', m.mnt);
    await slowUploads(400);
    sh('for i in 1 2 3; do echo v$i > f; done; mv f moved; echo gone > h; rm h; echo inside > d/a; mv d e; echo late > e/b', m.mnt);
    expect(sh('cat moved e/a e/b', m.mnt)).toBe('v3\ninside\nlate\n');
    await eventually('the queue drained', async () => spooled() === 0);
    await g.clearFaults();
    expect(await inBucket('moved')).toBe('v3\n');
    expect(await inBucket('f')).toBeUndefined();
    expect(await inBucket('h')).toBeUndefined();
    expect(await inBucket('d/a')).toBeUndefined();
    expect(await inBucket('e/a')).toBe('inside\n');
    expect(await inBucket('e/b')).toBe('late\n');
    expect(fs.existsSync(path.join(state(), 'conflicts'))).toBe(false);
  });

  it('a file created and closed empty keeps its create\'s mtime: a rollback of create, close, unlink (git init\'s probe) finds no conflict', async () => {
    const m = await mount(['--session', 'empty-close-1']);
    py("import os, time\nf = open('t', 'w'); time.sleep(0.1); f.close(); os.unlink('t')", m.mnt);
    await m.stop();
    mounts.splice(mounts.indexOf(m), 1);
    const r = spawnSync(process.execPath, [CLI, 'rollback', '--state', state(), '--session', 'empty-close-1', '--source', `gs://${g.bucket}`], {
      encoding: 'utf8', env: { ...process.env, ...m.env }, timeout: 120_000,
    });
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/Rolled back 2 mutation\(s\)/);
  });

  it('a SIGKILLed daemon loses nothing: the next mount uploads the spool', async () => {
    const a = await mount();
    const N = 30;
    sh(`for i in $(seq 1 ${N}); do touch f$i; done`, a.mnt);
    // (the creates in the bucket first: an open for writing waits for the file's queued versions,
    // which a closed version starts only uploadDelayMs after its close)
    await eventually('the creates uploaded', async () => spooled() === 0);
    await g.fault({ status: 503, count: -1, method: 'POST', pathPrefix: '/upload/' }); // GCS unreachable for uploads
    sh(`for i in $(seq 1 ${N}); do echo content-$i > f$i; done`, a.mnt); // every close returns: durable locally
    // bash's `>` closes twice (empty, then written): the empty versions not yet started are dropped
    expect(spooled()).toBeGreaterThanOrEqual(N);
    const queued = spooled();
    process.kill(a.daemon.pid as number, 'SIGKILL');
    await new Promise<void>((r) => (a.daemon.exitCode !== null || a.daemon.signalCode !== null ? r() : a.daemon.once('exit', () => r())));
    await a.stop().catch(() => undefined);
    await g.clearFaults();
    expect(spooled()).toBe(queued);
    const b = await mount();
    expect(sh('cat f7', b.mnt)).toBe('content-7\n'); // queued version shown before it lands
    await eventually('the spool uploaded', async () => spooled() === 0);
    for (let i = 1; i <= N; i++) expect(await inBucket(`f${i}`)).toBe(`content-${i}\n`);
    expect(b.logs()).toMatch(/uploads a crash or an unfinished unmount left in the spool are resumed/);
  });

  it('an object changed in the bucket before the queued upload: kept under conflicts/, journaled, logged at warn', async () => {
    const m = await mount();
    sh('touch f', m.mnt);
    await g.storage.bucket(g.bucket).file('other').save('theirs', { resumable: false });
    await slowUploads(1500); // every upload (the journal's mirror's too)
    py("open('f', 'w').write('mine\\n')", m.mnt); // one close: one version
    // another host replaces f while ours waits (a server-side copy: not an upload, not slowed)
    await new Promise((r) => setTimeout(r, 300));
    await g.storage.bucket(g.bucket).file('other').copy(g.storage.bucket(g.bucket).file('f'));
    await g.clearFaults();
    await eventually('the queue settled', async () => spooled() === 0);
    expect(await inBucket('f')).toBe('theirs');
    const dir = path.join(state(), 'conflicts');
    await eventually('the conflict note', async () => fs.readdirSync(dir).some((n) => n.endsWith('.json')));
    const kept = fs.readdirSync(dir).filter((n) => !n.endsWith('.json'));
    expect(kept.map((n) => fs.readFileSync(path.join(dir, n), 'utf8'))).toEqual(['mine\n']);
    expect(m.logs()).toMatch(/"level":40.*local version not uploaded \(found by its background upload\)/);
    const log = spawnSync(process.execPath, [CLI, 'log', '--state', state(), '--json', '--all'], { encoding: 'utf8', env: { ...process.env, LEDGERFS_GCS_ENDPOINT: g.emulator.url } });
    type Entry = { kind?: string; path?: string; conflicts?: Array<{ path: string; localFile: string }> };
    const entries = JSON.parse(log.stdout) as Entry[];
    const noted = entries.flatMap((e) => (e.kind === 'conflict' ? [e] : (e.conflicts ?? [])));
    expect(noted).toEqual([expect.objectContaining({ path: '/f', localFile: path.join(dir, kept[0] as string) })]);
  });

  it('a name GCS refuses is EINVAL at create and rename; an upload GCS refuses (400) is kept aside, not retried for ever', async () => {
    const m = await mount();
    // close(2) used to succeed and the upload to be retried every 3 s, the unmount waiting on it
    const out = py(
      `
import errno, json, os
r = {}
def err(f):
    try:
        f(); return 'ok'
    except OSError as e:
        return errno.errorcode[e.errno]
r['create'] = err(lambda: open('nl\\nname', 'w').close())
r['cr'] = err(lambda: open('cr\\rname', 'w').close())
open('plain', 'w').close()
r['rename'] = err(lambda: os.rename('plain', 'ren\\nnl'))
print(json.dumps(r))
`,
      m.mnt,
    );
    expect(JSON.parse(out)).toEqual({ create: 'EINVAL', cr: 'EINVAL', rename: 'EINVAL' });
    await eventually('the queue settled', async () => spooled() === 0, 20_000);
    // every upload is refused until ours is kept aside (the journal mirror's too: it retries)
    await g.fault({ status: 400, count: -1, method: 'POST', pathPrefix: '/upload/' });
    py("open('refused', 'w').write('mine\\n')", m.mnt);
    const dir = path.join(state(), 'conflicts');
    await eventually('the refused version kept aside', async () => fs.existsSync(dir) && fs.readdirSync(dir).some((n) => !n.endsWith('.json')), 20_000);
    await g.clearFaults();
    const kept = fs.readdirSync(dir).filter((n) => !n.endsWith('.json'));
    expect(kept.map((n) => fs.readFileSync(path.join(dir, n), 'utf8'))).toEqual(['mine\n']);
    await eventually('the queue settled', async () => spooled() === 0, 20_000);
    expect(m.logs()).toMatch(/"level":40.*refused/);
    await m.stop(); // the unmount has nothing left to wait for
  });

  it('a second mount on the same state directory is refused before it touches the spool; the first goes on', async () => {
    const m = await mount();
    sh('mkdir rep && echo one > rep/f0', m.mnt);
    await eventually('the queue settled', async () => spooled() === 0, 20_000);
    const segments = fs.readdirSync(spool()).sort();
    const mnt2 = path.join(home, 'second');
    fs.mkdirSync(mnt2);
    // (it used to resume the spool first: a new segment under the running daemon, whose closes
    // then failed with EIO, and which died on a descriptor closed under it)
    const r = spawnSync(process.execPath, [CLI, 'mount', '--source', `gs://${g.bucket}`, '--durability', 'journal', '--state', state(), mnt2], {
      encoding: 'utf8', timeout: 60_000, env: { ...process.env, ...m.env },
    });
    expect(r.status, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/the journal is in use by pid \d+ \(mount /);
    expect(fs.readdirSync(spool()).sort()).toEqual(segments);
    py("for i in range(1, 40): open('rep/f%d' % i, 'w').write('x' * 70000 + str(i))", m.mnt);
    await eventually('the queue settled', async () => spooled() === 0, 30_000);
    expect(await inBucket('rep/f39')).toBe('x'.repeat(70000) + '39');
    expect(fs.existsSync(path.join(state(), 'conflicts'))).toBe(false);
  });

  const cli = (...args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 120_000, env: { ...process.env, LEDGERFS_GCS_ENDPOINT: g.emulator.url } });

  it('a signal while the unmount waits for a bucket out of reach stops the wait: the daemon exits, the queue stays in the spool for the next mount', async () => {
    const a = await mount();
    sh('for i in 1 2 3; do touch f$i; done', a.mnt);
    await eventually('the creates uploaded', async () => spooled() === 0);
    await g.fault({ status: 503, count: -1, method: 'POST', pathPrefix: '/upload/' });
    py("for i in range(1, 4): open(f'f{i}', 'w').write('y' * 100)", a.mnt);
    expect(spooled()).toBe(3);
    const exited = new Promise<number | null>((r) => a.daemon.once('exit', (code) => r(code)));
    spawnSync('fusermount3', ['-u', a.mnt]); // as `umount` does: the daemon now waits for the queue
    const waitLine = async () => {
      for (let i = 0; i < 300 && !/unmount: uploading 3 file\(s\)/.test(a.logs()); i++) await new Promise((r) => setTimeout(r, 50));
      return /unmount: uploading 3 file\(s\)/.test(a.logs());
    };
    expect(await waitLine(), a.logs()).toBe(true);
    const t0 = Date.now();
    a.daemon.kill('SIGTERM');
    const code = await Promise.race([exited, new Promise<string>((r) => setTimeout(() => r('still running after 20 s'), 20_000))]);
    expect(code, a.logs()).toBe(130);
    expect(Date.now() - t0).toBeLessThan(20_000);
    expect(a.logs()).toMatch(/unmount: stopped waiting \(SIGTERM\): 3 file\(s\), 300 B, oldest \d+ s not uploaded yet, kept in /);
    expect(spooled()).toBe(3);
    await g.clearFaults();
    const b = await mount();
    await eventually('the spool uploaded', async () => spooled() === 0);
    for (let i = 1; i <= 3; i++) expect(await inBucket(`f${i}`)).toBe('y'.repeat(100));
    expect(sh('cat f2', b.mnt)).toBe('y'.repeat(100));
  });

  it('Ctrl-C on `ledgerfs unmount` waiting for a bucket out of reach stops the daemon\'s wait too (the mount is gone: nothing else could reach the daemon)', async () => {
    const a = await mount();
    sh('for i in 1 2 3; do touch f$i; done', a.mnt);
    await eventually('the creates uploaded', async () => spooled() === 0);
    await g.fault({ status: 503, count: -1, method: 'POST', pathPrefix: '/upload/' });
    py("for i in range(1, 4): open(f'f{i}', 'w').write('z' * 100)", a.mnt);
    expect(spooled()).toBe(3);
    const daemonExit = new Promise<number | null>((r) => a.daemon.once('exit', (code) => r(code)));
    const u = spawn(process.execPath, [CLI, 'unmount', a.mnt], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    u.stderr?.on('data', (d: Buffer) => (err += d.toString()));
    const cliExit = new Promise<number | null>((r) => u.once('exit', (code) => r(code)));
    await eventually('the unmount waiting', async () => /waiting for uploads: 3 file\(s\)/.test(err), 30_000);
    u.kill('SIGINT');
    const timeout = (what: string) => new Promise<string>((r) => setTimeout(() => r(`${what} still running after 20 s`), 20_000));
    expect(await Promise.race([cliExit, timeout('ledgerfs unmount')]), err).toBe(130);
    expect(await Promise.race([daemonExit, timeout('the daemon')]), a.logs()).toBe(130);
    expect(err).toMatch(/the daemon exited with 3 file\(s\), 300 B, oldest \d+ s not uploaded; they stay in .* for the next mount/);
    expect(a.logs()).toMatch(/unmount: stopped waiting \(SIGINT\): 3 file\(s\)/);
    expect(spooled()).toBe(3);
    await g.clearFaults();
    await mount();
    await eventually('the spool uploaded', async () => spooled() === 0);
    for (let i = 1; i <= 3; i++) expect(await inBucket(`f${i}`)).toBe('z'.repeat(100));
  });

  it('the mount file\'s backend.durability; status, /.ledgerfs/usage and unmount show the queue; --no-wait leaves it for the next mount', async () => {
    const policy = path.join(home, 'ws.yaml');
    fs.writeFileSync(policy, `backend: {type: gcs, bucket: ${g.bucket}, apiEndpoint: "${g.emulator.url}", durability: journal}\nroots: [{path: /, mode: rw}]\nstate: ${state()}\n`);
    // (the fault below holds the journal mirror's uploads too: its unmount waits 1 s for them, not 8)
    const a = await startMount({ omitSource: true, args: ['--policy', policy, '--attr-timeout', '0', '--entry-timeout', '0'], env: { LEDGERFS_MIRROR_DRAIN_TIMEOUT_MS: '1000' } });
    mounts.push(a);
    sh('for i in 1 2 3 4 5; do touch f$i; done', a.mnt);
    await eventually('the creates uploaded', async () => spooled() === 0); // (as in the SIGKILL case above)
    await g.fault({ status: 503, count: -1, method: 'POST', pathPrefix: '/upload/' });
    py("for i in range(1, 6): open(f'f{i}', 'w').write('x' * 1000)", a.mnt);
    expect(spooled()).toBe(5);
    const st = JSON.parse(cli('status', '--json').stdout) as Array<{ mountpoint: string; uploads: { files: number; bytes: number } | null }>;
    expect(st.find((m) => m.mountpoint === a.mnt)?.uploads).toMatchObject({ files: 5, bytes: 5000 });
    expect(cli('status').stdout).toMatch(/uploads: 5 file\(s\), 4\.9 KiB, oldest \d+ s queued/);
    const usage = fs.readFileSync(path.join(a.mnt, '.ledgerfs', 'usage'), 'utf8');
    expect(usage).toMatch(/uploads \(durability journal\): 5 file\(s\), 4\.9 KiB queued/);

    const u = cli('unmount', '--no-wait', a.mnt);
    expect(u.status, u.stderr).toBe(0);
    expect(u.stderr).toMatch(/not waiting: 5 file\(s\), 4\.9 KiB, oldest \d+ s queued for upload stay in/);
    await a.stop().catch(() => undefined);
    expect(spooled()).toBe(5);
    await g.clearFaults();

    const b = await startMount({ omitSource: true, args: ['--policy', policy, '--attr-timeout', '0', '--entry-timeout', '0'] });
    mounts.push(b);
    const w = cli('unmount', b.mnt); // waits for the queue (uploaded by the restart already, or now)
    expect(w.status, w.stderr).toBe(0);
    expect(spooled()).toBe(0);
    for (let i = 1; i <= 5; i++) expect(await inBucket(`f${i}`)).toBe('x'.repeat(1000));
  });
});
