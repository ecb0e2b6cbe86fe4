// Helpers shared by the addon build scripts (build-fuse-native.mjs, build-native.mjs).
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

export function have(cmd, args = ['--version']) {
  return spawnSync(cmd, args, { stdio: 'ignore' }).status === 0;
}

/** node-gyp: the one npm ships (npm exports its path to lifecycle scripts), else look for it. */
export function findNodeGyp(root) {
  const candidates = [];
  if (process.env.npm_config_node_gyp) candidates.push(process.env.npm_config_node_gyp);
  const prefix = resolve(dirname(process.execPath), '..');
  candidates.push(join(prefix, 'lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js'));
  try {
    const g = execFileSync('npm', ['prefix', '-g'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    if (g) candidates.push(join(g, 'lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js'));
  } catch {}
  candidates.push(join(root, 'node_modules/node-gyp/bin/node-gyp.js'));
  return candidates.find((p) => existsSync(p));
}

/** Node headers: never let node-gyp download them. npm's `nodedir` (from .npmrc, exported as
 * npm_config_nodedir) first, then the prefix this node runs from (/usr for Debian's nodejs). */
export function findNodedir() {
  const dirs = [process.env.npm_config_nodedir, resolve(dirname(process.execPath), '..')].filter(Boolean);
  return dirs.find((d) => existsSync(join(d, 'include/node/common.gypi')) && existsSync(join(d, 'include/node/node_api.h')));
}

/**
 * Why an addon linking `pkg` (pkg-config name; `header` must exist too, when given) cannot be
 * built here, with the apt-get line that fixes it; null when everything is there.
 */
export function buildProblem(pkg, devPackage, header) {
  if (!have('pkg-config')) return `pkg-config is missing. Install it with: apt-get install -y pkg-config ${devPackage}`;
  if (!have('pkg-config', ['--exists', pkg]) || (header && !existsSync(header))) {
    return `${devPackage} development files are missing (pkg-config ${pkg}). Install them with: apt-get install -y ${devPackage}`;
  }
  const missing = [];
  if (!have('make')) missing.push('make');
  if (!have('cc') && !have('gcc')) missing.push('a C compiler');
  if (!have('python3')) missing.push('python3');
  if (missing.length) return `${missing.join(', ')} missing. Install with: apt-get install -y build-essential python3`;
  return null;
}

/** `node <node-gyp> rebuild [--nodedir=...]` as argv for process.execPath, or a problem string. */
export function nodeGypRebuild(root) {
  const nodeGyp = findNodeGyp(root);
  if (!nodeGyp) return 'node-gyp not found (it ships with npm): is npm installed next to node?';
  const nodedir = findNodedir();
  return { nodeGyp, nodedir, args: [nodeGyp, 'rebuild', ...(nodedir ? [`--nodedir=${nodedir}`] : [])] };
}
