import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLI, logsMatching, onGcs, startMount, type TestMount } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { snapshotTree } from '../helpers/tree.js';

/*
 * Crash test: a writer under load, the daemon killed with SIGKILL at a random moment, again and
 * again; then a restart (recovery), `ledgerfs verify` clean, and a rollback to the very start
 * gives back the initial tree exactly. Replay with LEDGERFS_CRASH_SEED.
 */

const ROUNDS = Number(process.env.LEDGERFS_CRASH_ROUNDS ?? 24);
const SEED = Number(process.env.LEDGERFS_CRASH_SEED ?? 4242);

/** A small seeded PRNG (mulberry32), so a failing schedule can be replayed. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Busy program: creates, overwrites, appends, truncates, renames (files and dirs), links, deletes,
 * and changes large files in place across fsyncs. */
const WRITER = String.raw`
import os, random, sys
root, seed = sys.argv[1], int(sys.argv[2])
rnd = random.Random(seed)
names = ['a', 'b', 'c', 'd', 'e', 'f']
dirs = ['', 'w1', 'w2', 'w1/x']
def p(): return os.path.join(root, rnd.choice(dirs), rnd.choice(names))
def data(): return os.urandom(rnd.choice([0, 5, 100, 4096, 70000]))
# one byte on stdout per change attempted: the test kills after a random number of them, so a
# slow machine still gets rounds with work to crash into
out = sys.stdout.buffer
while True:
    out.write(b'.'); out.flush()
    try:
        k = rnd.randrange(12)
        if k < 3:
            with open(p(), 'wb') as f: f.write(data())
        elif k == 3:
            with open(p(), 'ab') as f: f.write(data())
        elif k == 4:
            fd = os.open(p(), os.O_WRONLY); os.pwrite(fd, data()[:3000], rnd.randrange(5000)); os.close(fd)
        elif k == 5: os.truncate(p(), rnd.randrange(200))
        elif k == 6: os.rename(p(), p())
        elif k == 7: os.rename(os.path.join(root, rnd.choice(dirs[1:])), os.path.join(root, rnd.choice(dirs[1:]) + rnd.choice(['', '2'])))
        elif k == 8: os.unlink(p())
        elif k == 9: os.mkdir(os.path.join(root, rnd.choice(dirs)))
        elif k == 10: os.link(p(), p())
        else:
            # a large file changed in place, held open across fsyncs (kept by extents)
            fd = os.open(p(), os.O_RDWR | os.O_CREAT)
            try:
                size = os.fstat(fd).st_size
                if size < 150000: os.pwrite(fd, os.urandom(4096), 150000 + rnd.randrange(150000))
                for _ in range(rnd.randrange(1, 6)):
                    os.pwrite(fd, os.urandom(rnd.choice([100, 4096, 70000])), rnd.randrange(300000))
                    if rnd.random() < 0.5: os.fsync(fd)
                    if rnd.random() < 0.2: os.ftruncate(fd, rnd.randrange(300000))
            finally:
                os.close(fd)
    except (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, OSError) as e:
        if getattr(e, 'errno', None) in (107, 103):  # ENOTCONN, ECONNABORTED: the daemon is gone
            sys.exit(0)
`;

function ledgerfs(args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 120_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Resolves once the writer has attempted `n` changes (or exited: the round goes on). */
function writerProgress(w: ChildProcess, n: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let seen = 0;
    const timer = setTimeout(() => reject(new Error(`the writer made ${seen} of ${n} changes within 60 s`)), 60_000);
    const done = () => (clearTimeout(timer), resolve());
    w.stdout?.on('data', (d: Buffer) => {
      seen += d.length;
      if (seen >= n) done();
    });
    w.once('exit', done);
  });
}

