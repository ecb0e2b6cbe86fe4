import { spawn, spawnSync, execFileSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DEFAULTS } from '../../src/config/defaults.js';
import { mountDirPrefix } from './run.js';
import { EXTERNAL_GCS_ENDPOINT, createExternalBucket, externalBucketName } from './gcs-external.js';
import { isFuseMount, mountAt, unmountPathSync } from '../../src/fuse/mounts.js';

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
  /** how CLI commands name this workspace (`--source DIR`, or `--source gs://BUCKET` on GCS) */
  workspaceArgs: string[];
  /** environment CLI commands need for it (LEDGERFS_GCS_ENDPOINT on GCS) */
  env: NodeJS.ProcessEnv;
  /** GCS runs: the emulator and bucket behind the mount */
  gcs?: { emulator: TestEmulator; bucket: string; env: NodeJS.ProcessEnv };
}

function isMounted(mnt: string): boolean {
  return mountAt(mnt) !== undefined;
}

/** Detach whatever FUSE mount a test left at `mnt` (never a non-FUSE mount). */
export function forceUnmount(mnt: string): void {
  unmountPathSync(mnt, { lazy: true, accept: isFuseMount });
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
  /** GCS runs: mount this emulator and bucket (another daemon's) instead of fresh ones */
  gcs?: { emulator: TestEmulator; bucket: string };
  /** run the daemon under this command, which must exec it (e.g. ['prlimit', '--nofile=512:512']) */
  wrap?: string[];
}

/**
 * LEDGERFS_TEST_BACKEND=gcs runs the mounted tests on the GCS backend: each mount gets its own
 * emulator process on 127.0.0.1 (unless given one), a bucket, and `--source gs://BUCKET`. The
 * test's `src` is then a second ledgerfs daemon mounting the same bucket with every cache off
 * (metadata TTL 0, kernel timeouts 0, no journal): `populate` fills the bucket through it, and
 * tests that look at (or change) the source look at (or change) the bucket.
 */
export const TEST_BACKEND: 'local' | 'gcs' = process.env.LEDGERFS_TEST_BACKEND === 'gcs' ? 'gcs' : 'local';
export const onGcs = TEST_BACKEND === 'gcs';

/** An emulator in a child process (tests block their own event loop with synchronous tools). */
export interface TestEmulator {
  url: string;
  /** the emulator's process; absent for an external one (LEDGERFS_TEST_GCS_ENDPOINT) */
  pid?: number;
  stop(): Promise<void>;
}

/** The external emulator of LEDGERFS_TEST_GCS_ENDPOINT with `buckets` made there; stop() leaves it running. */
export async function externalEmulator(buckets: string[]): Promise<TestEmulator> {
  const url = EXTERNAL_GCS_ENDPOINT as string;
  for (const b of buckets) await createExternalBucket(url, b);
  return { url, stop: async () => undefined };
}

/** `args`: more emulator arguments, e.g. `['--object-rate-limit', '1,1']` */
export async function startTestEmulator(buckets: string[], port = 0, args: string[] = []): Promise<TestEmulator> {
  // --exit-with-stdin: the emulator ends with this worker however it ends (stdin is our pipe)
  const child = spawn(process.execPath, [path.join(REPO, 'dist/dev/gcs-emulator/main.js'), '--port', String(port), '--exit-with-stdin', ...args, ...buckets.flatMap((b) => ['--bucket', b])], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  (child.stdin as unknown as { unref?: () => void } | null)?.unref?.();
  let out = '';
  let err = '';
  child.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<void>((r) => child.on('exit', () => r()));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`emulator did not start: ${err}`)), 15_000);
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      const line = out.split('\n')[0];
      if (out.includes('\n') && line) {
        clearTimeout(timer);
        resolve((JSON.parse(line) as { url: string }).url);
      }
    });
    child.on('exit', (code) => reject(new Error(`emulator exited (${code}): ${err}`)));
  });
  return {
    url,
    pid: child.pid as number,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}

const externalBuckets = new Map<string, string>();
function externalSourceBucket(src: string): string {
  let b = externalBuckets.get(src);
  if (!b) externalBuckets.set(src, (b = externalBucketName('ledgerfs-test')));
  return b;
}

const shared = new Map<string, Promise<TestEmulator>>();
const sharedPids = new Set<number>();
let exitHook = false;

