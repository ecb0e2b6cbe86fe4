#!/usr/bin/env node
// Build ledgerfs' own libfuse3 binding (native/ledgerfs_fuse3_ll.c, `native-ll`, over libfuse3's
// low-level API; see native/README.md) and the local
// store's helper addon, which links no libfuse (native/ledgerfs_local.c: openat2 beneath the
// backend root, fallocate, copy_file_range and SEEK_DATA/SEEK_HOLE on fds, the open-file limit), with node-gyp
// against Debian's libfuse3-dev; and, when Debian's libseccomp-dev is there, the seccomp filter
// of `ledgerfs run` (native/ledgerfs_seccomp.c; without it `run` refuses unless --privileged).
// Run by `postinstall` after build-fuse-native.mjs.
//
//   node scripts/build-native.mjs [--force]
//
// The native binding is optional: when it cannot be built this says why and how to fix it,
// and exits 0 so the install carries on (`ledgerfs mount` then uses fuse-native).
// Idempotent: skips the build when the addon is newer than its sources and loads.
import { spawnSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildProblem, nodeGypRebuild } from './build-lib.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const dir = join(root, 'native');
// the seccomp addon is built (and so expected) only where libseccomp's development files are
const seccompProblem = buildProblem('libseccomp', 'libseccomp-dev');
const addons = ['ledgerfs_fuse3_ll', 'ledgerfs_local', ...(seccompProblem ? [] : ['ledgerfs_seccomp'])].map((n) => join(dir, 'build', 'Release', `${n}.node`));
const sources = ['ledgerfs_fuse3_ll.c', 'ledgerfs_napi.h', 'ledgerfs_common.h', 'ledgerfs_local.c', 'ledgerfs_beneath.c', 'ledgerfs_fdops.c', 'ledgerfs_limits.c', 'ledgerfs_seccomp.c', 'binding.gyp'].map((f) => join(dir, f));
const force = process.argv.includes('--force');
const tag = 'build-native:';

function skip(msg) {
  console.error(`${tag} NOT BUILT: ${msg}`);
  console.error(`${tag} ledgerfs will use fuse-native (libfuse 2); --binding native-ll is unavailable until this builds.`);
  process.exit(0);
}
const mtime = (p) => {
  try {
    return statSync(p).mtimeMs;
  } catch {
    return -1;
  }
};

/** every addon loads; the libfuse version, or why one does not */
function verify() {
  const probe = `for (const p of ${JSON.stringify(addons)}) process.stdout.write((require(p).libfuseVersion ?? '') + '\\n');`;
  const r = spawnSync(process.execPath, ['-e', probe], { encoding: 'utf8' });
  return r.status === 0 ? { ok: true, version: r.stdout.split('\n')[0] } : { ok: false, why: (r.stderr || '').trim().split('\n')[0] };
}
const addon = addons.join(' and ');

if (!force && Math.min(...addons.map(mtime)) > Math.max(...sources.map(mtime))) {
  const v = verify();
  if (v.ok) {
    console.error(`${tag} up to date (${addon}, libfuse ${v.version})`);
    process.exit(0);
  }
  console.error(`${tag} existing build not usable (${v.why}); rebuilding`);
}

const problem = buildProblem('fuse3', 'libfuse3-dev');
if (problem) skip(problem);
const gyp = nodeGypRebuild(root);
if (typeof gyp === 'string') skip(gyp);
const { args } = gyp;

const t0 = Date.now();
const r = spawnSync(process.execPath, args, { cwd: dir, encoding: 'utf8' });
if (r.status !== 0) {
  process.stderr.write((r.stdout || '') + (r.stderr || ''));
  skip(`node-gyp rebuild failed (exit ${r.status}) in ${dir}`);
}
for (const w of `${r.stdout}\n${r.stderr}`.split('\n').filter((l) => /warning:/.test(l))) console.error(`${tag} ${w}`);
const v = verify();
if (!v.ok) skip(`built, but ${addon} does not load: ${v.why}`);
if (seccompProblem) console.error(`${tag} ledgerfs_seccomp NOT BUILT: ${seccompProblem}; \`ledgerfs run\` refuses to start a sandbox without its seccomp filter (unless --privileged)`);
console.error(`${tag} ok in ${((Date.now() - t0) / 1000).toFixed(1)} s: ${addon} (libfuse ${v.version})`);
