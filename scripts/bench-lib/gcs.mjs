// The GCS run of the bench (scripts/bench-gcs): ledgerfs and `rclone mount` on the same GCS
// emulator, plus the raw download speed of the client itself against it. Every column serves
// the same bucket; "cold" is a fresh mount (empty caches), "warm" the same command right after.
//
//   ls -l big        a directory of 10,000 objects, cold and warm          (seconds, lower is better)
//   stat tree        stat of every file of a 3,000-file tree, cold and warm (seconds)
//   seq read         cat of a large object on a fresh mount                (MB/s)
//   seq write        dd of a large file, to close (ledgerfs: durable in the bucket at close;
//                    rclone --vfs-cache-mode writes: uploaded after close)  (MB/s)
//   tar -x           of ~3,000 small files                                 (seconds)
//                    ledgerfs-journal (--durability journal): to tar's exit (every close
//                    durable in the spool), and "+ upload" to the spool's last upload; with
//                    the emulator's requests per file and the daemon's CPU seconds (all its
//                    threads, uploads included)
//   git add+commit   of the extracted tree                                 (seconds)
//   raw download     @google-cloud/storage download of the large object    (MB/s, no FUSE)
//
// Peers (--peers): ledgerfs (default durability: close = in the bucket), ledgerfs-journal
// (--durability journal), local (ledgerfs on a local directory: the bar for the journal mode),
// rclone (--vfs-cache-mode writes). --only tar,git runs just those workloads (a short run).
//
// Indented rows say what some of them cost besides wall time, which a busy machine distorts:
// emulator requests (cold ls and stat; per MiB of the sequential read) and CPU per MiB (the
// daemon's for the sequential read, the bench process's own for the raw download).
//
// The emulator runs as a child process (tracked by PID) on 127.0.0.1; mounts go through
// daemonTarget (targets.mjs), so cleanup is the same as the main bench's.
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { cleanupAllSync, daemonTarget } from './targets.mjs';
import { BenchError, cpuSeconds, fmtBytes, parseSize, prng, rotate, run, runOk, say, which } from './util.mjs';

const MB = 1e6;
const BUCKET = 'bench';

function parseArgs(argv) {
  const o = { objects: 10_000, files: 3_000, large: 1024 ** 3, rounds: 1, peers: ['ledgerfs', 'ledgerfs-journal', 'local', 'rclone'], only: undefined, keep: false, json: false, builds: {} };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = () => {
      const x = argv[++i];
      if (x === undefined) throw new BenchError(`${a} needs a value`);
      return x;
    };
    if (a === '--quick') Object.assign(o, { objects: 10_000, files: 3_000, large: 64 * 1024 ** 2 });
    else if (a === '--objects') o.objects = Number(v());
    else if (a === '--files') o.files = Number(v());
    else if (a === '--large') o.large = parseSize(v());
    else if (a === '--rounds') o.rounds = Number(v());
    else if (a === '--peers') o.peers = v().split(',');
    else if (a === '--only') o.only = v().split(',');
    else if (a === '--keep') o.keep = true;
    else if (a === '--add-peer') {
      // NAME=DIR: ledgerfs --durability journal from another build (an old commit's checkout, built), for before/after in one run
      const [name, dir] = v().split('=');
      if (!name || !dir) throw new BenchError('--add-peer wants NAME=DIR (a built ledgerfs checkout)');
      o.builds[name] = path.resolve(dir);
      o.peers.push(name);
    }
    else if (a === '--json') o.json = true;
    else if (a === '--help' || a === '-h') {
      process.stdout.write(
        'usage: scripts/bench-gcs [--quick] [--objects N] [--files N] [--large SIZE] [--rounds N] [--peers ledgerfs,ledgerfs-journal,local,rclone] [--add-peer NAME=DIR] [--only ls,stat,read,write,tar,git] [--json] [--keep]\n' +
          '  --quick: a 64 MiB large object instead of 1 GiB (sanity run)\n' +
          '  --only: just these workloads (tar -x and git add+commit: --only tar,git; git alone extracts the tree first, untimed)\n' +
          '  --add-peer NAME=DIR: one more column, ledgerfs --durability journal from the built checkout DIR (before/after in the same run)\n',
      );
      process.exit(0);
    } else throw new BenchError(`unknown argument ${a}`);
  }
  // a column named twice (--peers naming an --add-peer build) would be measured twice per round
  // into the same directory
  o.peers = [...new Set(o.peers)];
  return o;
}