function sharedEmulator(key: string, bucket: string): Promise<TestEmulator> {
  let e = shared.get(key);
  if (!e) {
    e = startTestEmulator([bucket]);
    void e.then((em) => em.pid !== undefined && sharedPids.add(em.pid), () => undefined);
    shared.set(key, e);
    if (!exitHook) {
      exitHook = true;
      process.once('exit', () => {
        for (const pid of sharedPids) {
          try {
            process.kill(pid, 'SIGTERM');
          } catch {
            /* gone already */
          }
        }
      });
    }
  }
  return e;
}

/**
 * Stop the emulators of the sources tests named (each outlives its mounts for a restart) once
 * their file is done: a worker runs many files (vitest.config: isolate false), and would
 * otherwise keep them all until it exits. (test/helpers/per-file.ts)
 */
export async function stopSharedEmulators(): Promise<void> {
  const all = [...shared.values()];
  shared.clear();
  for (const e of all) {
    const em = await e.catch(() => undefined);
    if (!em) continue;
    await em.stop();
    if (em.pid !== undefined) sharedPids.delete(em.pid);
  }
}

interface Daemon {
  daemon: ChildProcess;
  logs(): string;
  stop(): Promise<{ diedEarly: boolean }>;
  alive(): boolean;
}

let daemonCount = 0;

/** A `ledgerfs mount` child at `mnt`, waited for until mounted; `wrap`: a command it runs under (e.g. prlimit). */
async function spawnDaemon(args: string[], mnt: string, env: NodeJS.ProcessEnv, wrap: string[] = []): Promise<Daemon> {
  // The daemon logs into a file, not a pipe: it writes its log synchronously, and a pipe that
  // fills while this process is blocked in spawnSync (a CLI call, a tool) would stop the daemon
  // mid-request until the call timed out.
  const logFile = path.join(os.tmpdir(), `ledgerfs-test-daemon-${process.pid}-${++daemonCount}.log`);
  const out = fs.openSync(logFile, 'a');
  let final: string | null = null;
  const readLog = () => {
    try {
      return fs.readFileSync(logFile, 'utf8');
    } catch {
      return '';
    }
  };
  // a wrapper that execs (prlimit, env) keeps the pid: signals still reach the daemon itself
  const [cmd, ...argv] = [...wrap, process.execPath, CLI, 'mount', ...bindingArgs(), ...args, mnt] as [string, ...string[]];
  const daemon = spawn(cmd, argv, { stdio: ['ignore', out, out], env });
  fs.closeSync(out);
  daemon.on('exit', () => {
    final = readLog();
    fs.rmSync(logFile, { force: true });
  });
  let exited = false;
  let stopping = false;
  const exitedP = new Promise<void>((r) => daemon.on('exit', () => ((exited = true), r())));
  const logs = () => final ?? readLog();
  const stop = async () => {
    const diedEarly = exited && !stopping;
    stopping = true;
    if (!exited) daemon.kill('SIGTERM');
    // a mount some process still uses (a holder the test just killed may linger a moment) is
    // not unmounted by one SIGTERM: the daemon names the holders and keeps serving; a second
    // detaches it lazily
    // (only then: a clean unmount that takes its time, e.g. GCS's last mirror upload, is waited for)
    const busyBefore = logs().split('is in use by pid').length;
    const again = setInterval(() => {
      if (!exited && logs().split('is in use by pid').length > busyBefore) {
        clearInterval(again);
        daemon.kill('SIGTERM');
      }
    }, 100);
    const timer = setTimeout(() => {
      if (exited) return;
      // a daemon that outlives a SIGTERM by 10 s costs the run those 10 s each time: name it
      process.stderr.write(`test mount at ${mnt}: the daemon did not exit within 10 s of SIGTERM; killed (SIGKILL)\n`);
      daemon.kill('SIGKILL');
    }, 10_000);
    await exitedP;
    clearInterval(again);
    clearTimeout(timer);
    forceUnmount(mnt);
    return { diedEarly };
  };
  try {
    await waitFor(() => exited || isMounted(mnt), 15_000, `mount at ${mnt}`, logs);
    if (exited) throw new Error(`daemon exited before mounting\n${logs()}`);
  } catch (err) {
    await stop().catch(() => undefined);
    throw err;
  }
  return { daemon, logs, stop, alive: () => !exited && !stopping };
}

/**
 * LEDGERFS_TEST_BINDING=native-ll|fuse-native runs every mounted test against that kernel binding
 * (`--binding`); unset, the daemon uses its default (DEFAULTS.binding).
 */
