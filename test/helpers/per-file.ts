import { afterAll } from 'vitest';
import { stopSharedEmulators } from './mount.js';

/*
 * Run after every test file (vitest.config setupFiles). A worker runs many files one after the
 * other in one process (isolate: false), so what a file leaves running in this process is
 * stopped here, as a worker of its own that exited would have.
 */
afterAll(async () => {
  await stopSharedEmulators();
});