async function startEmulator(repo) {
  const child = spawn(process.execPath, [path.join(repo, 'dist/dev/gcs-emulator/main.js'), '--port', '0', '--bucket', BUCKET], { stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      if (out.includes('\n')) resolve(JSON.parse(out.split('\n')[0]).url);
    });
    child.on('exit', (c) => reject(new BenchError(`emulator exited (${c})`)));
  });
  return { url, pid: child.pid, stop: () => child.kill('SIGTERM') };
}

/** Upload objects through the client, `concurrency` at a time. */
async function seed(bucket, items, concurrency = 48) {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < items.length) {
        const [name, data] = items[next++];
        await bucket.file(name).save(data, { resumable: false, validation: false });
      }
    }),
  );
}

/** a count as a row label says it: 3000 -> 3k, 500 -> 500 (rows name what was measured, --files N included) */
function countLabel(n) {
  return n >= 1000 && n % 1000 === 0 ? `${n / 1000}k` : String(n);
}

/** A ~n-file tree of small text files, locally, for tar -x and git (same shape as the main bench). */
function localTree(dir, n) {
  const words = ['ledger', 'fuse', 'node', 'write', 'read', 'stat', 'tree', 'file', 'journal', 'policy'];
  // (an LCG in doubles, x * 1103515245 past 2^53, fell into a short cycle: 41 distinct files in 3,000)
  const rnd = prng(42);
  for (let i = 0; i < n; i++) {
    const d = path.join(dir, `a${i % 6}`, `b${i % 5}`);
    fs.mkdirSync(d, { recursive: true });
    let s = '';
    const size = 64 + Math.floor(rnd() * 8128);
    while (s.length < size) s += `${words[Math.floor(rnd() * words.length)]}${Math.floor(rnd() * 1000)} `;
    fs.writeFileSync(path.join(d, `f${i}.txt`), s.slice(0, size));
  }
}

function targetsFor(o, repo, emulatorUrl, work) {
  const cli = path.join(repo, 'bin', 'ledgerfs.js');
  const all = {
    ledgerfs: daemonTarget({
      name: 'ledgerfs',
      describe: `LEDGERFS_GCS_ENDPOINT=URL node bin/ledgerfs.js mount --source gs://${BUCKET} --state DIR MNT (journal on)`,
      env: { LEDGERFS_GCS_ENDPOINT: emulatorUrl },
      argv: (_src, mnt) => [process.execPath, cli, 'mount', '--source', `gs://${BUCKET}`, '--state', path.join(work, 'state', path.basename(mnt)), mnt],
    }),
    'ledgerfs-journal': daemonTarget({
      name: 'ledgerfs-journal',
      describe: `LEDGERFS_GCS_ENDPOINT=URL node bin/ledgerfs.js mount --source gs://${BUCKET} --durability journal --state DIR MNT`,
      env: { LEDGERFS_GCS_ENDPOINT: emulatorUrl },
      argv: (_src, mnt) => [process.execPath, cli, 'mount', '--source', `gs://${BUCKET}`, '--durability', 'journal', '--state', path.join(work, 'state', path.basename(mnt)), mnt],
    }),
    local: daemonTarget({
      name: 'local',
      describe: 'node bin/ledgerfs.js mount --source DIR --state DIR MNT (local backend, journal on; no GCS)',
      argv: (_src, mnt) => {
        const dir = path.join(work, 'local-src', path.basename(mnt));
        fs.mkdirSync(dir, { recursive: true });
        return [process.execPath, cli, 'mount', '--source', dir, '--state', path.join(work, 'state', path.basename(mnt)), mnt];
      },
    }),
    rclone: daemonTarget({
      name: 'rclone',
      describe: 'rclone mount emu:bench MNT --vfs-cache-mode writes (gcs remote: endpoint = URL/storage/v1/, anonymous = true)',
      problem: () => (which('rclone') ? null : 'rclone is not installed (apt-get install -y rclone)'),
      env: { RCLONE_CONFIG_EMU_TYPE: 'gcs', RCLONE_CONFIG_EMU_ENDPOINT: `${emulatorUrl}/storage/v1/`, RCLONE_CONFIG_EMU_ANONYMOUS: 'true', RCLONE_CACHE_DIR: path.join(work, 'rclone-cache') },
      argv: (_src, mnt) => ['rclone', 'mount', `emu:${BUCKET}`, mnt, '--vfs-cache-mode', 'writes', '--config', '/dev/null'],
    }),
  };
  for (const [name, dir] of Object.entries(o.builds)) {
    all[name] = daemonTarget({
      name,
      describe: `${dir}/bin/ledgerfs.js mount --source gs://${BUCKET} --durability journal --state DIR MNT`,
      env: { LEDGERFS_GCS_ENDPOINT: emulatorUrl },
      argv: (_src, mnt) => [process.execPath, path.join(dir, 'bin', 'ledgerfs.js'), 'mount', '--source', `gs://${BUCKET}`, '--durability', 'journal', '--state', path.join(work, 'state', path.basename(mnt)), mnt],
    });
  }
  return o.peers.map((p) => {
    const t = all[p];
    if (!t) throw new BenchError(`unknown peer ${p} (${Object.keys(all).join(', ')})`);
    return t;
  });
}

