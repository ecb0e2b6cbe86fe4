import { defineConfig } from 'vitest/config';

// Vitest starts the files that took longest on the last run first (its results cache), so a pass
// does not end on one long file started late. scripts/test runs the same files on several kinds of
// pass (kernel binding, backend), whose times differ widely (test/mount/crash.test.ts: 24 s on
// native-ll, 56 s on GCS): each kind keeps its own durations, or one pass orders the next.
const passKind = [
  process.env.LEDGERFS_TEST_BINDING || 'default-binding',
  process.env.LEDGERFS_TEST_BACKEND || 'local',
  process.env.LEDGERFS_TEST_GCS_ENDPOINT ? 'external-gcs' : '',
]
  .filter(Boolean)
  .join('-');

export default defineConfig({
  cacheDir: `node_modules/.vite/ledgerfs-${passKind}`,
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    // A worker runs its files one after the other in one process instead of a fresh process
    // each: starting a worker and importing a file's modules anew cost about 0.4 s of CPU a
    // file (test/unit: 106 s -> 66 s, 95 -> 69 s of CPU, measured in one hour), on every pass.
    // Tests restore what they change in this process (spies, timers); what a file leaves
    // running in it is stopped by per-file.ts.
    isolate: false,
    setupFiles: ['test/helpers/per-file.ts'],
    // Mounted tests spawn daemons and real tools, and many of them wait (on the emulator's
    // outages, retries, timestamps): on two cores a third file fills those waits. Measured here
    // in one hour: the default pass 401 s with 2 workers, 355 s with 3 (the CPU 7-9% idle), the
    // whole scripts/test 13 min 13 s -> 12 min 3 s.
    // Tests that need a quiet CPU run alone (scripts/test).
    maxWorkers: 3,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    reporters: ['default'],
  },
});
