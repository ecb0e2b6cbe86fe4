import { type ChildProcessWithoutNullStreams, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { describe, expect, it } from 'vitest';
import { DEFAULTS } from '../../src/config/defaults.js';
import { logsMatching, onGcs, sh, startMount, type TestMount } from '../helpers/mount.js';

/*
 * The daemon at its open-file limit (issue 13, item 4): programs holding tens of thousands of
 * files open must not take the daemon down. Real python processes hold the files; the daemon's
 * descriptors are counted in /proc.
 */

/**
 * A python process that opens files d/f0..f{n-1} of the mount, holds them, and answers
 * commands on stdin, one JSON line each: `check` (every descriptor reads its own file's
 * content), `write` (every 20th file gets 'W' at offset 0 through its descriptor), `unlink`
 * (unlinks every file it holds, counting refusals by errno).
 */
const HOLDER = String.raw`
import errno, json, os, resource, sys
d, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (n + 64, max(hard, n + 64)))
fds, errs = {}, {}
def count(e):
    name = errno.errorcode.get(e.errno, str(e.errno))
    errs[name] = errs.get(name, 0) + 1
for i in range(n):
    try:
        fds[i] = os.open(f'{d}/f{i}', os.O_RDWR if mode == 'rw' else os.O_RDONLY)
    except OSError as e:
        count(e)
print(json.dumps({'opened': len(fds), 'errors': errs}), flush=True)
written = set()
for line in sys.stdin:
    cmd = line.strip()
    errs = {}
    if cmd == 'check':
        bad = []
        for i, fd in fds.items():
            want = (b'W' if i in written else b'') + f'{d}/{i}'.encode()[(1 if i in written else 0):]
            try:
                got = os.pread(fd, 256, 0)
            except OSError as e:
                count(e)
                continue
            if got != want:
                bad.append(i)
        print(json.dumps({'bad': bad[:10], 'nbad': len(bad), 'errors': errs}), flush=True)
    elif cmd == 'write':
        for i, fd in fds.items():
            if i % 20 == 0:
                try:
                    os.pwrite(fd, b'W', 0)
                    written.add(i)
                except OSError as e:
                    count(e)
        print(json.dumps({'written': len(written), 'errors': errs}), flush=True)
    elif cmd == 'unlink':
        done = 0
        for i in fds:
            try:
                os.unlink(f'{d}/f{i}')
                done += 1
            except OSError as e:
                count(e)
        print(json.dumps({'unlinked': done, 'errors': errs}), flush=True)
`;

interface Holder {
  ask(cmd: string): Promise<Record<string, unknown>>;
  first: Promise<Record<string, unknown>>;
  end(): Promise<void>;
}

function holder(mnt: string, dir: string, n: number, mode: 'r' | 'rw'): Holder {
  const p: ChildProcessWithoutNullStreams = spawn('python3', ['-c', HOLDER, dir, String(n), mode], { cwd: mnt });
  let err = '';
  p.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const lines = readline.createInterface({ input: p.stdout });
  const waiting: Array<(v: Record<string, unknown>) => void> = [];
  lines.on('line', (l) => waiting.shift()?.(JSON.parse(l) as Record<string, unknown>));
  const exited = new Promise<void>((r) => p.on('exit', () => r()));
  const next = () =>
    new Promise<Record<string, unknown>>((resolve, reject) => {
      waiting.push(resolve);
      void exited.then(() => reject(new Error(`holder of ${dir} exited: ${err}`)));
    });
  return {
    first: next(),
    ask(cmd) {
      const r = next();
      p.stdin.write(cmd + '\n');
      return r;
    },
    async end() {
      p.stdin.end();
      await exited;
    },
  };
}

/** descriptors the daemon holds now */
function daemonFds(m: TestMount): number {
  return fs.readdirSync(`/proc/${m.daemon.pid}/fd`).length;
}

const content = (dir: string, i: number) => `${dir}/${i}`;

function fill(src: string, dir: string, n: number): void {
  fs.mkdirSync(path.join(src, dir));
  for (let i = 0; i < n; i++) fs.writeFileSync(path.join(src, dir, `f${i}`), content(dir, i));
}

describe.skipIf(onGcs)('mount: the daemon at its open-file limit', () => {
  it('25,200 files held open by 3 processes: the daemon stays up within its descriptor pool, every descriptor reads and writes its own file, others keep working', async () => {
    const per = 8400;
    const m = await startMount({ populate: (src) => ['p0', 'p1', 'p2'].forEach((d) => fill(src, d, per)) });
    const holders: Holder[] = [];
    try {
      holders.push(holder(m.mnt, 'p0', per, 'rw'), holder(m.mnt, 'p1', per, 'r'), holder(m.mnt, 'p2', per, 'r'));
      const opened = await Promise.all(holders.map((h) => h.first));
      expect(opened).toEqual(holders.map(() => ({ opened: per, errors: {} })));
      // the daemon holds a bounded pool, not one descriptor per open file
      const held = daemonFds(m);
      expect(held).toBeLessThanOrEqual(DEFAULTS.local.backingFdsMax + DEFAULTS.local.fdHeadroom);
      // everyone else is served meanwhile
      expect(sh('cat p0/f1 && echo hello > other && cat other && ls p1 | wc -l', m.mnt)).toBe(`p0/1hello\n${per}\n`);
      // every descriptor still reaches its own file: most were given up and are reopened now
      expect(await holders[0]?.ask('write')).toEqual({ written: per / 20, errors: {} });
      const checks = await Promise.all(holders.map((h) => h.ask('check')));
      expect(checks).toEqual(holders.map(() => ({ bad: [], nbad: 0, errors: {} })));
      expect(fs.readFileSync(path.join(m.src, 'p0/f40'), 'utf8')).toBe('W0/40');
      expect(daemonFds(m)).toBeLessThanOrEqual(DEFAULTS.local.backingFdsMax + DEFAULTS.local.fdHeadroom);
      await Promise.all(holders.map((h) => h.end()));
      expect(m.alive()).toBe(true);
      expect(sh('cat p2/f8399', m.mnt)).toBe('p2/8399');
      expect(await logsMatching(m, /"openFiles":\d+/)).toMatch(/"msg":"open-file limit"/);
      expect(m.errors()).toEqual([]);
    } finally {
      for (const h of holders) await h.end().catch(() => undefined);
      await m.stop();
    }
  });

  it('with a small limit: opens rotate through the pool; past the system limit and the pinned share the caller alone gets EMFILE, told once in the log', async () => {
    // the daemon may have 512 descriptors: a pool of 256, of which 192 may be pinned
    const m = await startMount({ wrap: ['prlimit', '--nofile=512:512'], populate: (src) => (fill(src, 'a', 600), fill(src, 'b', 60)) });
    const pid = String(m.daemon.pid);
    let a: Holder | undefined;
    let b: Holder | undefined;
    try {
      expect(fs.readFileSync(`/proc/${pid}/limits`, 'utf8')).toMatch(/Max open files\s+512\s+512/);
      a = holder(m.mnt, 'a', 600, 'rw');
      expect(await a.first).toEqual({ opened: 600, errors: {} });
      expect(await a.ask('check')).toEqual({ bad: [], nbad: 0, errors: {} });
      expect(daemonFds(m)).toBeLessThanOrEqual(512);

      // the system's limit drops below the descriptors the daemon has: every open now meets
      // EMFILE from the system, gives one of the pool's back and goes on
      execFileSync('prlimit', ['--pid', pid, '--nofile=150:512']);
      b = holder(m.mnt, 'b', 60, 'r');
      expect(await b.first).toEqual({ opened: 60, errors: {} });
      expect(await a.ask('check')).toEqual({ bad: [], nbad: 0, errors: {} });
      expect(await b.ask('check')).toEqual({ bad: [], nbad: 0, errors: {} });
      expect(sh('ls b | wc -l', m.mnt)).toBe('60\n');
      execFileSync('prlimit', ['--pid', pid, '--nofile=512:512']);

      // unlinked while open: each keeps its descriptor, up to three quarters of the pool; past
      // that, the unlink is refused with EMFILE and the file stays
      expect(await a.ask('unlink')).toEqual({ unlinked: 192, errors: { EMFILE: 408 } });
      expect(fs.readdirSync(path.join(m.src, 'a')).length).toBe(408);
      // ... and nobody else notices: b's files, new files, listings
      expect(await b.ask('check')).toEqual({ bad: [], nbad: 0, errors: {} });
      expect(sh('cat b/f7 && echo new > b/new && cat b/new && ls b | wc -l', m.mnt)).toBe('b/7new\n61\n');
      const c = holder(m.mnt, 'b', 60, 'r');
      expect(await c.first).toEqual({ opened: 60, errors: {} });
      expect(await c.ask('check')).toEqual({ bad: [], nbad: 0, errors: {} });
      await c.end();
      // a's files, unlinked or not, still read and write as their own
      expect(await a.ask('write')).toEqual({ written: 30, errors: {} });
      expect(await a.ask('check')).toEqual({ bad: [], nbad: 0, errors: {} });

      const warned = (await logsMatching(m, /out of file descriptors/)).split('\n').filter((l) => l.includes('out of file descriptors'));
      expect(warned.length).toBe(1);
      expect(warned[0]).toMatch(/"level":40/);
      await a.end();
      await b.end();
      // the pinned descriptors went with the last close: the rest can go now
      sh('rm a/*', m.mnt);
      expect(fs.readdirSync(path.join(m.src, 'a'))).toEqual([]);
      expect(m.alive()).toBe(true);
      expect(m.errors()).toEqual([]);
    } finally {
      await a?.end().catch(() => undefined);
      await b?.end().catch(() => undefined);
      await m.stop();
    }
  });
});