async function timed(cmd, cwd) {
  const r = await runOk('bash', ['-c', cmd], { cwd, captureStdout: false });
  return r.seconds;
}

/**
 * `cmd` timed, with what it cost besides wall time (which is noisy on a busy machine): the
 * requests the emulator answered and the CPU the daemon used.
 */
async function measured(cmd, h, emuUrl) {
  const requests = async () => (await (await fetch(`${emuUrl}/_emulator/stats`)).json()).requests;
  const r0 = await requests();
  const c0 = cpuSeconds(h.pid);
  const seconds = await timed(cmd, h.path);
  return { seconds, requests: (await requests()) - r0, cpu: cpuSeconds(h.pid) - c0 };
}

/** Wait until the state directory's upload spool of a --durability journal mount is empty (read as `ledgerfs status` reads it). */
async function spoolDrained(repo, stateDir) {
  const { spoolSummary } = await import(path.join(repo, 'dist/app/upload-spool.js'));
  while (spoolSummary(stateDir).files > 0) await new Promise((r) => setTimeout(r, 100));
}

export async function mainGcs(argv) {
  const o = parseArgs(argv);
  const repo = path.resolve(import.meta.dirname, '../..');
  if (!fs.existsSync(path.join(repo, 'dist/cli/main.js'))) throw new BenchError('ledgerfs is not built: run npm run build');
  const { Storage } = await import('@google-cloud/storage');
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ledgerfs-bench-gcs-'));
  const emu = await startEmulator(repo);
  const onExit = () => {
    cleanupAllSync();
    emu.stop();
  };
  process.once('SIGINT', () => (onExit(), process.exit(130)));
  process.once('SIGTERM', () => (onExit(), process.exit(143)));
  const results = {}; // workload -> target -> [values]
  const add = (w, t, v) => ((results[w] ??= {})[t] ??= []).push(v);
  const nFiles = countLabel(o.files), nObj = countLabel(o.objects);
  try {
    const want = (w) => !o.only || o.only.includes(w);
    const seeding = want('ls') || want('stat') || want('read');
    const storage = new Storage({ apiEndpoint: emu.url, projectId: 'bench', retryOptions: { autoRetry: false } });
    const bucket = storage.bucket(BUCKET);
    if (seeding) say(`gcs bench: emulator ${emu.url}; seeding ${o.objects} objects, a ${o.files}-file tree and a ${fmtBytes(o.large)} object`);
    const small = Buffer.from('x'.repeat(100));
    const items = [];
    for (let i = 0; i < o.objects; i++) items.push([`big/f${String(i).padStart(5, '0')}`, small]);
    for (let i = 0; i < o.files; i++) items.push([`tree/d${i % 30}/s${i % 7}/f${i}`, small]);
    if (seeding) await seed(bucket, items);
    const large = path.join(work, 'large.bin');
    fs.writeFileSync(large, crypto.randomBytes(Math.min(o.large, 64 * 1024 ** 2)));
    while (fs.statSync(large).size < o.large) fs.appendFileSync(large, fs.readFileSync(large).subarray(0, Math.min(o.large - fs.statSync(large).size, 64 * 1024 ** 2)));
    if (seeding) await bucket.upload(large, { destination: 'large.bin', resumable: true, validation: false });
    const tarDir = path.join(work, 'tarsrc');
    localTree(tarDir, o.files);
    const tarball = path.join(work, 'tree.tar');
    await runOk('tar', ['-cf', tarball, '-C', tarDir, '.']);

    for (let round = 1; round <= o.rounds; round++) {
      // raw client download speed: the ceiling for sequential reads
      if (want('read')) {
      const t0 = process.hrtime.bigint();
      const c0 = process.cpuUsage();
      await new Promise((res, rej) => bucket.file('large.bin').createReadStream({ validation: false }).on('error', rej).on('end', res).resume());
      add('raw download (MB/s)', 'client', o.large / MB / (Number(process.hrtime.bigint() - t0) / 1e9));
      const c1 = process.cpuUsage(c0);
      add('  raw download CPU ms/MiB', 'client', (c1.user + c1.system) / 1000 / (o.large / 2 ** 20));
      }

      // a different peer first each round (rotate): the first one measured slower than the rest
      for (const t of rotate(targetsFor(o, repo, emu.url, work), round - 1)) {
        const why = t.problem();
        if (why) {
          say(`  ${t.name}: skipped: ${why}`);
          continue;
        }
        // what the column before left for the disk (its dirty pages, the files its cache removed
        // at unmount) is written now, not in this column's timed part. Without it, a build that
        // followed one writing 3,000 content-cache files in 2 of 3 rounds measured slower than
        // it in 3 runs of 3, and faster (9.4 vs 11.3 s) when each followed the other alike
        await runOk('sync', [], { captureStdout: false });
        const mnt = path.join(work, 'mnt', `${t.name}-${round}`);
        // the listing and stat workloads read the seeded bucket: not the local peer's
        let h = (want('ls') || want('stat')) && t.name !== 'local' ? await t.mount('', mnt, work) : undefined;
        if (h) try {
          const ls = await measured('ls -l big > /dev/null', h, emu.url);
          add(`ls -l ${nObj} cold (s)`, t.name, ls.seconds);
          add(`ls -l ${nObj} warm (s)`, t.name, await timed('ls -l big > /dev/null', h.path));
          const st = await measured('find tree -type f -exec stat -c %s {} + > /dev/null', h, emu.url);
          add(`stat ${nFiles} tree cold (s)`, t.name, st.seconds);
          add(`stat ${nFiles} tree warm (s)`, t.name, await timed('find tree -type f -exec stat -c %s {} + > /dev/null', h.path));
          add(`  ls -l ${nObj} cold requests`, t.name, ls.requests);
          add(`  stat ${nFiles} cold requests`, t.name, st.requests);
        } finally {
          await h.stop();
        }
        h = await t.mount('', mnt + 'b', work);
        const tag = `${t.name}-${round}`; // every column writes into the same bucket
        try {
          if (want('read') && t.name !== 'local') {
          const rd = await measured('cat large.bin > /dev/null', h, emu.url);
          add('seq read (MB/s)', t.name, o.large / MB / rd.seconds);
          add('  seq read requests/MiB', t.name, rd.requests / (o.large / 2 ** 20));
          add('  seq read CPU ms/MiB', t.name, (rd.cpu * 1000) / (o.large / 2 ** 20));
          }
          if (want('write')) add('seq write to close (MB/s)', t.name, o.large / MB / (await timed(`dd if=${large} of=w-${tag}.bin bs=1M status=none`, h.path)));
          const journal = t.name === 'ledgerfs-journal' || t.name in o.builds;
          const stateDir = path.join(work, 'state', path.basename(mnt + 'b'));
          if (!want('tar') && want('git')) await timed(`mkdir x-${tag} && tar -xf ${tarball} -C x-${tag}`, h.path); // the tree git commits, untimed
          if (journal) await spoolDrained(repo, stateDir);
          if (want('tar')) {
            const reqs = async () => (await (await fetch(`${emu.url}/_emulator/stats`)).json()).requests;
            const q0 = await reqs();
            const c0 = cpuSeconds(h.pid);
            const seconds = await timed(`mkdir x-${tag} && tar -xf ${tarball} -C x-${tag}`, h.path);
            add(`tar -x ${nFiles} (s)`, t.name, seconds);
            if (journal) {
              const t0 = Date.now();
              await spoolDrained(repo, stateDir);
              add(`  tar -x ${nFiles} + upload (s)`, t.name, seconds + (Date.now() - t0) / 1000);
            }
            // the daemon's CPU (every thread) for the files and, in journal mode, their uploads:
            // on a 2-core host it is what the wall time of the workload is made of
            if (h.pid) add('  tar -x daemon CPU (s)', t.name, cpuSeconds(h.pid) - c0);
            // the journal's mirror uploads count too (a part a second)
            if (t.name !== 'local' && t.name !== 'rclone') add('  tar -x requests/file', t.name, ((await reqs()) - q0) / o.files);
          }
          if (want('git')) {
            if (journal) await spoolDrained(repo, stateDir);
            const reqs = async () => (await (await fetch(`${emu.url}/_emulator/stats`)).json()).requests;
            const q0 = await reqs();
            const seconds = await timed(`cd x-${tag} && git init -q && git add -A && git -c user.name=b -c user.email=b@b commit -qm bench`, h.path);
            add(`git add+commit ${nFiles} (s)`, t.name, seconds);
            if (journal) {
              const t0 = Date.now();
              await spoolDrained(repo, stateDir);
              add('  git add+commit + upload (s)', t.name, seconds + (Date.now() - t0) / 1000);
            }
            if (t.name !== 'local' && t.name !== 'rclone') add('  git requests/file', t.name, ((await reqs()) - q0) / o.files);
          }
        } finally {
          await h.stop();
        }
      }
    }
  } finally {
    onExit();
    if (!o.keep) fs.rmSync(work, { recursive: true, force: true });
  }
  const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
  const rows = Object.entries(results).map(([w, byT]) => ({ workload: w, ...Object.fromEntries(Object.entries(byT).map(([t, v]) => [t, med(v)])) }));
  const spread = Object.entries(results).map(([w, byT]) => ({ workload: w, ...Object.fromEntries(Object.entries(byT).map(([t, v]) => [t, [...v].sort((a, b) => a - b)])) }));
  if (o.json) process.stdout.write(JSON.stringify({ config: o, results: rows, rounds: spread }, null, 2) + '\n');
  const fmt = (v) => (v === undefined ? '-' : v >= 100 ? v.toFixed(0) : v.toFixed(3));
  const cols = [...o.peers];
  const lines = rows.map((r) => {
    const first = r[cols[0]] ?? r.client;
    return `${r.workload.padEnd(28)} ${[fmt(first), ...cols.slice(1).map((c) => fmt(r[c]))].map((x) => x.padStart(16)).join(' ')}`;
  });
  process.stderr.write(`\n${'workload'.padEnd(28)} ${cols.map((c) => c.padStart(16)).join(' ')}  (median of ${o.rounds} round(s), interleaved per round)\n${lines.join('\n')}\n`);
  if (o.rounds > 1) {
    // every round's value, low to high: the spread a busy machine puts on the medians
    const each = spread.map((r) => `${r.workload.padEnd(28)} ${cols.map((c) => (r[c] ? r[c].map((x) => fmt(x)).join('/') : '-').padStart(16)).join(' ')}`);
    process.stderr.write(`\n${'rounds (low..high)'.padEnd(28)} ${cols.map((c) => c.padStart(16)).join(' ')}\n${each.join('\n')}\n`);
  }
  const raw = results['raw download (MB/s)']?.client;
  const read = results['seq read (MB/s)']?.ledgerfs;
  if (raw && read) process.stderr.write(`ledgerfs sequential read / raw client download: ${(med(read) / med(raw)).toFixed(2)}\n`);
  return 0;
}
