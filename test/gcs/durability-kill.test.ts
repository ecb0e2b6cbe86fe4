import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, startMount, type TestMount } from '../helpers/mount.js';
import { spooledVersions } from '../helpers/spool.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { NEEDS_OWN_EMULATOR } from '../helpers/gcs-external.js';
import { startGcsFixture, type GcsFixture } from './fixture.js';

/**
 * The kill bar of issue 19: SIGKILL the daemon during a `tar -x` with --durability journal,
 * remount, again and again (LEDGERFS_DURABILITY_KILL_ROUNDS, default 3; the issue asks 20: run
 * it by hand with 20), then one tar -x that finishes and a clean unmount (which waits for the
 * queue). The bucket must then hold the source tree byte for byte, and rolling the journal back
 * to before the first round (with --force: see below) must leave the prefix empty. LEDGERFS_DURABILITY_KILL_FILES sets the
 * tree's size (default 400).
 */
const ROUNDS = Number(process.env.LEDGERFS_DURABILITY_KILL_ROUNDS ?? 3);
const FILES = Number(process.env.LEDGERFS_DURABILITY_KILL_FILES ?? 400);

if (NEEDS_OWN_EMULATOR) console.warn(`test/gcs/durability-kill.test.ts: ${NEEDS_OWN_EMULATOR}`);
describe.skipIf(!!NEEDS_OWN_EMULATOR)('gcs: --durability journal survives SIGKILL during tar -x', () => {
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
    if (home) rmTemp(home);
  });

  const mount = () =>
    startMount({
      gcs: { emulator: g.emulator, bucket: g.bucket },
      args: ['--durability', 'journal', '--state', state(), '--attr-timeout', '0.2', '--entry-timeout', '0.2', '--metadata-ttl', '0.2'],
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
    // LEDGERFS_DURABILITY_KILL_DELAY_MS slows every upload during the killed rounds (the create
    // at open too, so it does not make the queue longer by itself)
    const delayMs = Number(process.env.LEDGERFS_DURABILITY_KILL_DELAY_MS ?? 0);
    if (delayMs > 0) await g.fault({ status: 0, delayMs, count: -1, method: 'POST', pathPrefix: '/upload/' });
    for (let round = 0; round < ROUNDS; round++) {
      const m: TestMount = await mount();
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
    try {
      fs.mkdirSync(path.join(last.mnt, 'out'), { recursive: true });
      execFileSync('tar', ['-xf', tarball(), '-C', path.join(last.mnt, 'out')], { stdio: 'pipe', timeout: 600_000 });
    } finally {
      await last.stop(); // a clean unmount: waits for the queue
    }
    if (process.env.LEDGERFS_DURABILITY_KILL_STATS) console.log(JSON.stringify({ rounds: ROUNDS, files: FILES, kills }));
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
    // --force: a round killed between a file's write and its close leaves a write the journal
    // recorded and the bucket never got (the bytes were staged, never acknowledged); a strict
    // rollback stops on it ("expected N bytes, found 0"). Both durabilities stage until close:
    // see src/backend/gcs/README.md, "Durability". The bar is that nothing acknowledged is lost
    // (checked above) and that the journal takes the prefix back to empty.
    const r = ledgerfs('rollback', '--state', state(), '--source', `gs://${g.bucket}`, '--to', String(first - 1), '--force');
    expect(r.status, r.stderr + r.stdout).toBe(0);
    expect([...(await objects()).keys()]).toEqual([]);
  }, 1_800_000);
});
