import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { CLI, startMount, type TestMount } from '../helpers/mount.js';
import { readJournal } from '../../src/journal/reader.js';
import type { JournalRecord } from '../../src/journal/record.js';
import { spooledVersions } from '../helpers/spool.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { NEEDS_OWN_EMULATOR } from '../helpers/gcs-external.js';
import { startGcsFixture, type GcsFixture } from './fixture.js';

/**
 * The kill bar of issue 19: SIGKILL the daemon during a `tar -x` with --durability journal,
 * remount, again and again (LEDGERFS_DURABILITY_KILL_ROUNDS, default 3; the issue asks 20: run
 * it by hand with 20), then one tar -x that finishes and a clean unmount (which waits for the
 * queue). The bucket must then hold the source tree byte for byte, and rolling the journal back
 * to before the first round, strictly (no --force), must leave the prefix empty.
 * LEDGERFS_DURABILITY_KILL_FILES sets the tree's size (default 400), LEDGERFS_DURABILITY_KILL_MODE
 * the durability (default journal; bucket is affected the same way: both stage until close).
 * LEDGERFS_DURABILITY_KILL_STATS prints the rounds, what each kill left in the spool and how many
 * files each start found the bucket never got (`reconciled`); LEDGERFS_DURABILITY_KILL_KEEP keeps
 * the state directory and each round's daemon log.
 */
const ROUNDS = Number(process.env.LEDGERFS_DURABILITY_KILL_ROUNDS ?? 3);
const FILES = Number(process.env.LEDGERFS_DURABILITY_KILL_FILES ?? 400);
const MODE = process.env.LEDGERFS_DURABILITY_KILL_MODE ?? 'journal';

