#!/usr/bin/env node
// Micro-benchmark of fuse-native's per-request overhead: mounts a tiny in-memory FS and has a
// python3 child stat() one file in a loop (attr/entry timeout 0, so every stat reaches JS).
//   node native/bench-fuse-native.mjs [seconds=5] [timeout=false|default] [clients=1]
// Prints stat() calls/s summed over the clients and getattr calls/s seen by JS. Mounts at a fresh
// mkdtemp dir and always unmounts. FUSE_NATIVE_MODULE=/path/to/fuse-native benchmarks another copy.
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFile, execFileSync } from 'node:child_process';

const require = createRequire(import.meta.url);
const Fuse = require(process.env.FUSE_NATIVE_MODULE || 'fuse-native');
const seconds = Number(process.argv[2] || 5);
const timeoutMode = process.argv[3] || 'false';
const clients = Number(process.argv[4] || 1);
let getattrs = 0;

const now = new Date();
const ops = {
  getattr(p, cb) {
    getattrs++;
    if (p === '/') return cb(0, { mode: 0o40755, size: 4096, nlink: 2, uid: 0, gid: 0, mtime: now, atime: now, ctime: now });
    if (p === '/f') return cb(0, { mode: 0o100644, size: 5, nlink: 1, uid: 0, gid: 0, mtime: now, atime: now, ctime: now });
    return cb(Fuse.ENOENT);
  },
  readdir(p, cb) { cb(0, ['f']); },
};

const dir = mkdtempSync(join(tmpdir(), 'fnbench-'));
const mnt = join(dir, 'm');
require('node:fs').mkdirSync(mnt);
const opts = { attrTimeout: '0', entryTimeout: '0' };
if (timeoutMode === 'false') opts.timeout = false;
const fuse = new Fuse(mnt, ops, opts);
const mount = () => new Promise((res, rej) => fuse.mount((e) => (e ? rej(e) : res())));
const unmount = () => new Promise((res) => fuse.unmount(() => res()));

const py = `
import os, time, sys
p = sys.argv[1]; dur = float(sys.argv[2])
for _ in range(2000): os.stat(p)
n = 0; t0 = time.perf_counter(); end = t0 + dur
while True:
    for _ in range(1000): os.stat(p)
    n += 1000
    t = time.perf_counter()
    if t >= end: break
print(int(n / (t - t0)))
`;

try {
  await mount();
  const run = () => new Promise((res, rej) =>
    execFile('python3', ['-c', py, join(mnt, 'f'), String(seconds)], (e, so, se) => (e ? rej(new Error(se || e.message)) : res(Number(so)))));
  const g0 = getattrs;
  const t0 = process.hrtime.bigint();
  const outs = await Promise.all(Array.from({ length: clients }, run));
  const dt = Number(process.hrtime.bigint() - t0) / 1e9;
  const total = outs.reduce((a, b) => a + b, 0);
  console.log(`stat/s=${total} getattr/s=${Math.round((getattrs - g0) / dt)} (timeout=${timeoutMode}, clients=${clients})`);
} finally {
  await unmount();
  try { execFileSync('fusermount', ['-uz', mnt], { stdio: 'ignore' }); } catch {}
  rmSync(dir, { recursive: true, force: true });
}
