// scripts/bench: orchestration, CLI and report. See the header of scripts/bench for usage.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { FuseOpsTracer, fmtOps } from './fuseops.mjs';
import { NO_LOAD, killAllLoadSync, startBackgroundLoad } from './load.mjs';
import { cleanupAllSync, liveMounts, makeTargets } from './targets.mjs';
import {
  BenchError, canDropCaches, cpuSeconds, fmtBytes, median, mountAt, mountPoints, parseSize, rmrf, rotate, runOk, say, setQuiet, waitQuiet, warn, which,
} from './util.mjs';
import { WORKLOADS, describeWorkloads, titleOf } from './workloads.mjs';

const REPO = path.resolve(import.meta.dirname, '..', '..');
const MiB = 1024 * 1024;

const FULL = { size: '1G', randSize: '256M', files: 3000, createFiles: 2000, rounds: 3, fioRuntime: 10 };
const QUICK = { size: '128M', randSize: '32M', files: 600, createFiles: 400, rounds: 1, fioRuntime: 3 };

const OPTIONS = {
  help: { type: 'boolean', short: 'h' },
  json: { type: 'boolean' },
  quick: { type: 'boolean' },
  only: { type: 'string' },
  skip: { type: 'string' },
  peers: { type: 'string' },
  subject: { type: 'string' },
  size: { type: 'string' },
  'rand-size': { type: 'string' },
  files: { type: 'string' },
  'create-files': { type: 'string' },
  rounds: { type: 'string' },
  'quiet-wait': { type: 'string' },
  'busy-threshold': { type: 'string' },
  'fio-runtime': { type: 'string' },
  'no-warmup': { type: 'boolean' },
  dir: { type: 'string' },
  keep: { type: 'boolean' },
  'ledgerfs-args': { type: 'string' },
  'bindfs-args': { type: 'string' },
  'add-peer': { type: 'string', multiple: true },
  quiet: { type: 'boolean', short: 'q' },
  'fuse-ops': { type: 'boolean' },
  'background-load': { type: 'string' },
};

