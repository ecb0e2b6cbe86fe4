// The rows of the bench. Every target mirrors the SAME source directory (ctx.src), so inputs are
// prepared once; everything a round writes gets a name unique to (workload, target, round).
//
// Small files that rounds create are NOT deleted until the whole run ends (the work directory is
// removed then). On a journal-less ext4 (this VM's root fs) the inode allocator skips inodes
// deleted in the last 60-300 s (ext4 recently_deleted()); after an rm -rf of a few thousand files
// every create scans past them, and plain-directory creates dropped from ~30,000 to ~1,500
// files/s in testing, with the kernel time charged to whichever process created the files.
// Deleting between rounds made every round after the first measure that, not the file system.
//
// A workload is:
//   name, title, unit, better ('higher'|'lower'), bar (minimum subject/bindfs ratio, or null)
//   mountPerRound  mount each target fresh for every round (uncached metadata)
//   minRounds      at least this many measured rounds (short rows), except with --quick
//   warmup         run one discarded round per target first
//   prepare(ctx)               shared inputs, once (untimed)
//   beforeMount(ctx, t)        per round, before the mount (mountPerRound only), untimed
//   measure(ctx, t, mnt, tag, clock) -> { value, seconds, extra? }   the timed part; the
//                              daemon's CPU is counted over measure(), or between
//                              clock.start() and clock.stop() when it calls them
//   afterRound(ctx, t, mnt, tag)  clean up what the round made (untimed)
//   cleanup(ctx)               remove shared inputs that are no longer needed
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { BenchError, dropCaches, prng, readThrough, rmrf, run, runOk } from './util.mjs';

const MiB = 1024 * 1024;
const FSLOOP = path.join(import.meta.dirname, 'fsloop.mjs');

async function fsloop(ctx, args) {
  const r = await runOk(process.execPath, [FSLOOP, ...args]);
  const line = r.stdout.trim().split('\n').at(-1);
  try {
    return JSON.parse(line);
  } catch {
    throw new BenchError(`fsloop ${args[0]}: unexpected output ${JSON.stringify(r.stdout)}`);
  }
}

// ---- shared inputs -----------------------------------------------------------------------------

/**
 * ctx.src/tree: ~cfg.files small files (64 B .. 8 KiB, text-like so git compresses them as it
 * would source code) in 6 x 5 directories, two levels deep. Also writes the list of files.
 */
export function ensureTree(ctx) {
  if (ctx.shared.tree) return ctx.shared.tree;
  const root = path.join(ctx.src, 'tree');
  const perDir = Math.max(1, Math.ceil(ctx.cfg.files / 30));
  const rnd = prng(42);
  const words = ['ledger', 'fuse', 'node', 'write', 'read', 'stat', 'tree', 'file', 'journal', 'policy', 'mount', 'bench'];
  const rel = [];
  let n = 0;
  for (let a = 0; a < 6; a++) {
    for (let b = 0; b < 5; b++) {
      const dir = `tree/a${a}/b${b}`;
      fs.mkdirSync(path.join(ctx.src, dir), { recursive: true });
      for (let i = 0; i < perDir && n < ctx.cfg.files; i++, n++) {
        const size = 64 + Math.floor(rnd() * 8128);
        let s = '';
        while (s.length < size) s += `${words[Math.floor(rnd() * words.length)]}${Math.floor(rnd() * 1000)} ${rnd() < 0.1 ? '\n' : ''}`;
        const f = `${dir}/f${String(i).padStart(4, '0')}.txt`;
        fs.writeFileSync(path.join(ctx.src, f), s.slice(0, size));
        rel.push(f);
      }
    }
  }
  const listFile = path.join(ctx.work, 'tree.list');
  fs.writeFileSync(listFile, `${rel.join('\n')}\n`);
  ctx.shared.tree = { root, listFile, files: rel.length, dirs: 36 };
  return ctx.shared.tree;
}

export async function ensureTarball(ctx) {
  if (ctx.shared.tarball) return ctx.shared.tarball;
  ensureTree(ctx);
  const tb = path.join(ctx.work, 'tree.tar');
  await runOk('tar', ['-cf', tb, '-C', ctx.src, 'tree']);
  ctx.shared.tarball = tb;
  return tb;
}

