import { spawn } from 'node:child_process';
import path from 'node:path';
import { DEFAULTS } from '../config/index.js';
import { UserError } from './errors.js';
import { mountAnswersStat } from './readiness.js';

/** Set in the environment of the process `mount --daemon` starts: it is the daemon. */
export const DAEMON_ENV = 'LEDGERFS_DAEMONIZED';

export function isDaemonChild(): boolean {
  return process.env[DAEMON_ENV] === '1';
}

/**
 * `mount --daemon`: start the same command without --daemon as a detached process (its own
 * session, no terminal), relay what it says on stderr (the banner, or the sentence of its
 * failure), and return once the mount answers stat (looked at from here, never by the daemon)
 * or the daemon has exited (its exit code). The daemon's logs go to --log-file, else nowhere.
 */
export async function startDaemon(argv: readonly string[], mountpointArg: string, opts: { printPid?: boolean; timeoutSec?: number } = {}): Promise<number> {
  const timeoutSec = opts.timeoutSec ?? DEFAULTS.daemonReadyTimeoutSec;
  const mountpoint = path.resolve(mountpointArg);
  const args = argv.slice(1).filter((a) => a !== '--daemon');
  const child = spawn(process.execPath, [...process.execArgv, ...args], {
    detached: true,
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, [DAEMON_ENV]: '1' },
  });
  child.stderr?.on('data', (d: Buffer) => process.stderr.write(d));
  let exited: number | null = null;
  const gone = new Promise<void>((resolve) => {
    child.once('close', (code, signal) => {
      exited = code ?? 128 + 1;
      if (signal) exited = 128 + 15;
      resolve();
    });
    child.once('error', (err) => {
      process.stderr.write(`ledgerfs: cannot start the daemon: ${err.message}\n`);
      exited = 1;
      resolve();
    });
  });
  const deadline = Date.now() + timeoutSec * 1000;
  while (exited === null) {
    if (await mountAnswersStat(mountpoint)) {
      // let the daemon go: its stderr has nobody to read it from now on
      child.stderr?.destroy();
      child.unref();
      if (opts.printPid !== false) process.stdout.write(`${child.pid}\n`);
      return 0;
    }
    if (Date.now() > deadline) {
      child.kill('SIGTERM');
      throw new UserError(`the daemon (pid ${child.pid}) did not make ${mountpoint} answer within ${timeoutSec} s; it was sent SIGTERM (its log: --log-file)`, 1);
    }
    await Promise.race([gone, new Promise((r) => setTimeout(r, 50))]);
  }
  const code = exited as number;
  if (code === 0) throw new UserError(`the daemon exited before ${mountpoint} answered (unmounted at once?)`, 1);
  return code;
}