function usage() {
  const cfg = { size: parseSize(FULL.size), randSize: parseSize(FULL.randSize), files: FULL.files };
  return `Usage: scripts/bench [options]

Measures the same workloads on the plain source directory (the limit), bindfs (a C FUSE peer on
libfuse2), libfuse3's passthrough example (C, compiled here from libfuse3-dev's sources), ledgerfs
(its default binding: native-ll on a local workspace) and ledgerfs-fuse-native (the libfuse2
fallback, --binding fuse-native), in one run on this machine; prints medians and ratios.

Ratios are SUBJECT/PEER (subject: ledgerfs) and always "bigger is better": > 1 means ledgerfs is
faster; for times (unit s) the ratio is peer_time / ledgerfs_time.

Workloads (--only / --skip take these names, comma-separated):
${describeWorkloads(cfg)}

Options:
  --quick               smoke run: --size ${QUICK.size} --rand-size ${QUICK.randSize} --files ${QUICK.files} --create-files ${QUICK.createFiles} --rounds ${QUICK.rounds} --fio-runtime ${QUICK.fioRuntime}
  --size SIZE           sequential read/write size (default ${FULL.size}; multiple of 1M)
  --rand-size SIZE      file for the 4 KiB random reads (default ${FULL.randSize})
  --files N             files in the stat/tar/git tree (default ${FULL.files})
  --create-files N      files per create-4k round (default ${FULL.createFiles})
  --rounds N            measured rounds per workload and peer, median reported (default ${FULL.rounds})
  --fio-runtime SEC     cap on each fio round (default ${FULL.fioRuntime})
  --no-warmup           skip the discarded warm-up rounds
  --background-load N   keep N cores busy with other processes during every round, for
                        every column alike (default 0): N child processes, each spinning on a
                        core at nice 0 like a real neighbour, started after the quiet wait and
                        before the round's timed part, killed by PID after it. Agent hosts are
                        busy: a daemon that wins on an idle machine can lose when its busy-poll,
                        its wake-ups and the caller must share what is left. The report says the
                        load was on (column 'spin': cores the spinners got, median of the rounds;
                        less than N means the daemon, the workload or other work took CPU from
                        them). N >= the CPU count leaves no idle core at all.
  --quiet-wait SEC      before each round, wait up to SEC (default 15) while other processes keep
                        more than --busy-threshold cores (default 0.25) busy; the busy level
                        seen is recorded per round (column 'bg' = worst of the row)
  --only LIST           run only these workloads
  --skip LIST           run all but these workloads
  --peers LIST          columns to measure, in order (default: plain,bindfs,libfuse3,ledgerfs,ledgerfs-fuse-native)
  --subject NAME        the column the ratios are about (default: ledgerfs)
  --ledgerfs-args "…"   extra flags for 'ledgerfs mount' (e.g. "--attr-timeout 10")
  --bindfs-args "…"     extra flags for bindfs (e.g. "-o big_writes" or "--multithreaded")
  --add-peer NAME=CMD   another FUSE daemon as a column; CMD stays in the foreground and uses
                        {src} and {mnt}, e.g.
                        --add-peer 'passthrough_ll=/usr/local/bin/passthrough_ll -f -o source={src} {mnt}'
                        {state} is a fresh directory in the work dir (for ledgerfs --state);
                        repeatable; the name is then usable in --peers
  Built-in but not in the default --peers: ledgerfs-nojournal (mount --no-journal),
  ledgerfs-native-ll (--binding native-ll, named explicitly), libfuse3-ll (libfuse3's
  passthrough_ll example).
  --dir DIR             where to make the work directory (default ${os.tmpdir()}); it needs free
                        space for about 2 x --size + --rand-size
  --keep                keep the work directory (trees, daemon logs) at the end
  --json                machine-readable results on stdout (the table goes to stderr)
  --fuse-ops            also count the FUSE requests of every round by opcode (kernel tracepoint
                        fuse:fuse_request_send, Linux >= 6.14; mounts tracefs if needed), with
                        READ/WRITE sizes and errors, and daemon CPU per request
  -q, --quiet           no per-round progress on stderr
  -h, --help            this text

Needs: root (FUSE mounts, drop_caches), /dev/fuse, node >= 20, a built ledgerfs (npm run build),
and the Debian packages bindfs fio git tar coreutils fuse3.

Examples:
  scripts/bench                              full run, table on stderr
  scripts/bench --quick                      smoke run (about a minute)
  scripts/bench --only stat-uncached,create-4k --rounds 5
  scripts/bench --json > bench.json
  scripts/bench --peers bindfs,ledgerfs --ledgerfs-args "--attr-timeout 10 --entry-timeout 10"
`;
}

function intOpt(v, name, min = 1) {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new BenchError(`--${name} wants an integer >= ${min}, got ${JSON.stringify(v)}`);
  return n;
}

function list(v) {
  return v ? v.split(',').map((s) => s.trim()).filter(Boolean) : null;
}

function config(v) {
  const base = v.quick ? QUICK : FULL;
  const cfg = {
    size: parseSize(v.size ?? base.size),
    randSize: parseSize(v['rand-size'] ?? base.randSize),
    files: intOpt(v.files ?? base.files, 'files'),
    createFiles: intOpt(v['create-files'] ?? base.createFiles, 'create-files'),
    rounds: intOpt(v.rounds ?? base.rounds, 'rounds'),
    fioRuntime: intOpt(v['fio-runtime'] ?? base.fioRuntime, 'fio-runtime'),
    warmup: !v['no-warmup'],
    quietWait: Number(v['quiet-wait'] ?? 15),
    busyThreshold: Number(v['busy-threshold'] ?? 0.25),
    quick: !!v.quick,
    backgroundLoad: intOpt(v['background-load'] ?? 0, 'background-load', 0),
  };
  if (cfg.size % MiB) throw new BenchError(`--size must be a multiple of 1M, got ${fmtBytes(cfg.size)}`);
  if (cfg.randSize % 4096) throw new BenchError('--rand-size must be a multiple of 4K');
  return cfg;
}

function toolVersion(cmd, args, re = /.*/) {
  try {
    const out = execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    return (re.exec(out.trim()) ?? [out.trim()])[0].split('\n')[0];
  } catch {
    return null;
  }
}