/** A file of `bytes` incompressible bytes, written through the plain path and fsynced. */
function ensureDataFile(ctx, name, bytes) {
  const p = path.join(ctx.src, name);
  if (ctx.shared[name] === p) return p;
  const block = crypto.randomBytes(MiB);
  const fd = fs.openSync(p, 'w');
  try {
    for (let off = 0; off < bytes; off += MiB) {
      block.writeUInt32LE(off / MiB, 0); // no two blocks alike
      fs.writeSync(fd, block, 0, Math.min(MiB, bytes - off), off);
    }
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  ctx.shared[name] = p;
  return p;
}

function statWarmBacking(ctx) {
  // The backing file system's dentries/inodes warm, so a fresh FUSE mount measures FUSE's own
  // lookup cost, not the disk.
  const tree = ensureTree(ctx);
  for (const f of fs.readFileSync(tree.listFile, 'utf8').split('\n')) if (f) fs.statSync(path.join(ctx.src, f));
}

const tagName = (w, t, tag) => `${w}-${t.name}-${tag}`;

// ---- workloads ---------------------------------------------------------------------------------

export const WORKLOADS = [
  {
    name: 'stat-uncached',
    minRounds: 5,
    title: 'stat every file, fresh mount (backing fs warm)',
    unit: 'ops/s',
    better: 'higher',
    bar: 0.4,
    mountPerRound: true,
    prepare: ensureTree,
    beforeMount: statWarmBacking,
    async measure(ctx, _t, mnt) {
      const tree = ensureTree(ctx);
      const r = await fsloop(ctx, ['stat', mnt, tree.listFile]);
      return { value: r.ops / r.seconds, seconds: r.seconds, extra: { files: r.ops } };
    },
  },
  {
    name: 'stat-cold',
    minRounds: 5,
    title: 'stat every file, drop_caches + fresh mount',
    unit: 'ops/s',
    better: 'higher',
    bar: null,
    mountPerRound: true,
    prepare: ensureTree,
    beforeMount: () => dropCaches(),
    async measure(ctx, _t, mnt) {
      const tree = ensureTree(ctx);
      const r = await fsloop(ctx, ['stat', mnt, tree.listFile]);
      return { value: r.ops / r.seconds, seconds: r.seconds, extra: { files: r.ops } };
    },
  },
  {
    name: 'stat-cached',
    title: 'stat every file again within the attr timeout',
    unit: 'ops/s',
    better: 'higher',
    bar: 0.8,
    prepare: ensureTree,
    async measure(ctx, _t, mnt) {
      const tree = ensureTree(ctx);
      const r = await fsloop(ctx, ['stat-cached', mnt, tree.listFile, '300']);
      return {
        value: r.ops / r.seconds,
        seconds: r.seconds,
        extra: { files: r.ops, warmPassSeconds: r.warmSeconds, timedPasses: r.passes, minPass: r.minPass, maxPass: r.maxPass },
      };
    },
  },
  {
    name: 'create-4k',
    title: 'create + write 4 KiB + close, one process',
    unit: 'files/s',
    better: 'higher',
    bar: 0.4,
    warmup: true,
    async measure(ctx, t, mnt, tag) {
      const dir = path.join(mnt, tagName('create', t, tag));
      fs.mkdirSync(dir);
      const r = await fsloop(ctx, ['create', dir, String(ctx.cfg.createFiles), '4096']);
      return { value: r.ops / r.seconds, seconds: r.seconds, extra: { files: r.ops } };
    },
  },
  {
    name: 'seq-write',
    title: 'dd if=/dev/zero bs=1M conv=fsync (SIZE)',
    unit: 'MB/s',
    better: 'higher',
    bar: 0.8,
    async measure(ctx, t, mnt, tag, clock) {
      const f = path.join(mnt, `${tagName('seqw', t, tag)}.dat`);
      await runOk('sync', []);
      clock.start();
      const r = await runOk('dd', ['if=/dev/zero', `of=${f}`, 'bs=1M', `count=${ctx.cfg.size / MiB}`, 'conv=fsync', 'status=none']);
      return { value: ctx.cfg.size / r.seconds / 1e6, seconds: r.seconds };
    },
    async afterRound(ctx, t, _mnt, tag) {
      rmrf(path.join(ctx.src, `${tagName('seqw', t, tag)}.dat`));
      await runOk('sync', []);
    },
  },
  {
    name: 'seq-read',
    title: 'dd of=/dev/null bs=1M after drop_caches (SIZE)',
    unit: 'MB/s',
    better: 'higher',
    bar: 0.8,
    prepare: (ctx) => ensureDataFile(ctx, 'seqread.dat', ctx.cfg.size),
    async measure(ctx, _t, mnt, _tag, clock) {
      const f = path.join(mnt, 'seqread.dat');
      dropCaches();
      clock.start();
      const r = await runOk('dd', [`if=${f}`, 'of=/dev/null', 'bs=1M', 'status=none']);
      return { value: ctx.cfg.size / r.seconds / 1e6, seconds: r.seconds };
    },
    cleanup: (ctx) => {
      rmrf(path.join(ctx.src, 'seqread.dat'));
      delete ctx.shared['seqread.dat'];
    },
  },
  {
    name: 'rand-read-4k',
    title: 'fio randread 4k psync, each block once (RANDSIZE); backing fs warm, FUSE cache cold',
    unit: 'IOPS',
    better: 'higher',
    bar: null,
    prepare: (ctx) => ensureDataFile(ctx, 'randread.dat', ctx.cfg.randSize),
    async measure(ctx, t, mnt, tag, clock) {
      const backing = ensureDataFile(ctx, 'randread.dat', ctx.cfg.randSize);
      readThrough(backing); // backing pages cached: measure the FUSE path, not the disk
      clock.start();
      const out = path.join(ctx.work, `${tagName('fio', t, tag)}.json`);
      // direct=0: FUSE without direct_io serves reads through its page cache. --invalidate=1
      // drops that cache for the FUSE file (it also would for the plain file, so plain keeps
      // its warm cache: the limit). fio's default fadvise_hint=1 sets POSIX_FADV_RANDOM, so no
      // readahead: every 4 KiB read misses and becomes one 4 KiB FUSE READ. io_size=size with
      // fio's random map reads every block once, never a cached one twice.
      const args = [
        '--name=rr', `--filename=${path.join(mnt, 'randread.dat')}`, '--rw=randread', '--bs=4k',
        `--size=${ctx.cfg.randSize}`, `--io_size=${ctx.cfg.randSize}`, `--runtime=${ctx.cfg.fioRuntime}`,
        '--ioengine=psync', '--direct=0', `--invalidate=${t.fuse ? 1 : 0}`,
        '--output-format=json', `--output=${out}`,
      ];
      const r = await runOk('fio', args);
      clock.stop();
      const j = JSON.parse(fs.readFileSync(out, 'utf8'));
      fs.rmSync(out, { force: true });
      const rd = j.jobs[0].read;
      return {
        value: rd.iops,
        seconds: r.seconds,
        extra: { ios: rd.total_ios, meanLatencyUs: rd.clat_ns ? rd.clat_ns.mean / 1000 : null },
      };
    },
    cleanup: (ctx) => {
      rmrf(path.join(ctx.src, 'randread.dat'));
      delete ctx.shared['randread.dat'];
    },
  },
  {
    name: 'tar-x',
    title: 'tar -xf of the tree (FILES files)',
    unit: 's',
    better: 'lower',
    bar: 0.4,
    warmup: true,
    prepare: ensureTarball,
    async measure(ctx, t, mnt, tag) {
      const dir = path.join(mnt, tagName('tar', t, tag));
      fs.mkdirSync(dir);
      const r = await runOk('tar', ['-xf', ctx.shared.tarball, '-C', dir]);
      return { value: r.seconds, seconds: r.seconds };
    },
  },
  {
    name: 'git-commit',
    title: 'git add -A && git commit of the tree (fresh repo)',
    unit: 's',
    better: 'lower',
    bar: 0.4,
    warmup: true,
    prepare: ensureTarball,
    async measure(ctx, t, mnt, tag, clock) {
      const name = tagName('git', t, tag);
      // Untimed setup: the tree lands in the backing directory directly, the repo is initialised
      // through the mount; the timed part is add + commit through the mount.
      fs.mkdirSync(path.join(ctx.src, name));
      await runOk('tar', ['-xf', ctx.shared.tarball, '-C', path.join(ctx.src, name)]);
      const dir = path.join(mnt, name);
      const env = {
        ...process.env, HOME: ctx.home, GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null',
        GIT_AUTHOR_DATE: '2025-01-01T00:00:00Z', GIT_COMMITTER_DATE: '2025-01-01T00:00:00Z',
      };
      const git = ['-c', 'user.name=ledgerfs bench', '-c', 'user.email=bench@example.invalid', '-c', 'gc.auto=0', '-c', 'commit.gpgSign=false'];
      await runOk('git', [...git, 'init', '-q', dir], { env });
      clock.start();
      const add = await runOk('git', [...git, 'add', '-A'], { cwd: dir, env });
      const commit = await runOk('git', [...git, 'commit', '-q', '-m', 'bench'], { cwd: dir, env });
      clock.stop();
      const s = add.seconds + commit.seconds;
      return { value: s, seconds: s, extra: { addSeconds: add.seconds, commitSeconds: commit.seconds } };
    },
  },
];

/** A workload's title with the sizes of this run filled in. */
export function titleOf(w, cfg) {
  return w.title
    .replace('RANDSIZE', `${cfg.randSize / MiB} MiB`)
    .replace('SIZE', `${cfg.size / MiB} MiB`)
    .replace('FILES', String(cfg.files));
}

/** Used by --help: the workload names and what they measure. */
export function describeWorkloads(cfg) {
  return WORKLOADS.map((w) => `  ${w.name.padEnd(14)} ${titleOf(w, cfg)} [${w.unit}]${w.bar ? `, bar >= ${w.bar} x bindfs` : ''}`).join('\n');
}

export { run };
