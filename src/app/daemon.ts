import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DEFAULTS } from '../config/index.js';
import { canonicalMountpoint } from '../fuse/index.js';
import { UserError } from './errors.js';
import { mountAnswersStat } from './readiness.js';

/**
 * Set in the environment of the process `mount --daemon` starts: the descriptor on which it says
 * "banner written" (so that its parent relays the whole banner before it leaves).
 */
const DAEMON_ENV = 'LEDGERFS_DAEMON_BANNER_FD';
const BANNER_FD = 3;

let bannerFd: number | null | undefined;

/** Whether this process is `mount --daemon`'s daemon (read once: its own children do not inherit it). */
export function isDaemonChild(): boolean {
  if (bannerFd === undefined) {
    const v = process.env[DAEMON_ENV];
    bannerFd = v !== undefined && /^\d+$/.test(v) ? Number(v) : null;
    delete process.env[DAEMON_ENV];
  }
  return bannerFd !== null;
}

/** The daemon: its banner is on stderr; the parent may go once the mount answers too. */
export function bannerWritten(): void {
  if (!isDaemonChild()) return;
  const fd = bannerFd as number;
  try {
    fs.writeSync(fd, 'banner\n');
    fs.closeSync(fd);
  } catch {
    /* the parent is gone already */
  }
  bannerFd = null;
}

const SIGNALS = os.constants.signals as Record<string, number>;

/**
 * `mount --daemon`: start the same command without --daemon as a detached process (its own
 * session, no terminal), relay what it says on stderr (the banner, or the sentence of its
 * failure), and return once the mount answers stat (looked at from here, by a child of this
 * process, never by the daemon)
 * and its banner is through, or once the daemon has exited (its exit code). The daemon's logs go
 * to --log-file, else nowhere.
 */
export async function startDaemon(argv: readonly string[], mountpointArg: string, opts: { printPid?: boolean; timeoutSec?: number } = {}): Promise<number> {
  const timeoutSec = opts.timeoutSec ?? DEFAULTS.daemonReadyTimeoutSec;
  // (the name the mount table will give it: a symlinked path never matched, and the wait timed out)
  const mountpoint = canonicalMountpoint(mountpointArg);
  const args = argv.slice(1).filter((a) => a !== '--daemon');
  const child = spawn(process.execPath, [...process.execArgv, ...args], {
    detached: true,
    stdio: ['ignore', 'ignore', 'pipe', 'pipe'],
    env: { ...process.env, [DAEMON_ENV]: String(BANNER_FD) },
  });
  child.stderr?.on('data', (d: Buffer) => process.stderr.write(d));
  let bannerDone = false;
  const bannerPipe = child.stdio[BANNER_FD] as NodeJS.ReadableStream | null;
  bannerPipe?.on('data', () => (bannerDone = true));
  bannerPipe?.on('error', () => undefined);
  let exited: number | null = null;
  const gone = new Promise<void>((resolve) => {
    child.once('close', (code, signal) => {
      exited = code ?? 128 + (signal ? (SIGNALS[signal] ?? 0) : 0);
      resolve();
    });
    child.once('error', (err) => {
      process.stderr.write(`ledgerfs: cannot start the daemon: ${err.message}\n`);
      exited = 1;
      resolve();
    });
  });
  // Ctrl-C while waiting: the daemon (in a session of its own) would carry on; stop it too
  let interrupted = false;
  const onSignal = () => {
    interrupted = true;
    child.kill('SIGTERM');
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const deadline = Date.now() + timeoutSec * 1000;
    while (exited === null) {
      if (!interrupted && bannerDone && (await mountAnswersStat(mountpoint))) {
        // let the daemon go: its stderr has nobody to read it from now on
        child.stderr?.destroy();
        (bannerPipe as { destroy?: () => void } | null)?.destroy?.();
        child.unref();
        if (opts.printPid !== false) process.stdout.write(`${child.pid}\n`);
        return 0;
      }
      if (Date.now() > deadline && !interrupted) {
        child.kill('SIGTERM');
        throw new UserError(`the daemon (pid ${child.pid}) did not make ${mountpoint} answer within ${timeoutSec} s; it was sent SIGTERM (its log: --log-file)`, 1);
      }
      await Promise.race([gone, new Promise((r) => setTimeout(r, 50))]);
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  if (interrupted) return 130;
  const code = exited as number;
  if (code === 0) throw new UserError(`the daemon exited before ${mountpoint} answered (unmounted at once?)`, 1);
  return code;
}