function newestMtime(dir) {
  let newest = 0;
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else newest = Math.max(newest, fs.statSync(p).mtimeMs);
    }
  };
  try {
    walk(dir);
  } catch {
    /* missing */
  }
  return newest;
}

function machineInfo() {
  const cpus = os.cpus();
  let gitRev = null;
  try {
    gitRev = execFileSync('git', ['-C', REPO, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    const dirty = execFileSync('git', ['-C', REPO, 'status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    if (dirty) gitRev += '+dirty';
  } catch {
    /* not a checkout */
  }
  return {
    host: os.hostname(),
    kernel: os.release(),
    cpus: cpus.length,
    cpuModel: cpus[0]?.model ?? null,
    memGiB: +(os.totalmem() / 1024 ** 3).toFixed(1),
    node: process.version,
    bindfs: toolVersion('bindfs', ['--version']),
    fio: toolVersion('fio', ['--version']),
    git: toolVersion('git', ['--version']),
    ledgerfs: gitRev,
  };
}

function loadNow() {
  return os.loadavg().map((x) => +x.toFixed(2));
}

// ---- running -----------------------------------------------------------------------------------

function fmtValue(v, unit) {
  if (v === null || v === undefined || Number.isNaN(v)) return '-';
  if (unit === 's') return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
  if (v >= 1000) return Math.round(v).toLocaleString('en-US');
  if (v >= 100) return v.toFixed(0);
  return v.toPrecision(3);
}

async function runWorkload(w, targets, ctx) {
  const load = loadNow();
  say(`\n[${w.name}] ${titleOf(w, ctx.cfg)} — load ${load.join(' ')}`);
  const rec = new Map(targets.map((t) => [t.name, { values: [], seconds: [], daemonCpu: [], background: [], spin: [], fuseOps: [], extra: [], error: null, mountOptions: null }]));
  const held = new Map();
  const failed = new Set();
  const fail = async (t, err) => {
    failed.add(t.name);
    rec.get(t.name).error = err.message;
    say(`  ${w.name} ${t.name}: FAILED: ${err.message.split('\n').slice(0, 6).join('\n    ')}`);
    const h = held.get(t.name);
    if (h) {
      held.delete(t.name);
      await h.stop().catch(() => undefined);
    }
  };
  const mntOf = (t) => path.join(ctx.work, 'mnt', t.name);
  try {
    await w.prepare?.(ctx);
    if (!w.mountPerRound) {
      for (const t of targets) {
        try {
          const h = await t.mount(ctx.src, mntOf(t), ctx.logs);
          held.set(t.name, h);
          rec.get(t.name).mountOptions = h.mountOptions ?? null;
        } catch (err) {
          await fail(t, err);
        }
      }
    }
    // Cheap, short rows (a stat pass is ~0.1 s) get at least minRounds: one hiccup moves them a lot.
    const rounds = ctx.cfg.quick ? ctx.cfg.rounds : Math.max(ctx.cfg.rounds, w.minRounds ?? 0);
    const tags = [...(w.warmup && ctx.cfg.warmup ? ['warmup'] : []), ...Array.from({ length: rounds }, (_, i) => `r${i + 1}`)];
    for (let i = 0; i < tags.length; i++) {
      const tag = tags[i];
      for (const t of rotate(targets, i)) {
        if (failed.has(t.name)) continue;
        let h = held.get(t.name);
        try {
          if (w.mountPerRound) {
            await w.beforeMount?.(ctx, t);
            h = await t.mount(ctx.src, mntOf(t), ctx.logs);
            held.set(t.name, h);
            rec.get(t.name).mountOptions ??= h.mountOptions ?? null;
          }
          // Daemon CPU over the timed part: measure() may narrow the window with clock.start()/stop().
          // --fuse-ops counts requests over the same window.
          const pid = h.pid;
          const tracer = t.fuse ? ctx.tracer : null;
          const mntPath = h.path;
          const clock = {
            c0: null, c1: null, ops: null,
            start() {
              if (tracer) tracer.start(mntPath);
              this.c0 = cpuSeconds(pid);
              this.c1 = null;
            },
            stop() {
              this.c1 = cpuSeconds(pid);
              if (tracer) this.ops = tracer.stop();
            },
          };
          // Start every round with no dirty data pending, so the previous round's (or anyone
          // else's) writeback does not compete with this one for the disk.
          await runOk('sync', []);
          const bg = await waitQuiet(ctx.cfg.busyThreshold, ctx.cfg.quietWait, `${w.name} ${t.name} ${tag}`);
          // after the quiet wait (which would otherwise wait for our own load to go away)
          const load = ctx.cfg.backgroundLoad ? await startBackgroundLoad(ctx.cfg.backgroundLoad) : NO_LOAD;
          let m;
          let spin;
          try {
            clock.start();
            try {
              m = await w.measure(ctx, t, h.path, tag, clock);
            } finally {
              if (clock.c1 === null) clock.stop();
            }
            spin = load.usage();
          } finally {
            await load.stop();
          }
          const cpu = clock.c0 !== null && clock.c1 !== null ? clock.c1 - clock.c0 : null;
          if (tag !== 'warmup') {
            const r = rec.get(t.name);
            r.values.push(m.value);
            r.seconds.push(m.seconds);
            r.daemonCpu.push(cpu);
            r.background.push(+bg.toFixed(2));
            if (load.n) r.spin.push(+spin.busyCores.toFixed(2));
            if (clock.ops) r.fuseOps.push(clock.ops);
            r.extra.push(m.extra ?? null);
          }
          say(`  ${w.name.padEnd(13)} ${t.name.padEnd(10)} ${tag.padEnd(6)} ${fmtValue(m.value, w.unit).padStart(10)} ${w.unit}` +
            `${cpu !== null ? `   daemon cpu ${cpu.toFixed(2)} s over ${m.seconds.toFixed(2)} s` : ''}` +
            `${load.n ? `   load got ${spin.busyCores.toFixed(2)} of ${load.n} cores` : ''}`);
          await w.afterRound?.(ctx, t, h.path, tag);
        } catch (err) {
          await fail(t, err);
        } finally {
          if (w.mountPerRound && held.has(t.name)) {
            await held.get(t.name).stop();
            held.delete(t.name);
          }
        }
      }
    }
  } finally {
    for (const h of held.values()) await h.stop().catch(() => undefined);
    held.clear();
    await w.cleanup?.(ctx);
  }
  return summarize(w, targets, rec, ctx, load);
}

function summarize(w, targets, rec, ctx, load) {
  const per = {};
  for (const t of targets) {
    const r = rec.get(t.name);
    const med = r.values.length ? median(r.values) : null;
    const spread = r.values.length > 1 ? (Math.max(...r.values) - Math.min(...r.values)) / 2 / med : 0;
    const cpus = r.daemonCpu.filter((x) => x !== null);
    per[t.name] = {
      median: med,
      rounds: r.values,
      spread: med ? +spread.toFixed(4) : null,
      seconds: r.seconds,
      daemonCpuSeconds: cpus.length ? median(cpus) : null,
      backgroundBusyCores: r.background,
      backgroundLoadCores: r.spin.length ? r.spin : undefined,
      fuseOps: r.fuseOps.length ? medianOps(r.fuseOps) : null,
      fuseOpsRounds: r.fuseOps.length ? r.fuseOps : undefined,
      extra: r.extra,
      error: r.error,
      mountOptions: r.mountOptions,
    };
  }
  const ratios = {};
  const subj = per[ctx.subject]?.median;
  for (const t of targets) {
    if (t.name === ctx.subject) continue;
    const other = per[t.name].median;
    ratios[t.name] = subj && other ? +(w.better === 'higher' ? subj / other : other / subj).toFixed(3) : null;
  }
  const barRatio = ratios.bindfs ?? null;
  const bgs = targets.flatMap((t) => rec.get(t.name).background);
  const spins = targets.flatMap((t) => rec.get(t.name).spin);
  return {
    workload: w.name,
    backgroundBusyMax: bgs.length ? Math.max(...bgs) : null,
    backgroundLoadCores: spins.length ? +median(spins).toFixed(2) : null,
    title: titleOf(w, ctx.cfg),
    unit: w.unit,
    better: w.better,
    load,
    targets: per,
    ratios,
    bar: w.bar && barRatio !== null ? { vs: 'bindfs', min: w.bar, ratio: barRatio, pass: barRatio >= w.bar } : w.bar ? { vs: 'bindfs', min: w.bar, ratio: null, pass: null } : null,
  };
}

/** Per opcode, the median over rounds of count, errors and bytes; lost events summed. */
function medianOps(rounds) {
  const names = new Set(rounds.flatMap((r) => Object.keys(r.ops)));
  const ops = {};
  for (const n of names) {
    const get = (k) => median(rounds.map((r) => r.ops[n]?.[k] ?? 0));
    ops[n] = { count: get('count'), errors: get('errors'), bytes: get('bytes') };
  }
  return { ops, lost: rounds.reduce((a, r) => a + r.lost, 0) };
}

// ---- report ------------------------------------------------------------------------------------

function table(rows) {
  const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => String(r[c]).length)));
  const line = (r) => r.map((cell, c) => (c < 2 ? String(cell).padEnd(widths[c]) : String(cell).padStart(widths[c]))).join('  ');
  return [line(rows[0]), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.slice(1).map(line)].join('\n');
}

function render(report) {
  const { meta, results } = report;
  const names = meta.targets.map((t) => t.name);
  const subject = meta.subject;
  // ratio columns: FUSE peers first (the bars are against bindfs), the plain limit last
  const others = names.filter((n) => n !== subject).sort((a, b) => (a === 'plain') - (b === 'plain'));
  const hasSubject = names.includes(subject);
  const out = [];
  out.push(`ledgerfs bench ${meta.started} on ${meta.machine.host}: ${meta.machine.cpus} CPU (${meta.machine.cpuModel}), ${meta.machine.memGiB} GiB, Linux ${meta.machine.kernel}, node ${meta.machine.node}`);
  out.push(`ledgerfs ${meta.machine.ledgerfs ?? '?'}; ${meta.machine.bindfs ?? 'bindfs ?'}; ${meta.machine.fio ?? 'fio ?'}; ${meta.machine.git ?? 'git ?'}`);
  out.push(`load average (1/5/15 min): start ${meta.loadStart.join(' ')}, end ${meta.loadEnd.join(' ')};  uptime: ${meta.uptime}`);
  out.push(`load1 = 1-min load average when the row started; bg = most CPU cores other processes kept busy just before a round (! when > ${meta.config.busyThreshold}: contended)`);
  const spinOn = meta.config.backgroundLoad > 0;
  if (spinOn) {
    out.push(`BACKGROUND LOAD: ${meta.config.backgroundLoad} spinning process(es) at nice 0 on ${meta.machine.cpus} CPU(s) during every round of every column` +
      ` (--background-load ${meta.config.backgroundLoad}); spin = cores they got over the rounds (median)`);
  }
  out.push(`median of ${meta.config.rounds} round(s)${meta.config.quick ? "" : " (stat-uncached, stat-cold: at least 5)"}${meta.config.warmup ? ' (+1 discarded warm-up for create/tar/git)' : ''}; ±x% = half the min-max range of the rounds (! when > 10%)`);
  if (meta.createProbe) out.push(`backing fs create probe (plain, 500 x 4 KiB files, before the run): ${meta.createProbe.filesPerSecond.join(' -> ')} files/s`);
  out.push(`size ${fmtBytes(meta.config.size)}, random-read file ${fmtBytes(meta.config.randSize)}, tree ${meta.config.files} files, create ${meta.config.createFiles} files; work dir ${meta.work}`);
  for (const t of meta.targets) out.push(`  ${t.name.padEnd(10)} ${t.describe}`);
  if (hasSubject) {
    out.push(`RATIOS: ${subject}/peer, bigger is better: > 1 means ${subject} is faster. For times (s) the ratio is peer_time/${subject}_time.`);
  }
  out.push('');
  const head = ['workload', 'unit', ...names, ...(hasSubject ? others.map((o) => `${subject}/${o}`) : []), ...(hasSubject ? ['bar vs bindfs'] : []), 'load1', 'bg', ...(spinOn ? ['spin'] : [])];
  const rows = [head];
  for (const r of results) {
    const cells = [r.workload, r.better === 'lower' ? 's (lower=better)' : r.unit];
    for (const n of names) {
      const t = r.targets[n];
      if (!t || t.median === null) cells.push(t?.error ? 'FAILED' : '-');
      else cells.push(`${fmtValue(t.median, r.unit)}${t.rounds.length > 1 ? ` ±${Math.round(t.spread * 100)}%${t.spread > 0.1 ? '!' : ''}` : ''}`);
    }
    if (hasSubject) {
      for (const o of others) cells.push(r.ratios[o] === null || r.ratios[o] === undefined ? '-' : r.ratios[o].toFixed(2));
      cells.push(r.bar ? (r.bar.pass === null ? `>=${r.bar.min} ?` : `>=${r.bar.min} ${r.bar.pass ? 'ok' : 'MISS'}`) : '');
    }
    cells.push(r.load[0].toFixed(2));
    cells.push(r.backgroundBusyMax === null ? '-' : `${r.backgroundBusyMax.toFixed(2)}${r.backgroundBusyMax > meta.config.busyThreshold ? '!' : ''}`);
    if (spinOn) cells.push(r.backgroundLoadCores === null ? '-' : r.backgroundLoadCores.toFixed(2));
    rows.push(cells);
  }
  out.push(table(rows));

  const fuseNames = meta.targets.filter((t) => t.fuse).map((t) => t.name);
  if (fuseNames.length) {
    out.push('');
    out.push('daemon CPU seconds per round (user+sys, median) / wall seconds of the timed part:');
    const crow = [['workload', '', ...fuseNames]];
    for (const r of results) {
      crow.push([r.workload, '', ...fuseNames.map((n) => {
        const t = r.targets[n];
        if (!t || t.daemonCpuSeconds === null) return '-';
        return `${t.daemonCpuSeconds.toFixed(2)} / ${median(t.seconds).toFixed(2)}`;
      })]);
    }
    out.push(table(crow));
  }
  if (results.some((r) => Object.values(r.targets).some((t) => t.fuseOps))) {
    out.push('');
    out.push('FUSE requests per round (median; --fuse-ops), and daemon CPU per request:');
    for (const r of results) {
      for (const n of fuseNames) {
        const t = r.targets[n];
        if (!t?.fuseOps) continue;
        const total = Object.values(t.fuseOps.ops).reduce((a, o) => a + o.count, 0);
        const perReq = t.daemonCpuSeconds !== null && total ? `, ${((t.daemonCpuSeconds / total) * 1e6).toFixed(1)} µs CPU/request` : '';
        out.push(`  ${r.workload.padEnd(13)} ${n.padEnd(10)} ${total} requests${perReq}${t.fuseOps.lost ? ` (${t.fuseOps.lost} LOST)` : ''}: ${fmtOps(t.fuseOps.ops)}`);
      }
    }
  }
  const errs = results.flatMap((r) => Object.entries(r.targets).filter(([, t]) => t.error).map(([n, t]) => `  ${r.workload} on ${n}: ${t.error.split('\n').slice(0, 5).join('\n    ')}`));
  if (errs.length) out.push('', 'FAILURES:', ...errs);
  return out.join('\n');
}

/**
 * How fast the backing file system creates small files right now, before anything is measured.
 * Journal-less ext4 creates slowly for a minute or more after mass deletions (see workloads.mjs);
 * wait (up to a minute) for that to pass, and record what was seen.
 */
async function probeCreates(ctx) {
  const probes = [];
  for (let i = 0; i < 7; i++) {
    const dir = path.join(ctx.work, `probe-${i}`);
    fs.mkdirSync(dir);
    const r = await runOk(process.execPath, [path.join(import.meta.dirname, 'fsloop.mjs'), 'create', dir, '500', '4096']);
    const rate = Math.round(500 / JSON.parse(r.stdout).seconds);
    probes.push(rate);
    if (rate >= 8000) break;
    if (i === 0) say(`bench: the backing fs creates only ${rate} files/s now (recent mass deletions?); waiting up to 60 s for it to recover`);
    if (i < 6) await new Promise((res) => setTimeout(res, 10_000));
  }
  const last = probes.at(-1);
  if (last < 8000) warn(`the backing fs still creates only ${last} files/s: create-4k, tar-x and git-commit will be slow on every peer`);
  return { filesPerSecond: probes };
}

// ---- main --------------------------------------------------------------------------------------

/**
 * The command line -> {values, cfg}; a BenchError (exit 2) says what is wrong with it. cfg is
 * null with --help.
 */
export function parseOptions(argv) {
  let v;
  try {
    ({ values: v } = parseArgs({ args: argv, options: OPTIONS, allowPositionals: false }));
  } catch (err) {
    throw new BenchError(`${err.message}\n(run with --help for usage)`);
  }
  return { values: v, cfg: v.help ? null : config(v) };
}

export async function main(argv) {
  let v;
  let cfg;
  try {
    ({ values: v, cfg } = parseOptions(argv));
  } catch (err) {
    if (!(err instanceof BenchError)) throw err;
    process.stderr.write(`bench: ${err.message}\n`);
    return 2;
  }
  if (v.help) {
    process.stdout.write(usage());
    return 0;
  }
  setQuiet(!!v.quiet);
  let targets;
  let workloads;
  try {
    const all = makeTargets({ repo: REPO, ledgerfsArgs: v['ledgerfs-args'], bindfsArgs: v['bindfs-args'], addPeers: v['add-peer'] });
    const want = list(v.peers) ?? ['plain', 'bindfs', 'libfuse3', 'ledgerfs', 'ledgerfs-fuse-native'];
    targets = want.map((n) => all.find((t) => t.name === n) ?? (() => { throw new BenchError(`unknown peer ${n} (known: ${all.map((t) => t.name).join(', ')})`); })());
    if (new Set(want).size !== want.length) throw new BenchError('--peers lists a column twice');
    const only = list(v.only);
    const skip = list(v.skip) ?? [];
    for (const n of [...(only ?? []), ...skip]) {
      if (!WORKLOADS.some((w) => w.name === n)) throw new BenchError(`unknown workload ${n} (known: ${WORKLOADS.map((w) => w.name).join(', ')})`);
    }
    workloads = WORKLOADS.filter((w) => (!only || only.includes(w.name)) && !skip.includes(w.name));
    if (!workloads.length) throw new BenchError('no workloads selected');
  } catch (err) {
    if (err instanceof BenchError) {
      process.stderr.write(`bench: ${err.message}\n`);
      return 2;
    }
    throw err;
  }

  // Preconditions: say everything that is missing at once.
  const problems = [];
  if (!fs.existsSync('/dev/fuse')) problems.push('/dev/fuse is missing (container: --device /dev/fuse --cap-add SYS_ADMIN)');
  if (targets.some((t) => t.fuse) && !which('fusermount3') && !which('fusermount')) problems.push('fusermount3 is missing (apt-get install -y fuse3)');
  const needs = new Set(['dd', 'sync']);
  for (const w of workloads) {
    if (w.name === 'rand-read-4k') needs.add('fio');
    if (w.name === 'tar-x' || w.name === 'git-commit') needs.add('tar');
    if (w.name === 'git-commit') needs.add('git');
  }
  for (const c of needs) if (!which(c)) problems.push(`${c} is not installed`);
  for (const t of targets) {
    const p = t.problem();
    if (p) problems.push(`${t.name}: ${p}`);
  }
  if (problems.length) {
    process.stderr.write(`bench: cannot run:\n${problems.map((p) => `  - ${p}`).join('\n')}\n`);
    return 2;
  }
  if (!canDropCaches()) warn('not root: cannot drop caches, so stat-cold and seq-read will be warm');
  if (targets.some((t) => t.name === 'ledgerfs')) {
    const srcNewest = newestMtime(path.join(REPO, 'src'));
    const built = newestMtime(path.join(REPO, 'dist'));
    if (srcNewest > built) warn('src/ is newer than dist/: the bench runs the last build (npm run build to rebuild)');
  }

  const base = path.resolve(v.dir ?? os.tmpdir());
  fs.mkdirSync(base, { recursive: true });
  const need = 2 * cfg.size + cfg.randSize + 1024 * MiB; // + small files kept until the end
  const st = fs.statfsSync(base);
  const free = st.bavail * st.bsize;
  if (free < need) {
    process.stderr.write(`bench: ${base} has ${fmtBytes(free)} free; this run needs about ${fmtBytes(need)} (use --dir or a smaller --size)\n`);
    return 2;
  }
  const work = fs.mkdtempSync(path.join(base, 'ledgerfs-bench-'));
  const ctx = {
    work,
    src: path.join(work, 'src'),
    home: path.join(work, 'home'),
    logs: path.join(work, 'logs'),
    cfg,
    shared: {},
    subject: v.subject ?? 'ledgerfs',
    tracer: null,
  };
  for (const d of [ctx.src, ctx.home, ctx.logs, path.join(work, 'mnt')]) fs.mkdirSync(d, { recursive: true });

  const removeWork = () => {
    if (v.keep) {
      say(`work directory kept: ${work}`);
      return;
    }
    const stillMounted = mountPoints().some((mp) => mp.startsWith(`${work}/`));
    if (stillMounted) {
      warn(`something is still mounted under ${work}; not removing it`);
      return;
    }
    rmrf(work);
  };
  let finishing = false;
  const emergency = (why, code) => {
    if (finishing) return;
    finishing = true;
    process.stderr.write(`\nbench: ${why}: unmounting ${liveMounts().length} mount(s) and cleaning up\n`);
    ctx.tracer?.close();
    killAllLoadSync();
    cleanupAllSync();
    removeWork();
    process.exit(code);
  };
  const onSignal = (sig) => emergency(`${sig}`, 128 + (os.constants.signals[sig] ?? 2));
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, onSignal);
  process.on('exit', () => {
    killAllLoadSync();
    cleanupAllSync();
  });

  const meta = {
    started: new Date().toISOString(),
    machine: machineInfo(),
    uptime: toolVersion('uptime', []) ?? '',
    loadStart: loadNow(),
    loadEnd: null,
    config: { ...cfg },
    subject: ctx.subject,
    work,
    targets: targets.map((t) => ({ name: t.name, describe: t.describe, fuse: t.fuse })),
    cachesDropped: canDropCaches(),
  };
  if (cfg.backgroundLoad >= meta.machine.cpus) warn(`--background-load ${cfg.backgroundLoad} on ${meta.machine.cpus} CPUs: no core is left idle; the workload, the daemon and the spinners all time-share`);
  if (meta.loadStart[0] > 0.5 * meta.machine.cpus) warn(`load average is ${meta.loadStart[0]} on ${meta.machine.cpus} CPUs: numbers will be noisy`);
  say(`bench: work dir ${work}; peers ${targets.map((t) => t.name).join(', ')}; workloads ${workloads.map((w) => w.name).join(', ')}`);

  const results = [];
  let code = 0;
  try {
    meta.createProbe = await probeCreates(ctx);
    if (v['fuse-ops']) {
      ctx.tracer = new FuseOpsTracer();
      const why = ctx.tracer.open();
      if (why) throw new BenchError(`--fuse-ops: ${why}`);
    }
    for (const w of workloads) {
      const r = await runWorkload(w, targets, ctx);
      results.push(r);
      if (Object.values(r.targets).some((t) => t.error)) code = 1;
    }
  } catch (err) {
    process.stderr.write(`bench: ${err instanceof BenchError ? err.message : err.stack}\n`);
    code = 1;
  } finally {
    finishing = true;
    ctx.tracer?.close();
    cleanupAllSync();
    for (const mp of mountPoints()) if (mp.startsWith(`${work}/`)) warn(`left mounted: ${mp}`);
    removeWork();
  }
  meta.loadEnd = loadNow();
  meta.uptimeEnd = toolVersion('uptime', []) ?? '';
  const report = { meta, results };
  const text = render(report);
  if (v.json) {
    process.stderr.write(`\n${text}\n`);
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  } else {
    process.stderr.write('\n');
    process.stdout.write(`${text}\n`);
  }
  return code;
}