describe('crash: SIGKILL of the daemon under load', () => {
  let base: string;
  let src: string;
  let state: string;
  let m: TestMount | null = null;
  let writer: ChildProcess | null = null;
  beforeEach(() => {
    base = makeTemp('crash');
    src = path.join(base, 'src');
    state = path.join(base, 'state');
    fs.mkdirSync(path.join(src, 'w1/x'), { recursive: true });
    fs.mkdirSync(path.join(src, 'w2'));
    fs.writeFileSync(path.join(src, 'a'), 'the original a\n');
    fs.writeFileSync(path.join(src, 'w1/b'), Buffer.alloc(50_000, 9));
    fs.writeFileSync(path.join(src, 'w1/x/c'), 'deep c\n', { mode: 0o600 });
    fs.symlinkSync('w1/b', path.join(src, 'link'));
  });
  afterEach(async () => {
    if (writer && writer.exitCode === null) writer.kill('SIGKILL');
    await m?.stop().catch(() => undefined);
    if (process.env.LEDGERFS_CRASH_KEEP) console.log(`kept ${base}`);
    else rmTemp(base);
  });

  it(`${ROUNDS} rounds of kill -9 at random moments; verify is clean and rollback restores the start`, async () => {
    const initial = snapshotTree(src);
    const rand = prng(SEED);
    let recoveries = 0;
    let torn = 0;
    for (let round = 0; round < ROUNDS; round++) {
      m = await startMount({ src, args: ['--state', state, '--session', `round-${round}`] });
      await logsMatching(m, /^ {2}stop: /m); // the banner (after any recovery notes) follows the mount
      if (/recovered after a crash|cut a torn record/.test(m.logs())) recoveries++;
      if (/cut a torn record/.test(m.logs())) torn++;
      const w = spawn('python3', ['-c', WRITER, m.mnt, String(SEED * 1000 + round)], { stdio: ['ignore', 'pipe', 'ignore'] });
      writer = w;
      // kill after a random count of changes, at a random moment within the next one
      await writerProgress(w, 3 + Math.floor(rand() * 38));
      await new Promise((r) => setTimeout(r, Math.floor(rand() * 20)));
      m.daemon.kill('SIGKILL');
      await new Promise<void>((r) => (w.exitCode !== null ? r() : w.once('exit', () => r())));
      await m.stop().catch(() => undefined); // "the daemon died": we killed it
      m = null;
    }
    // restart: recovery resolves what the last kill interrupted
    m = await startMount({ src, args: ['--state', state, '--session', 'after'] });
    const v = ledgerfs(['verify', '--state', state, '--json']);
    const report = JSON.parse(v.stdout) as { clean: boolean; problems: string[]; operations: number; notes: string[] };
    expect(report.problems).toEqual([]);
    expect(v.status).toBe(0);
    // on GCS every operation is a few round trips to the emulator: far fewer fit in a round's
    // 40-400 ms window on a loaded machine (18 in 24 rounds seen); this only checks that the
    // kills did land on work in progress
    expect(report.operations).toBeGreaterThan(onGcs ? ROUNDS / 2 : ROUNDS * 5);

    const r = ledgerfs(['rollback', '--state', state, '--to', '0']);
    expect(r.stderr).toBe('');
    expect(r.stdout).not.toMatch(/conflict/);
    expect(r.stdout).toMatch(/through the daemon/);
    expect(r.status).toBe(0);
    expect(snapshotTree(src)).toEqual(initial);
    expect(snapshotTree(m.mnt)).toEqual(initial);
    expect(ledgerfs(['verify', '--state', state]).status).toBe(0);
    if (process.env.LEDGERFS_CRASH_STATS) console.log(JSON.stringify({ operations: report.operations, recoveries, torn, notes: report.notes }));
    // most restarts had something to recover (a crash mid-operation is the common case)
    expect(recoveries).toBeGreaterThan(0);
  }, 240_000);
});

// Issue 13.7 (second half) and 13.2 on a mount: the daemon dies in the middle of a rollback it
// is applying; after a restart, the same rollback finishes without blaming "someone" for its
// own half-done restore, and the file is the original byte for byte.
describe('crash: the daemon killed mid-rollback', () => {
  let base: string;
  let m: TestMount | null = null;
  beforeEach(() => {
    base = makeTemp('crash-rollback');
  });
  afterEach(async () => {
    await m?.stop().catch(() => undefined);
    rmTemp(base);
  });

  it('a re-run after the restart finishes the restore; no conflict', async () => {
    const src = path.join(base, 'src');
    const state = path.join(base, 'state');
    fs.mkdirSync(src);
    const block = Buffer.alloc(1 << 20);
    for (let i = 0; i < block.length; i++) block[i] = (i * 7919) & 0xff;
    const original = Buffer.concat(Array.from({ length: 64 }, (_, k) => { const b = Buffer.from(block); b.writeUInt32LE(k, 0); return b; }));
    fs.writeFileSync(path.join(src, 'big.bin'), original);
    fs.writeFileSync(path.join(src, 'small.txt'), 'small as it was\n');
    m = await startMount({ src, args: ['--state', state, '--session', 'agent'] });
    // the agent: overwrites the big file, rewrites a small one, makes a new one
    fs.writeFileSync(path.join(m.mnt, 'big.bin'), Buffer.alloc(original.length + 4096, 0x5a));
    fs.writeFileSync(path.join(m.mnt, 'small.txt'), 'small by the agent\n');
    fs.writeFileSync(path.join(m.mnt, 'new.txt'), 'new');
    // the rollback goes to the daemon; kill the daemon once its undo has begun writing
    const rb = spawn(process.execPath, [CLI, 'rollback', '--state', state, '--session', 'agent'], { stdio: 'ignore' });
    const journalDir = path.join(state, 'journal');
    const undoBegun = () => fs.readdirSync(journalDir).some((n) => fs.readFileSync(path.join(journalDir, n)).includes('"undoes":'));
    const t0 = Date.now();
    while (!undoBegun() && Date.now() - t0 < 30_000) await new Promise((r) => setTimeout(r, 5));
    await new Promise((r) => setTimeout(r, 30 + Math.floor(Math.random() * 60)));
    m.daemon.kill('SIGKILL');
    await new Promise<void>((r) => (rb.exitCode !== null ? r() : rb.once('exit', () => r())));
    await m.stop().catch(() => undefined); // "the daemon died": we killed it
    m = null;
    m = await startMount({ src, args: ['--state', state, '--session', 'after'] });
    const r = ledgerfs(['rollback', '--state', state, '--session', 'agent']);
    expect(r.stdout).not.toMatch(/someone changed it|Nothing to roll back/);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const got = fs.readFileSync(path.join(src, 'big.bin'));
    expect(got.length).toBe(original.length);
    expect(got.equals(original)).toBe(true);
    expect(fs.readFileSync(path.join(src, 'small.txt'), 'utf8')).toBe('small as it was\n');
    expect(fs.existsSync(path.join(src, 'new.txt'))).toBe(false);
    expect(ledgerfs(['verify', '--state', state]).status).toBe(0);
  }, 120_000);
});