if (NEEDS_OWN_EMULATOR) console.warn(`test/gcs/durability-kill.test.ts: ${NEEDS_OWN_EMULATOR}`);
describe.skipIf(!!NEEDS_OWN_EMULATOR)(`gcs: --durability ${MODE} survives SIGKILL during tar -x`, () => {
  let g: GcsFixture;
  let home: string;
  const tree = () => path.join(home, 'tree');
  const tarball = () => path.join(home, 'tree.tar');
  const state = () => path.join(home, 'state');

  beforeAll(async () => {
    g = await startGcsFixture('ledgerfs-durability-kill');
    home = makeTemp('gcs-durability-kill');
    for (let i = 0; i < FILES; i++) {
      const d = path.join(tree(), `d${i % 12}`, `s${i % 5}`);
      fs.mkdirSync(d, { recursive: true });
      fs.writeFileSync(path.join(d, `f${i}.txt`), `file ${i} `.repeat(1 + ((i * 37) % 300)));
    }
    execFileSync('tar', ['-cf', tarball(), '-C', tree(), '.']);
  });
  afterAll(async () => {
    await g?.stop();
    if (home && process.env.LEDGERFS_DURABILITY_KILL_KEEP) console.log(`kept ${home}`);
    else if (home) rmTemp(home);
  });

  const mount = () =>
    startMount({
      gcs: { emulator: g.emulator, bucket: g.bucket },
      args: ['--durability', MODE, '--state', state(), '--attr-timeout', '0.2', '--entry-timeout', '0.2', '--metadata-ttl', '0.2'],
    });
  const ledgerfs = (...args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 300_000, maxBuffer: 1 << 28, env: { ...process.env, LEDGERFS_GCS_ENDPOINT: g.emulator.url } });
  /** (the fixture's client does not retry; a kept-alive socket the emulator closed is worth another try) */
  const again = async <T>(fn: () => Promise<T>): Promise<T> => {
    for (let i = 0; ; i++) {
      try {
        return await fn();
      } catch (err) {
        if (i >= 3 || !/socket hang up|ECONNRESET/.test((err as Error).message)) throw err;
      }
    }
  };
  const objects = async (): Promise<Map<string, Buffer>> => {
    const [files] = await again(() => g.storage.bucket(g.bucket).getFiles());
    const out = new Map<string, Buffer>();
    for (const f of files) if (!f.name.startsWith('.ledgerfs/')) out.set(f.name, (await again(() => f.download()))[0]);
    return out;
  };

  it(`${ROUNDS} kills, then the bucket equals the tree and a rollback empties it`, async () => {
    const kills: Array<{ afterMs: number; spooled: number }> = [];
    /** per start after a kill: files whose journaled state the bucket never got (the case this bar is about) */
    const reconciled: number[] = [];
    const noteRecovery = (m: TestMount) => {
      const hit = /(\d+) file\(s\) never got what the journal recorded/.exec(m.logs());
      reconciled.push(hit ? Number(hit[1]) : 0);
    };
    // LEDGERFS_DURABILITY_KILL_DELAY_MS slows every upload during the killed rounds (the create
    // at open too, so it does not make the queue longer by itself)
    const delayMs = Number(process.env.LEDGERFS_DURABILITY_KILL_DELAY_MS ?? 0);
    if (delayMs > 0) await g.fault({ status: 0, delayMs, count: -1, method: 'POST', pathPrefix: '/upload/' });
    for (let round = 0; round < ROUNDS; round++) {
      const m: TestMount = await mount();
      if (round > 0) noteRecovery(m);
      if (process.env.LEDGERFS_DURABILITY_KILL_KEEP) fs.writeFileSync(path.join(home, `round-${round}.log`), m.logs());
      try {
        fs.mkdirSync(path.join(m.mnt, 'out'), { recursive: true });
        const tar = spawn('tar', ['-xf', tarball(), '-C', path.join(m.mnt, 'out')], { stdio: 'ignore' });
        const tarDone = new Promise<void>((r) => tar.on('exit', () => r()));
        const afterMs = 300 + Math.floor(Math.random() * 1500);
        await new Promise((r) => setTimeout(r, afterMs));
        process.kill(m.daemon.pid as number, 'SIGKILL');
        await tarDone;
        const spoolDir = path.join(state(), 'upload-spool');
        kills.push({ afterMs, spooled: spooledVersions(spoolDir) });
      } finally {
        await m.stop().catch(() => undefined); // reports the death it was dealt
      }
    }
    await g.clearFaults();
    const last = await mount();
    if (ROUNDS > 0) noteRecovery(last);
    try {
      fs.mkdirSync(path.join(last.mnt, 'out'), { recursive: true });
      execFileSync('tar', ['-xf', tarball(), '-C', path.join(last.mnt, 'out')], { stdio: 'pipe', timeout: 600_000 });
    } finally {
      await last.stop(); // a clean unmount: waits for the queue
    }
    if (process.env.LEDGERFS_DURABILITY_KILL_STATS) console.log(JSON.stringify({ mode: MODE, rounds: ROUNDS, files: FILES, kills, reconciled }));
    expect(spooledVersions(path.join(state(), 'upload-spool'))).toBe(0);

    const want = new Map<string, Buffer>();
    const walk = (dir: string, rel: string) => {
      for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
        if (e.isDirectory()) walk(path.join(dir, e.name), `${rel}${e.name}/`);
        else want.set(`out/${rel}${e.name}`, fs.readFileSync(path.join(dir, e.name)));
      }
    };
    walk(tree(), '');
    const got = await objects();
    const files = new Map([...got].filter(([k]) => !k.endsWith('/')));
    expect([...files.keys()].sort()).toEqual([...want.keys()].sort());
    const differing = [...want].filter(([k, v]) => !files.get(k)?.equals(v)).map(([k]) => k);
    expect(differing).toEqual([]);
    expect(fs.existsSync(path.join(state(), 'conflicts')) ? fs.readdirSync(path.join(state(), 'conflicts')) : []).toEqual([]);

    // every mount was its own session: undo them all, back to before the first record
    const l = ledgerfs('log', '--state', state(), '--source', `gs://${g.bucket}`, '--json', '--all');
    expect(l.status, l.stderr).toBe(0);
    const log = JSON.parse(l.stdout) as Array<{ seq: number }>;
    const first = Math.min(...log.map((e) => e.seq));
    // strict (no --force): a round killed between a file's write and its close left a write and
    // a futimens the journal recorded and the bucket never got; the next start recorded them as
    // lost (journal/recovery.ts reconcileUndurable), so nothing here is anyone else's change
    const r = ledgerfs('rollback', '--state', state(), '--source', `gs://${g.bucket}`, '--to', String(first - 1));
    expect(r.stdout).not.toMatch(/conflict/i);
    expect(r.status, r.stderr + r.stdout).toBe(0);
    expect([...(await objects()).keys()]).toEqual([]);
  }, 1_800_000);
});

