import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { leakedTestMounts, RUN_ENV, testRunId } from './run.js';
import { isFuseMount, unmountPathSync } from '../../src/fuse/mounts.js';
import { pathWithRealPython } from './python.js';

/**
 * Mounted tests run the real CLI (bin/ledgerfs.js -> dist/), so build once before them, as
 * `npm run build` does: tsc, then the CLI bundle (unless scripts/test just did: LEDGERFS_TEST_DIST_BUILT=1).
 * The teardown fails the run if any mount this run made (a temp dir named ledgerfs-test-<run>-*)
 * is still in /proc/self/mountinfo, after unmounting it so nothing stays behind.
 */
export default function setup(): () => void {
  const root = path.resolve(import.meta.dirname, '../..');
  // scripts/test builds once before its passes (each compile costs about 9 s of CPU)
  if (process.env.LEDGERFS_TEST_DIST_BUILT !== '1') compile(root);
  // Workers inherit the environment: every mount of this run carries the run id in its name.
  process.env[RUN_ENV] = testRunId();
  // (and every `python3` they start is the interpreter itself, not pyenv's shim)
  const pythonDir = pathWithRealPython(process.env);

  return () => {
    if (pythonDir) fs.rmSync(pythonDir, { recursive: true, force: true });
    const leaked = leakedTestMounts(process.env[RUN_ENV]);
    // Mounts of other runs (another engineer's concurrent run, or a crashed one) are not ours to
    // judge or remove; name them so a stale one gets noticed.
    const others = leakedTestMounts().filter((m) => !leaked.includes(m));
    if (others.length) process.stderr.write(`global-setup: ledgerfs-test mounts of other runs present:\n  ${others.join('\n  ')}\n`);
    if (leaked.length === 0) return;
    for (const mnt of leaked) unmountPathSync(mnt, { lazy: true, accept: isFuseMount });
    throw new Error(`leaked mounts (a test did not stop() its mount; now lazily unmounted):\n  ${leaked.join('\n  ')}`);
  };
}

function compile(root: string): void {
  try {
    execFileSync(process.execPath, [path.join(root, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'], {
      cwd: root,
      stdio: 'inherit',
    });
  } catch (err) {
    // tsc still emits JavaScript when there are type errors (scripts/test's build fails on them
    // before running vitest); fail only if there is nothing to run.
    if (!fs.existsSync(path.join(root, 'dist/cli/main.js'))) throw err;
    process.stderr.write('global-setup: tsc reported errors (see above); testing the JavaScript it emitted\n');
  }
  // tsc just wrote an unbundled dist/cli/main.js: bundle it, or the tests would run a CLI built
  // unlike the one users get (test/unit/cli-bundle.test.ts checks it is the bundle)
  execFileSync(process.execPath, [path.join(root, 'node_modules/rolldown/bin/cli.mjs'), '-c', 'rolldown.config.mjs'], {
    cwd: root,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}
