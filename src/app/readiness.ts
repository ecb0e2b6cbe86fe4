import { execFile } from 'node:child_process';
import { DEFAULTS } from '../config/index.js';
import { isLedgerfsMount, mountAt } from '../fuse/index.js';

/*
 * "The mount is ready" means a stat of the mount point is answered by our file system: the
 * kernel has a fuse.ledgerfs mount there and its root's device differs from the directory
 * above. Only another process may look: a daemon that stats its own mount point deadlocks (its
 * JS thread or libuv's pool waits on a request only it can answer).
 */

/**
 * For a process that is not the daemon (`mount --daemon`'s parent): whether the mount answers
 * stat now. The mount table first (cheap); then the stat, in a child process too: a stat stuck
 * on a daemon that does not answer can then be killed, where one on this process's own thread
 * pool would hold this process (and its exit) until the daemon answers.
 */
export async function mountAnswersStat(mountpoint: string, timeoutMs = DEFAULTS.readinessStatTimeoutMs): Promise<boolean> {
  const m = mountAt(mountpoint);
  if (!m || !isLedgerfsMount(m)) return false;
  return mountAnswersStatFromChild(mountpoint, timeoutMs);
}

const STAT_IN_CHILD = `const fs = require('fs'), p = process.argv[1];
process.exit(fs.statSync(p).dev !== fs.statSync(require('path').dirname(p)).dev ? 0 : 1);`;

/**
 * For the daemon itself: the same check made by a child process, so that the daemon keeps
 * serving (the child's stat is one of the requests it answers) while it waits.
 */
export function mountAnswersStatFromChild(mountpoint: string, timeoutMs = DEFAULTS.readinessStatTimeoutMs): Promise<boolean> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['-e', STAT_IN_CHILD, mountpoint], { timeout: timeoutMs, killSignal: 'SIGKILL' }, (err) => resolve(err === null));
  });
}
