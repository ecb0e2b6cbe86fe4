import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'vitest';

/**
 * A fresh temp directory for one test (core tests: no mount). Remove it with `rmTemp`.
 * Named ledgerfs-unit-* so a stray one is easy to spot; never ledgerfs-test-* (that prefix is
 * reserved for mounts and checked for leaks by the global teardown).
 */
export function makeTemp(tag = 'unit'): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), `ledgerfs-${tag}-`));
}

export function rmTemp(dir: string | undefined): void {
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
}

/** Await `p` and expect it to reject with an error whose `code` is `code` (VfsError or Node). */
export async function expectCode(p: Promise<unknown> | (() => unknown), code: string): Promise<void> {
  let got: unknown;
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (err) {
    got = err;
  }
  expect(got, `expected ${code}, but the call succeeded`).toBeDefined();
  expect((got as { code?: string }).code, String((got as Error)?.message ?? got)).toBe(code);
}

export function isRoot(): boolean {
  return typeof process.getuid === 'function' && process.getuid() === 0;
}
