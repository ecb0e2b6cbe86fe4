import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const REPO = path.resolve(import.meta.dirname, '../..');
export const CLI = path.join(REPO, 'bin/ledgerfs.js');

export interface TestMount {
  /** the mount point: run real tools here */
  mnt: string;
  /** the backend directory behind it */
  src: string;
  /** the temp dir holding both (and anything else a test wants) */
  dir: string;
  daemon: ChildProcess;
  /** stderr of the daemon so far (logs), for assertions and failure messages */
  logs(): string;
  /** SIGTERM the daemon, wait for it, make sure nothing stays mounted, remove temp dirs */
  stop(): Promise<void>;
}

function isMounted(mnt: string): boolean {
  const text = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  return text.split('\n').some((l) => l.split(' ')[4] === mnt);
}

export function forceUnmount(mnt: string): void {
  for (const cmd of [['fusermount3', '-uz', mnt], ['umount', '-l', mnt]]) {
    if (!isMounted(mnt)) return;
    try {
      execFileSync(cmd[0] as string, cmd.slice(1), { stdio: 'ignore' });
    } catch {
      /* try the next */
    }
  }
}

async function waitFor(cond: () => boolean, ms: number, what: string, logs: () => string): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}\n--- daemon log ---\n${logs()}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

export interface StartOptions {
  /** extra CLI arguments after `mount` (before the mount point) */
  args?: string[];
  /** fill the source directory before mounting */
  populate?: (src: string) => void;
  /** use this source directory instead of a fresh one */
  src?: string;
  env?: NodeJS.ProcessEnv;
}

/** Start a real `ledgerfs mount` daemon on fresh temp dirs; always pair with stop() in a finally/afterEach. */
export async function startMount(opts: StartOptions = {}): Promise<TestMount> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ledgerfs-test-'));
  const src = opts.src ?? path.join(dir, 'src');
  const mnt = path.join(dir, 'mnt');
  fs.mkdirSync(src, { recursive: true });
  fs.mkdirSync(mnt);
  opts.populate?.(src);
  let log = '';
  const daemon = spawn(process.execPath, [CLI, 'mount', '--source', src, ...(opts.args ?? []), mnt], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...opts.env },
  });
  daemon.stdout?.on('data', (d: Buffer) => (log += d.toString()));
  daemon.stderr?.on('data', (d: Buffer) => (log += d.toString()));
  let exited = false;
  const exitedP = new Promise<void>((r) => daemon.on('exit', () => ((exited = true), r())));
  const logs = () => log;
  const stop = async () => {
    if (!exited) daemon.kill('SIGTERM');
    const timer = setTimeout(() => !exited && daemon.kill('SIGKILL'), 10_000);
    await exitedP;
    clearTimeout(timer);
    forceUnmount(mnt);
    fs.rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitFor(() => exited || isMounted(mnt), 15_000, `mount at ${mnt}`, logs);
    if (exited) throw new Error(`daemon exited before mounting\n${log}`);
  } catch (err) {
    await stop();
    throw err;
  }
  return { mnt, src, dir, daemon, logs, stop };
}

/** Run a shell command (bash -c) in `cwd`; returns stdout; throws with stderr on failure. */
export function sh(cmd: string, cwd: string, input?: string): string {
  return execFileSync('bash', ['-c', cmd], { cwd, encoding: 'utf8', input, stdio: ['pipe', 'pipe', 'pipe'], maxBuffer: 64 << 20 });
}
