import os from 'node:os';
import path from 'node:path';

/**
 * The one place defaults live. Everything else imports from here; CLI help texts print these
 * values so the documentation cannot drift from the behaviour.
 */
export const DEFAULTS = {
  /** Kernel attribute/entry cache lifetimes, seconds. Every mutation passes through us, so the
   * kernel's cache is only stale for changes made beside the mount (in the source directory). */
  attrTimeoutSec: 1,
  entryTimeoutSec: 1,
  negativeTimeoutSec: 0,
  /** Largest write request the kernel may send (needs big_writes on libfuse 2). */
  maxWriteBytes: 1024 * 1024,
  logLevel: 'info' as const,
  fsName: 'ledgerfs',
  /** Where `ledgerfs mount` without --source puts its demo workspace. */
  demoWorkspaceDir: path.join(os.homedir(), '.ledgerfs', 'demo-workspace'),
  /** Seconds to wait for a busy mount to become free during shutdown before lazy-unmounting. */
  unmountGraceSec: 5,
} as const;

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
export const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
