#!/usr/bin/env node
// Build the patched fuse-native (patches/fuse-native+2.2.6.patch, applied by patch-package just
// before this runs in `postinstall`) from source against Debian's libfuse 2.9 (libfuse-dev), and
// check that require('fuse-native') loads that build and not the upstream prebuild.
// See native/FUSE_NATIVE_PATCH.md.
//
//   node scripts/build-fuse-native.mjs [--force]
//
// Idempotent: skips the build when build/Release/fuse.node is newer than fuse-native.c and
// binding.gyp and the loaded binding is the patched one. No dependencies; Node >= 20.
import { createRequire } from 'node:module';
import { execFileSync, spawnSync } from 'node:child_process';
import { buildProblem, nodeGypRebuild } from './build-lib.mjs';
import { statSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(join(root, 'package.json'));
const force = process.argv.includes('--force');
const tag = 'build-fuse-native:';

function fail(msg) {
  console.error(`${tag} ${msg}`);
  process.exit(1);
}
function log(msg) {
  console.error(`${tag} ${msg}`);
}
function mtime(p) {
  try {
    return statSync(p).mtimeMs;
  } catch {
    return -1;
  }
}
// 1. Where is fuse-native, and is the patch applied?
let pkgDir;
try {
  pkgDir = dirname(require.resolve('fuse-native/package.json'));
} catch {
  fail('node_modules/fuse-native is missing: run `npm install` first.');
}
const cFile = join(pkgDir, 'fuse-native.c');
const gypFile = join(pkgDir, 'binding.gyp');
const built = join(pkgDir, 'build', 'Release', 'fuse.node');
if (!readFileSync(cFile, 'utf8').includes('ledgerfs_patched')) {
  fail(`${cFile} is not patched: run \`npx patch-package\` (patches/fuse-native+2.2.6.patch) first.`);
}

// 2. Does require('fuse-native') load our build? (child process: nothing loaded in this one)
function verify() {
  const probe = `
    const Fuse = require('fuse-native');
    const addon = Object.keys(require.cache).find((k) => k.endsWith('.node'));
    process.stdout.write(JSON.stringify({ patched: Fuse.ledgerfsPatched, addon }));
  `;
  const r = spawnSync(process.execPath, ['-e', probe], { cwd: root, encoding: 'utf8' });
  if (r.status !== 0) return { ok: false, why: (r.stderr || '').trim().split('\n').slice(0, 6).join('\n') };
  const { patched, addon } = JSON.parse(r.stdout);
  if (patched !== 1) return { ok: false, why: `loaded binding has ledgerfs_patched=${patched}` };
  if (resolve(addon) !== resolve(built)) return { ok: false, why: `loaded ${addon}, expected ${built}` };
  return { ok: true, addon };
}

const fresh = mtime(built) > Math.max(mtime(cFile), mtime(gypFile));
if (fresh && !force) {
  const v = verify();
  if (v.ok) {
    log(`up to date (${v.addon})`);
    process.exit(0);
  }
  log(`existing build not usable (${v.why}); rebuilding`);
}

// 3. Build prerequisites, with the command that fixes each; node-gyp and local Node headers.
const problem = buildProblem('fuse', 'libfuse-dev', '/usr/include/fuse/fuse.h');
if (problem) fail(problem);
const gyp = nodeGypRebuild(root);
if (typeof gyp === 'string') fail(gyp);
const { nodeGyp, nodedir, args } = gyp;
if (!nodedir) log('no local Node headers found (include/node/node_api.h); node-gyp will look in its cache');

log(`building ${pkgDir} against system libfuse ${execFileSync('pkg-config', ['--modversion', 'fuse'], { encoding: 'utf8' }).trim()}` +
  ` (node-gyp: ${nodeGyp}, nodedir: ${nodedir ?? 'none'})`);
const t0 = Date.now();
const r = spawnSync(process.execPath, args, { cwd: pkgDir, encoding: 'utf8' });
if (r.status !== 0) {
  process.stderr.write(r.stdout || '');
  process.stderr.write(r.stderr || '');
  fail(`node-gyp rebuild failed (exit ${r.status}) in ${pkgDir}`);
}
const warnings = `${r.stdout}\n${r.stderr}`.split('\n').filter((l) => /warning:/.test(l));
for (const w of warnings) log(w);

const v = verify();
if (!v.ok) fail(`built, but require('fuse-native') does not load the patched build: ${v.why}`);
log(`ok in ${((Date.now() - t0) / 1000).toFixed(1)} s: ${v.addon}`);