/**
 * A program that wrote a file and changed its times (tar's futimens) or reached an fsync, then
 * the daemon is killed before the file's close: the bytes were only in the staging file (never
 * acknowledged), the journal had recorded the write session's end and the futimens. The next
 * start reconciles those records with what the bucket holds, so a strict rollback of the
 * session gives back exactly what was there before it: no conflict, no wrong bytes. In both
 * durabilities (both stage until close). Deterministic: the program says when it is there, and
 * waits to be killed; an fsync's upload is held by the emulator (an injected slow 503).
 */
const WRITE_THEN_WAIT = String.raw`
import os, sys
root = sys.argv[1]
os.makedirs(os.path.join(root, 'out', 'sub'), exist_ok=True)
def wrote(name, data, fsync_first=None):
    fd = os.open(os.path.join(root, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    if fsync_first is not None:
        os.write(fd, fsync_first); os.fsync(fd)
    os.write(fd, data)
    os.utime(fd, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))  # tar's futimens, before close
    return fd
held = [
    wrote('out/new.txt', b'tar wrote this and never closed it\n' * 50),
    wrote('out/sub/deep.txt', b'x' * 1791),
    wrote('out/synced.txt', b' and then more', fsync_first=b'reached an fsync'),
]
# an existing file overwritten in place (its old bytes must stay: nothing new reached the bucket)
fd = os.open(os.path.join(root, 'keep.txt'), os.O_WRONLY)
os.pwrite(fd, b'NEW BYTES THAT NEVER LANDED', 0)
os.fchmod(fd, 0o600)
held.append(fd)
# a new file whose fsync is in flight when the daemon dies (the test holds its upload)
late = os.open(os.path.join(root, 'out/fsync-in-flight.txt'), os.O_WRONLY | os.O_CREAT, 0o644)
os.write(late, b'the fsync of this never returned')
print('written', flush=True)
sys.stdin.readline()
print('fsyncing', flush=True)
try:
    os.fsync(late)
except OSError:
    pass
sys.stdin.readline()
`;

