import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { onGcs, startMount, TEST_BINDING } from '../helpers/mount.js';

/*
 * A sequential write is one request per WRITE. Without FUSE_HANDLE_KILLPRIV_V2 the kernel asks
 * for security.capability (a GETXATTR) before every write to see whether the write must drop
 * it: two round trips per 1 MiB, 7% of seq-write throughput (docs/bench/2026-11-26-local.md).
 * With it, the kernel asks once per inode until its attributes are next refreshed.
 */
describe.skipIf(onGcs || TEST_BINDING === 'fuse-native')('native-ll: a sequential write', () => {
  it('costs one request per write, not a GETXATTR before each', { timeout: 60_000 }, async () => {
    const m = await startMount({ args: ['--binding', 'native-ll'], env: { LEDGERFS_NATIVE_STATS: '1' } });
    try {
      const r = spawnSync('dd', ['if=/dev/zero', 'of=big', 'bs=1M', 'count=64', 'conv=fsync'], { cwd: m.mnt, encoding: 'utf8' });
      expect(r.status, r.stderr).toBe(0);
    } finally {
      await m.stop();
    }
    const logs = m.logs();
    const total = Number(/(\d+) requests in \d+ JS wake-ups/.exec(logs)?.[1] ?? NaN);
    // 64 WRITEs (128 KiB ones if the kernel splits them) and a handful more: LOOKUP, CREATE,
    // one GETXATTR, FSYNC, RELEASE; before, each WRITE came with its GETXATTR (130+)
    expect(total, logs).toBeGreaterThanOrEqual(64);
    expect(total, logs).toBeLessThan(64 + 16);
  });
});
