import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CLI, forceUnmount } from './mount.js';
import { mountDirPrefix, mountPoints } from './run.js';

/*
 * Sandboxed tests run the real `ledgerfs run` (bin/ledgerfs.js) as a child process, which mounts
 * the workspace itself under its TMPDIR. Each test's TMPDIR lies in a ledgerfs-test-<run>-* dir,
 * so the global teardown's leak check covers these mounts too.
 */

export interface RunOutcome {
  /** exit code (128+N for a signal, as a shell reports it) */
  code: number;
  stdout: string;
  stderr: string;
  /** the session id `ledgerfs run` printed, if any */
  session: string | undefined;
}

export interface Running {
  child: ChildProcess;
  /** the run and everything holding its stdout/stderr (its program, its daemon) are gone */
  done: Promise<RunOutcome>;
  /** the run process itself is gone (its exit code, 128+N for a signal) */
  exited: Promise<number>;
  /** stderr so far */
  stderr(): string;
}

export interface SandboxDir {
  /** holds everything below */
  dir: string;
  /** the workspace source (--source) */
  src: string;
  /** the journal (--state) */
  state: string;
  /** TMPDIR of `ledgerfs run`: where its mount point is made */
  tmp: string;
  /** start `ledgerfs run ARGS` */
  start(args: string[], opts?: { input?: string; env?: NodeJS.ProcessEnv }): Running;
  /** `ledgerfs run ARGS` to the end */
  run(args: string[], opts?: { input?: string; env?: NodeJS.ProcessEnv }): Promise<RunOutcome>;
  /** any other ledgerfs command, synchronously; throws if it fails */
  cli(args: string[]): string;
  /** mounts below `dir` (there must be none between runs) */
  mounts(): string[];
  /** unmount anything left (and say so), remove the temp dir */
  cleanup(): void;
}

const SIGNALS = os.constants.signals as Record<string, number>;

export function sandboxDir(populate?: (src: string) => void): SandboxDir {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), mountDirPrefix()));
  const src = path.join(dir, 'src');
  const state = path.join(dir, 'state');
  const tmp = path.join(dir, 'tmp');
  fs.mkdirSync(src);
  fs.mkdirSync(tmp);
  populate?.(src);
  const env = (extra?: NodeJS.ProcessEnv) => ({ ...process.env, TMPDIR: tmp, XDG_STATE_HOME: path.join(dir, 'state-home'), ...extra });
  const mounts = () => mountPoints().filter((m) => m.startsWith(`${dir}/`));

  const start: SandboxDir['start'] = (args, opts = {}) => {
    const child = spawn(process.execPath, [CLI, 'run', ...args], { cwd: dir, env: env(opts.env), stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr?.on('data', (d: Buffer) => (err += d.toString()));
    child.stdin?.on('error', () => undefined); // a program that does not read its input
    child.stdin?.end(opts.input ?? '');
    // A hung run must fail the test, not the whole suite.
    const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
    const exited = new Promise<number>((resolve) => {
      child.once('exit', (code, signal) => resolve(code ?? 128 + (signal ? (SIGNALS[signal] ?? 0) : 0)));
    });
    const done = new Promise<RunOutcome>((resolve) => {
      child.once('close', (code, signal) => {
        clearTimeout(timer);
        resolve({ code: code ?? 128 + (signal ? (SIGNALS[signal] ?? 0) : 0), stdout: out, stderr: err, session: /session (\S+)/.exec(err)?.[1] });
      });
    });
    return { child, done, exited, stderr: () => err };
  };

  return {
    dir, src, state, tmp, start, mounts,
    run: (args, opts) => start(args, opts).done,
    cli(args) {
      const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: env(), timeout: 60_000 });
      if (r.status !== 0) throw new Error(`ledgerfs ${args.join(' ')} exited ${r.status}\n${r.stderr}\n${r.stdout}`);
      return r.stdout;
    },
    cleanup() {
      const left = mounts();
      for (const m of left.reverse()) forceUnmount(m);
      // never remove a tree with a live mount in it: that would delete through the mount
      if (mounts().length === 0) fs.rmSync(dir, { recursive: true, force: true });
      if (left.length) throw new Error(`mounts left behind by ledgerfs run (now unmounted): ${left.join(', ')}`);
    },
  };
}

/** Processes whose command line starts with `args` (e.g. ['sleep', a unique duration]). */
export function processesWith(args: string[]): number[] {
  const out: number[] = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const argv = fs.readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0');
      if (args.every((a, j) => argv[j] === a)) out.push(Number(name));
    } catch {
      /* gone */
    }
  }
  return out;
}

export async function waitUntil(cond: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, 50));
  }
  return true;
}

/** The A/M/D/R lines of `ledgerfs diff`, without their size notes. */
export function changeLines(diff: string): string[] {
  return diff
    .split('\n')
    .filter((l) => /^[AMDR] \//.test(l))
    .map((l) => l.replace(/ {2}\(.*$/, '').trimEnd())
    .sort();
}
