import { spawn, spawnSync, execFileSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { mountDirPrefix } from './run.js';

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
  /**
   * SIGTERM the daemon, wait for it, make sure nothing stays mounted, remove temp dirs.
   * Throws (after cleaning up) if the daemon had died on its own before stop() was called: a
   * crash must fail the test even when the tool that hit it did not notice.
   */
  stop(): Promise<void>;
  /** whether the daemon process is still running */
  alive(): boolean;
  /** log lines at level error or above (the daemon logs JSON lines on stderr) */
  errors(): string[];
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
  /** do not pass `--source src` (e.g. `args: ['--policy', file]`, whose file names the backend) */
  omitSource?: boolean;
}

/**
 * LEDGERFS_TEST_BINDING=native|native-ll|fuse-native runs every mounted test against that kernel binding
 * (`--binding`); unset, the daemon uses its default (DEFAULTS.binding).
 */
export const TEST_BINDING = process.env.LEDGERFS_TEST_BINDING || undefined;
export function bindingArgs(): string[] {
  return TEST_BINDING ? ['--binding', TEST_BINDING] : [];
}

/** Start a real `ledgerfs mount` daemon on fresh temp dirs; always pair with stop() in a finally/afterEach. */
export async function startMount(opts: StartOptions = {}): Promise<TestMount> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), mountDirPrefix()));
  const src = opts.src ?? path.join(dir, 'src');
  const mnt = path.join(dir, 'mnt');
  fs.mkdirSync(src, { recursive: true });
  fs.mkdirSync(mnt);
  opts.populate?.(src);
  let log = '';
  const source = opts.omitSource ? [] : ['--source', src];
  const daemon = spawn(process.execPath, [CLI, 'mount', ...bindingArgs(), ...source, ...(opts.args ?? []), mnt], {
    stdio: ['ignore', 'pipe', 'pipe'],
    // the journal's default state dir goes under XDG_STATE_HOME: keep it in this temp dir
    env: { ...process.env, XDG_STATE_HOME: path.join(dir, 'state-home'), ...opts.env },
  });
  daemon.stdout?.on('data', (d: Buffer) => (log += d.toString()));
  daemon.stderr?.on('data', (d: Buffer) => (log += d.toString()));
  let exited = false;
  let stopping = false;
  let stopped = false;
  const exitedP = new Promise<void>((r) => daemon.on('exit', () => ((exited = true), r())));
  const logs = () => log;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    const diedEarly = exited;
    stopping = true;
    if (!exited) daemon.kill('SIGTERM');
    const timer = setTimeout(() => !exited && daemon.kill('SIGKILL'), 10_000);
    await exitedP;
    clearTimeout(timer);
    forceUnmount(mnt);
    fs.rmSync(dir, { recursive: true, force: true });
    if (diedEarly) throw new Error(`the ledgerfs daemon died during the test (exit ${daemon.exitCode ?? daemon.signalCode})\n--- daemon log ---\n${log}`);
  };
  const alive = () => !exited && !stopping;
  const errors = () => log.split('\n').filter((l) => /^\{.*"level":(50|60)/.test(l));
  try {
    await waitFor(() => exited || isMounted(mnt), 15_000, `mount at ${mnt}`, logs);
    if (exited) throw new Error(`daemon exited before mounting\n${log}`);
  } catch (err) {
    await stop().catch(() => undefined);
    throw err;
  }
  return { mnt, src, dir, daemon, logs, stop, alive, errors };
}

/**
 * A tool stuck on a hung daemon must fail the test, not hang the run (synchronous calls cannot be
 * interrupted by vitest's test timeout). SIGKILL: a process waiting on a FUSE request only
 * wakes for a fatal signal.
 */
const HUNG = { timeout: 120_000, killSignal: 'SIGKILL' as const };

export interface RunResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** Like sh() but never throws: for commands that are expected to fail. */
export function run(cmd: string, cwd: string, opts: { input?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): RunResult {
  const r = spawnSync('bash', ['-c', cmd], {
    cwd, encoding: 'utf8', input: opts.input, env: opts.env ? { ...process.env, ...opts.env } : undefined,
    maxBuffer: 64 << 20, ...HUNG, timeout: opts.timeoutMs ?? HUNG.timeout,
  });
  if (r.error) throw r.error;
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Run a python3 program (text on stdin) in `cwd`; returns stdout; throws with stderr on failure. */
export function py(code: string, cwd: string, args: string[] = []): string {
  try {
    return execFileSync('python3', ['-', ...args], { cwd, encoding: 'utf8', input: code, stdio: ['pipe', 'pipe', 'pipe'], maxBuffer: 64 << 20, ...HUNG });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`python3 failed: ${e.stderr || e.message}`);
  }
}

/** Run a shell command (bash -c) in `cwd`; returns stdout; throws with stderr on failure. */
export function sh(cmd: string, cwd: string, input?: string): string {
  try {
    return execFileSync('bash', ['-c', cmd], { cwd, encoding: 'utf8', input, stdio: ['pipe', 'pipe', 'pipe'], maxBuffer: 64 << 20, ...HUNG });
  } catch (err) {
    const e = err as { stderr?: string; status?: number; message: string };
    // keep the command's own complaint in the test failure, not just "Command failed"
    throw new Error(`\`${cmd}\` failed (exit ${e.status}): ${e.stderr || e.message}`);
  }
}

/** The daemon's log once it matches `re` (its banner reaches us a little after the mount appears). */
export async function logsMatching(m: TestMount, re: RegExp, ms = 10_000): Promise<string> {
  const end = Date.now() + ms;
  while (!re.test(m.logs()) && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  return m.logs();
}
