// Process, mount and cache helpers for scripts/bench. No dependencies beyond Node's stdlib.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let quiet = false;
export function setQuiet(q) {
  quiet = q;
}
/** Progress goes to stderr, so stdout stays clean for --json. */
export function say(msg) {
  if (!quiet) process.stderr.write(`${msg}\n`);
}
export function warn(msg) {
  process.stderr.write(`bench: warning: ${msg}\n`);
}

export class BenchError extends Error {}

/** "1G", "128M", "64k", "4096" -> bytes (binary multiples). */
export function parseSize(s) {
  const m = /^(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?$/i.exec(String(s).trim());
  if (!m) throw new BenchError(`not a size: ${JSON.stringify(s)} (use e.g. 1G, 128M, 4096)`);
  const mult = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 }[m[2].toLowerCase()];
  const n = Math.round(Number(m[1]) * mult);
  if (n <= 0) throw new BenchError(`size must be positive: ${s}`);
  return n;
}

export function fmtBytes(n) {
  for (const [u, f] of [['GiB', 1024 ** 3], ['MiB', 1024 ** 2], ['KiB', 1024]]) {
    if (n >= f && n % (f / 1024) === 0) return `${+(n / f).toFixed(2)} ${u}`;
  }
  return `${n} B`;
}

/** Is `cmd` on PATH? */
export function which(cmd) {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (!dir) continue;
    const p = path.join(dir, cmd);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch {
      /* next */
    }
  }
  return null;
}

/**
 * Run a command to completion. Resolves with {code, signal, stdout, stderr, seconds} where
 * seconds is the wall time from spawn to exit (hrtime). Rejects only if it cannot be spawned.
 */
export function run(cmd, args, opts = {}) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    let seconds = 0;
    const child = spawn(cmd, args, {
      cwd: opts.cwd,
      env: opts.env ?? process.env,
      stdio: ['ignore', opts.captureStdout === false ? 'ignore' : 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout?.on('data', (d) => (out += d));
    child.stderr?.on('data', (d) => (err.length < 65536 ? (err += d) : undefined));
    child.on('error', reject);
    child.on('exit', () => (seconds = Number(process.hrtime.bigint() - t0) / 1e9));
    child.on('close', (code, signal) => resolve({ code, signal, stdout: out, stderr: err, seconds }));
  });
}

/** run(), but a non-zero exit is an error that says what failed. */
export async function runOk(cmd, args, opts = {}) {
  const r = await run(cmd, args, opts);
  if (r.code !== 0) {
    const why = r.signal ? `killed by ${r.signal}` : `exit ${r.code}`;
    throw new BenchError(`${cmd} ${args.join(' ')}: ${why}\n${r.stderr.trim().slice(-2000)}`);
  }
  return r;
}

// ---- mounts ------------------------------------------------------------------------------------

// The mount table is read, and mounts unmounted, by ledgerfs's own module (built in dist/), so
// the bench and the daemon agree; the bench unmounts any FUSE mount it made (bindfs, passthrough).
const mounts = await import(path.resolve(import.meta.dirname, '../../dist/fuse/mounts.js')).catch(() => {
  throw new Error('ledgerfs is not built: run npm run build');
});

/** The topmost mount at `mnt`, or undefined. */
export function mountAt(mnt) {
  return mounts.mountAt(mnt);
}

/** Every mount point, as listed. */
export function mountPoints() {
  return mounts.listMounts().map((m) => m.mountpoint);
}

/** Unmount a FUSE mount by path (fusermount3, fusermount, umount); lazy (-z / -l) if asked. */
export function unmountSync(mnt, lazy = false) {
  return mounts.unmountPathSync(mnt, { lazy, accept: mounts.isFuseMount });
}

export function pidAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e.code === 'EPERM';
  }
}

let clkTck;
/** user+system CPU seconds of a process (all its threads) so far, or null if it is gone. */
export function cpuSeconds(pid) {
  if (!pid) return null;
  if (clkTck === undefined) {
    try {
      clkTck = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      clkTck = 100;
    }
  }
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / clkTck; // fields 14 and 15: utime, stime
  } catch {
    return null;
  }
}

// ---- caches ------------------------------------------------------------------------------------

let dropWarned = false;
/** sync + drop page cache, dentries and inodes. Returns false (and warns once) if not allowed. */
export function dropCaches() {
  try {
    execFileSync('sync');
    fs.writeFileSync('/proc/sys/vm/drop_caches', '3');
    return true;
  } catch (e) {
    if (!dropWarned) warn(`cannot drop caches (${e.message}); "cold" numbers will be warm. Run as root.`);
    dropWarned = true;
    return false;
  }
}

export function canDropCaches() {
  try {
    fs.accessSync('/proc/sys/vm/drop_caches', fs.constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

/** Read a file to the bottom so its pages are in the page cache (through whatever path). */
export function readThrough(file) {
  const fd = fs.openSync(file, 'r');
  const buf = Buffer.allocUnsafe(1 << 20);
  try {
    while (fs.readSync(fd, buf, 0, buf.length, null) > 0);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * `arr` starting at index k (wrapping): round k of a run takes the peers in this order, so no peer
 * is always first (the first peer of a round measured about 7% slower than the same build last).
 */
export function rotate(arr, k) {
  const n = arr.length;
  return arr.map((_, i) => arr[(i + k) % n]);
}

export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  if (n === 0) return NaN;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

export function rmrf(p) {
  fs.rmSync(p, { recursive: true, force: true, maxRetries: 3 });
}

// ---- other load on the machine -----------------------------------------------------------------

function cpuTimes() {
  const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const idle = f[3] + (f[4] ?? 0); // idle + iowait
  return { total: f.reduce((a, b) => a + b, 0), idle };
}

/** CPUs' worth of busy time over the next `ms` (0 = idle machine, 2 = both cores busy). */
export async function busyCores(ms = 300) {
  const a = cpuTimes();
  await sleep(ms);
  const b = cpuTimes();
  const total = b.total - a.total;
  if (total <= 0) return 0;
  const ncpu = fs.readFileSync('/proc/stat', 'utf8').split('\n').filter((l) => /^cpu\d/.test(l)).length || 1;
  return ((total - (b.idle - a.idle)) / total) * ncpu;
}

/**
 * Wait (up to maxSec) until the machine is quiet: less than `threshold` cores busy with other
 * work. Returns the busy level seen last, so results can say under what load they were taken.
 */
export async function waitQuiet(threshold, maxSec, label) {
  let busy = await busyCores();
  if (busy <= threshold || maxSec <= 0) return busy;
  const deadline = Date.now() + maxSec * 1000;
  say(`  ${label}: ${busy.toFixed(2)} cores busy with other work; waiting up to ${maxSec} s for quiet`);
  while (busy > threshold && Date.now() < deadline) {
    await sleep(700);
    busy = await busyCores();
  }
  if (busy > threshold) say(`  ${label}: still ${busy.toFixed(2)} cores busy; measuring anyway (marked in the results)`);
  return busy;
}

/** Deterministic xorshift PRNG, so every run builds the same tree. */
export function prng(seed) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 0x100000000;
  };
}
