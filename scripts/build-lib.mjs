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