for (const durability of ['bucket', 'journal'] as const) {
  describe.skipIf(!!NEEDS_OWN_EMULATOR)(`gcs --durability ${durability}: a kill between a file's write and its close`, () => {
    let g: GcsFixture;
    let home: string;
    let program: ChildProcess | null = null;
    const mounts: TestMount[] = [];
    const state = () => path.join(home, 'state');
    const mount = async (session: string) => {
      const m = await startMount({
        gcs: { emulator: g.emulator, bucket: g.bucket },
        args: ['--durability', durability, '--state', state(), '--session', session, '--attr-timeout', '0', '--entry-timeout', '0', '--metadata-ttl', '0'],
      });
      mounts.push(m);
      return m;
    };
    const ledgerfs = (...args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 300_000, env: { ...process.env, LEDGERFS_GCS_ENDPOINT: g.emulator.url } });
    const bucketFiles = () => g.objects();
    const lines = (p: ChildProcess) => {
      let buf = '';
      const waiting: Array<[string, () => void]> = [];
      p.stdout?.on('data', (d: Buffer) => {
        buf += d.toString();
        for (const [w, r] of waiting.splice(0)) if (buf.includes(w)) r();
        else waiting.push([w, r]);
      });
      return (what: string) =>
        new Promise<void>((resolve, reject) => {
          if (buf.includes(what)) return resolve();
          const timer = setTimeout(() => reject(new Error(`the program did not say ${what} within 120 s`)), 120_000);
          waiting.push([what, () => (clearTimeout(timer), resolve())]);
        });
    };

    beforeEach(async () => {
      g = await startGcsFixture(`ledgerfs-kill-before-close-${durability}`);
      home = makeTemp(`gcs-kill-before-close-${durability}`);
    });
    afterEach(async () => {
      if (program && program.exitCode === null) program.kill('SIGKILL');
      for (const m of mounts.splice(0)) await m.stop().catch(() => undefined);
      await g?.stop();
      if (home) rmTemp(home);
    });

    // the next start is a mount, or the rollback itself on the unmounted workspace
    it.each(['remount', 'offline rollback'])('the next start (%s) records what never landed; a strict rollback of the session restores the state before it', async (next) => {
      const first = await mount('before');
      fs.writeFileSync(path.join(first.mnt, 'keep.txt'), 'the old bytes of keep.txt\n');
      await first.stop();
      const before = await bucketFiles();
      expect(before).toEqual({ 'keep.txt': 'the old bytes of keep.txt\n' });

      const m = await mount('killed');
      const p = spawn('python3', ['-c', WRITE_THEN_WAIT, m.mnt], { stdio: ['pipe', 'pipe', 'inherit'] });
      program = p;
      const said = lines(p);
      await said('written');
      // hold every upload from here on: the fsync's never lands (503 after 15 s, no effect)
      const since = await g.requests();
      await g.fault({ status: 503, delayMs: 15_000, count: -1, method: 'POST', pathPrefix: '/upload/' });
      p.stdin?.write('\n');
      await said('fsyncing');
      // The kill lands once the fsync's upload is held by the emulator and the journal's file
      // has the records of what the program's finished calls did (the futimens' and fchmod's
      // outcomes, synced.txt's fsync): they reach it within its flush delay, later on a loaded
      // machine. (The held fsync's own end record may never come: in journal durability it can
      // wait on the backend.)
      const uploadHeld = async () => (await g.requestLog(since)).some((q) => q.method === 'POST' && q.path.startsWith('/upload/') && decodeURIComponent(q.query).includes('out/fsync-in-flight.txt'));
      const finished = (records: JournalRecord[], op: string, file: string, end: 'done' | 'end') => {
        const seqs = records.filter((r) => r.kind === 'op' && r.session === 'killed' && r.op === op && r.paths[0] === file).map((r) => (r as { seq: number }).seq);
        return seqs.length > 0 && seqs.every((seq) => records.some((r) => r.kind === end && r.of === seq));
      };
      const recorded = () => {
        const records = readJournal(state()).records.map((r) => r.record);
        return ['/out/new.txt', '/out/sub/deep.txt', '/out/synced.txt'].every((f) => finished(records, 'utimens', f, 'done')) &&
          finished(records, 'chmod', '/keep.txt', 'done') &&
          records.some((r) => r.kind === 'end' && r.reason === 'fsync' && records.some((o) => o.kind === 'op' && o.seq === r.of && o.paths[0] === '/out/synced.txt'));
      };
      const t0 = Date.now();
      while (!(recorded() && (await uploadHeld()))) {
        if (Date.now() - t0 > 60_000) throw new Error(`within 60 s: the journal has the program's records: ${recorded()}; the fsync's upload reached the emulator: ${await uploadHeld()}`);
        await new Promise((r) => setTimeout(r, 25));
      }
      process.kill(m.daemon.pid as number, 'SIGKILL');
      await m.stop().catch(() => undefined);
      p.kill('SIGKILL');
      await g.clearFaults();

      // what the bucket holds: the empty objects open() made (or nothing), keep.txt unchanged
      const crashed = await bucketFiles();
      expect(crashed['keep.txt']).toBe('the old bytes of keep.txt\n');
      expect(crashed['out/new.txt'] ?? '').toBe('');
      expect(crashed['out/sub/deep.txt'] ?? '').toBe('');

      let r: ReturnType<typeof ledgerfs>;
      if (next === 'remount') {
        const after = await mount('after');
        expect(after.logs()).toMatch(/never got what the journal recorded/);
        // what the mount shows is what the bucket holds
        expect(fs.readFileSync(path.join(after.mnt, 'keep.txt'), 'utf8')).toBe('the old bytes of keep.txt\n');
        await after.stop();
        r = ledgerfs('rollback', '--state', state(), '--source', `gs://${g.bucket}`, '--session', 'killed');
      } else {
        // (its start reconciles the journal before it plans: the log below shows what it recorded)
        r = ledgerfs('rollback', '--state', state(), '--source', `gs://${g.bucket}`, '--session', 'killed');
      }
      expect(r.status, r.stderr + r.stdout).toBe(0);
      const l = ledgerfs('log', '--state', state(), '--source', `gs://${g.bucket}`, '--session', 'killed', '--all');
      expect(l.status, l.stderr).toBe(0);
      expect(l.stdout).toMatch(/lost: held for the upload at close/);
      expect(r.stdout).not.toMatch(/conflict/i);
      expect(await bucketFiles()).toEqual(before);

      // and the whole journal goes back to the empty prefix, strictly
      const all = ledgerfs('rollback', '--state', state(), '--source', `gs://${g.bucket}`, '--to', '0');
      expect(all.status, all.stderr + all.stdout).toBe(0);
      expect(await bucketFiles()).toEqual({});
      expect(ledgerfs('verify', '--state', state(), '--source', `gs://${g.bucket}`).status).toBe(0);
    }, 600_000);
  });
}
