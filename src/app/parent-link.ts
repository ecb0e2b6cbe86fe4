import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DEFAULTS } from '../config/index.js';
import { CLI_SCRIPT } from './self.js';

/*
 * `ledgerfs run` serves the workspace from a child `ledgerfs mount --parent-link` process
 * rather than in-process: if the run is killed (even with SIGKILL), the child's IPC channel
 * closes, and the child unmounts and exits, so a killed run leaves no mount behind. An
 * in-process daemon killed that way would leave a dead mount ("transport endpoint is not
 * connected") that only a manual unmount clears.
 */

/** What the daemon tells its parent once the workspace is mounted. */
export interface LinkedMount {
  type: 'mounted';
  mountpoint: string;
  /** null with --no-journal */
  session: string | null;
  stateDir: string | null;
  /** what the journal's start found (a torn tail cut, crash leftovers resolved) */
  note?: string;
}

// ---- daemon side ---------------------------------------------------------------------------

/**
 * In a daemon started by `startLinkedDaemon`: report the mount, and call `onParentGone` when
 * the parent disconnects (it is done, or it died). Returns false when there is no parent link
 * (the flag was given by hand): then nothing watches, and the mount behaves as usual.
 */
export function serveParent(info: LinkedMount, onParentGone: () => void): boolean {
  if (typeof process.send !== 'function') return false;
  if (!process.connected) {
    onParentGone(); // the parent died while we were mounting
    return true;
  }
  // `ledgerfs run` says goodbye when its program has ended; without it, the parent died
  let finished = false;
  process.on('message', (m: { type?: string }) => {
    if (m?.type === 'done') finished = true;
  });
  process.once('disconnect', () => {
    if (!finished) stopOrphanedSandboxes(info.mountpoint);
    onParentGone();
  });
  // with a callback, a parent that died a moment ago is an error to ignore, not an uncaught one
  // (the 'disconnect' above follows and unmounts)
  process.send(info, undefined, {}, () => undefined);
  return true;
}

/** bwrap processes that bind `mountpoint` (a fresh temp dir: no one else's sandbox names it). */
function sandboxesOn(mountpoint: string): number[] {
  const out: number[] = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const argv = fs.readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0');
      if (path.basename(argv[0] ?? '') === 'bwrap' && argv.some((a, i) => a === mountpoint && argv[i - 1] === '--bind')) out.push(Number(name));
    } catch {
      /* gone */
    }
  }
  return out;
}

/**
 * bwrap --die-with-parent arms itself a moment after it starts; a parent killed in that moment
 * (or between its fork and bwrap's exec) leaves the sandbox running, and its copy of the mount
 * keeps ours busy. Kill such sandboxes (their namespaces' processes die with them); look again
 * for a few seconds, for one that was still being exec'ed at the first look.
 */
function stopOrphanedSandboxes(mountpoint: string): void {
  const sweep = () => {
    for (const pid of sandboxesOn(mountpoint)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone meanwhile */
      }
    }
  };
  sweep();
  // these keep the daemon alive until the last look
  for (const ms of DEFAULTS.run.orphanSweepMs) setTimeout(sweep, ms);
}

/** Let the daemon exit once its mount is gone (an open channel would keep it alive). */
export function releaseParent(): void {
  if (process.connected) process.disconnect();
}

// ---- parent side ---------------------------------------------------------------------------

export interface LinkedDaemon {
  child: ChildProcess;
  mount: LinkedMount;
  /** resolves with the daemon's exit code (or 128+signal) */
  exited: Promise<number>;
}

export class LinkedDaemonError extends Error {}

/** Let the daemon go: the program has ended, unmount. */
export function releaseDaemon(daemon: LinkedDaemon): void {
  if (!daemon.child.connected) return;
  daemon.child.send({ type: 'done' }, () => {
    if (daemon.child.connected) daemon.child.disconnect();
  });
}



/** A process's exit as a shell reports it: its code, or 128 + the signal that killed it. */
export function exitCodeOf(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  return 128 + (signal ? (os.constants.signals[signal] ?? 0) : 0);
}

/**
 * Start `ledgerfs mount --parent-link ARGS` and wait until it has mounted. The daemon gets its
 * own session (`detached`), so a Ctrl-C at the terminal reaches the run and the program, never
 * the file system under them; its stderr is ours (its logs, and its errors if it cannot mount).
 */
export function startLinkedDaemon(mountArgs: string[], timeoutMs: number): Promise<LinkedDaemon> {
  const child = spawn(process.execPath, [...process.execArgv, CLI_SCRIPT, 'mount', '--parent-link', ...mountArgs], {
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    detached: true,
  });
  const exited = new Promise<number>((resolve) => child.once('exit', (code, signal) => resolve(exitCodeOf(code, signal))));
  return new Promise<LinkedDaemon>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGTERM');
      reject(new LinkedDaemonError(`the workspace was not mounted within ${timeoutMs / 1000} s`));
    }, timeoutMs);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(new LinkedDaemonError(`cannot start the file system daemon: ${err.message}`));
    });
    child.once('message', (m: LinkedMount) => {
      clearTimeout(timer);
      resolve({ child, mount: m, exited });
    });
    void exited.then((code) => {
      clearTimeout(timer);
      // its own error message is already on our stderr
      reject(new LinkedDaemonError(`the workspace could not be mounted (the daemon exited with code ${code}; see above)`));
    });
  });
}