export const TEST_BINDING = process.env.LEDGERFS_TEST_BINDING || undefined;
export function bindingArgs(): string[] {
  return TEST_BINDING ? ['--binding', TEST_BINDING] : [];
}
/** the binding mounts run: the one named, else the CLI's default (on every backend) */
export const RUNNING_BINDING = TEST_BINDING ?? DEFAULTS.binding;
/** fallocate's modes (punch-hole): fuse-native (libfuse 2) has no fallocate op, and GCS keeps no blocks */
export const PUNCHES_HOLES = RUNNING_BINDING !== 'fuse-native' && !onGcs;

/** Start a real `ledgerfs mount` daemon on fresh temp dirs; always pair with stop() in a finally/afterEach. */
export async function startMount(opts: StartOptions = {}): Promise<TestMount> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), mountDirPrefix()));
  const src = opts.src ?? path.join(dir, 'src');
  const mnt = path.join(dir, 'mnt');
  fs.mkdirSync(src, { recursive: true });
  fs.mkdirSync(mnt);
  // the journal's default state dir goes under XDG_STATE_HOME: keep it in this temp dir
  let env: NodeJS.ProcessEnv = { ...process.env, XDG_STATE_HOME: path.join(dir, 'state-home'), ...opts.env };
  let source = opts.omitSource ? [] : ['--source', src];
  const cleanups: Array<() => Promise<unknown>> = [];
  const cleanup = async () => {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
    fs.rmSync(dir, { recursive: true, force: true });
  };
  let gcs: TestMount['gcs'];
  let main: Daemon;
  try {
    if ((onGcs || opts.gcs) && !opts.omitSource) {
      let bucket = opts.gcs?.bucket ?? 'ledgerfs-test';
      let emulator = opts.gcs?.emulator;
      if (!emulator && EXTERNAL_GCS_ENDPOINT) {
        // one bucket per source (a source the test names is mounted again on the same bucket)
        bucket = opts.src ? externalSourceBucket(fs.realpathSync(opts.src)) : externalBucketName('ledgerfs-test');
        emulator = await externalEmulator([bucket]);
      } else if (!emulator && opts.src) {
        // A source the test names outlives the mount (restart tests mount it again): so does
        // its bucket, until this worker exits.
        emulator = await sharedEmulator(fs.realpathSync(opts.src), bucket);
      } else if (!emulator) {
        const own = await startTestEmulator([bucket]);
        cleanups.push(() => own.stop());
        emulator = own;
      }
      env = { ...env, LEDGERFS_GCS_ENDPOINT: emulator.url };
      source = ['--source', `gs://${bucket}`];
      // A source the test filled itself before mounting goes into the bucket through the mirror.
      const seed = fs.readdirSync(src).length ? `${src}.seed-${process.pid}` : undefined;
      if (seed) {
        fs.renameSync(src, seed);
        fs.mkdirSync(src);
        cleanups.push(async () => fs.rmSync(seed, { recursive: true, force: true }));
      }
      const mirror = await spawnDaemon(
        [...source, '--no-journal', '--metadata-ttl', '0', '--attr-timeout', '0', '--entry-timeout', '0', '--state', path.join(dir, 'mirror-state')],
        src,
        env,
      );
      cleanups.push(() => mirror.stop());
      if (seed) execFileSync('cp', ['-a', `${seed}/.`, src]);
      gcs = { emulator, bucket, env: { LEDGERFS_GCS_ENDPOINT: emulator.url } };
      if (!(opts.args ?? []).includes('--metadata-ttl')) source.push('--metadata-ttl', process.env.LEDGERFS_TEST_GCS_TTL ?? '0.2');
    }
    opts.populate?.(src);
    main = await spawnDaemon([...source, ...(opts.args ?? [])], mnt, env, opts.wrap);
  } catch (err) {
    await cleanup();
    throw err;
  }
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    const { diedEarly } = await main.stop();
    await cleanup();
    if (diedEarly) throw new Error(`the ledgerfs daemon died during the test (exit ${main.daemon.exitCode ?? main.daemon.signalCode})\n--- daemon log ---\n${main.logs()}`);
  };
  const errors = () => main.logs().split('\n').filter((l) => /^\{.*"level":(50|60)/.test(l));
  return {
    mnt, src, dir, daemon: main.daemon, logs: main.logs, stop, alive: main.alive, errors,
    workspaceArgs: source.slice(0, 2), env: gcs?.env ?? {}, ...(gcs ? { gcs } : {}),
  };
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
