import fs from 'node:fs';
import os from 'node:os';
import { listMounts } from '../../src/fuse/mounts.js';

/** Environment variable carrying the id of the current test run (set by global-setup). */
export const RUN_ENV = 'LEDGERFS_TEST_RUN';

export function testRunId(): string {
  return `${process.pid.toString(36)}${Date.now().toString(36).slice(-4)}`;
}

/** Prefix of every temp dir that holds a test mount of this run (ledgerfs-test-<run>-). */
export function mountDirPrefix(): string {
  const run = process.env[RUN_ENV];
  return run ? `ledgerfs-test-${run}-` : 'ledgerfs-test-';
}

export function mountPoints(): string[] {
  return listMounts().map((m) => m.mountpoint);
}

/**
 * Mounts under os.tmpdir() in a ledgerfs-test-* dir; with `run`, only those of that run (other
 * engineers' concurrent runs on the same machine have other ids).
 */
export function leakedTestMounts(run?: string): string[] {
  const tmp = fs.realpathSync(os.tmpdir());
  const prefix = `${tmp}/ledgerfs-test-${run ? `${run}-` : ''}`;
  return mountPoints().filter((m) => m.startsWith(prefix));
}
