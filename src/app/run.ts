import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Writable } from 'node:stream';
import { type BindingName, ConfigError, DEFAULTS, gcsSource, loadMountFile, type LogLevel, type PresetName } from '../config/index.js';
import { isLedgerfsMount, mountAt, unmountPath } from '../fuse/index.js';
import { liveDaemon, newSessionId, realish, rememberedWorkspace, resolveStateDir, StateDirError, within } from '../journal/index.js';
import { atProblem, bwrapArgs, checkNamespaces, closeStrayDescriptors, commandProblem, defaultSandboxUser, findBwrap, SandboxError, sandboxFilter, type SandboxUser } from '../sandbox/index.js';
import { UserError } from './errors.js';
import { exitCodeOf, LinkedDaemonError, releaseDaemon, startLinkedDaemon, type LinkedDaemon } from './parent-link.js';

/** bwrap's descriptor that carries the seccomp program (--seccomp 3) */
const SECCOMP_FD = 3;

/** `ledgerfs run`'s own failures (usage, bwrap, mount), told apart from the program's codes as docker does. */
export const RUN_FAILED = 125;
/** `ledgerfs run -- nosuchprog`: what a shell answers for a command it cannot find. */
export const COMMAND_NOT_FOUND = 127;

export interface RunOptions {
  source?: string;
  policy?: string;
  state?: string;
  at: string;
  network?: boolean;
  session?: string;
  ro: string[];
  /** a running ledgerfs mount to use instead of mounting */
  mount?: string;
  allowOther?: boolean;
  /** GCS: when close(2) returns in the mount run makes (mount --durability) */
  durability?: 'bucket' | 'journal';
  /** kernel binding of the mount run makes (default: DEFAULTS.binding) */
  binding?: BindingName;
  logLevel: LogLevel;
  /** with --source: whose hiding applies (default sandboxed: credentials hidden; trusted: nothing) */
  preset?: PresetName;
  /** mount --staged: the run's changes wait for apply */
  staged?: boolean;
  /** whom the program runs as (default: defaultSandboxUser()) */
  uid?: string;
  gid?: string;
  /** the old way: the caller's own uid with its capabilities, no user namespace, no seccomp filter */
  privileged?: boolean;
}

/** The largest id a user namespace maps (2^32 - 2: -1 means "no change" to the kernel). */
const MAX_ID = 0xfffffffe;

function idOption(flag: string, v: string): number {
  const n = Number(v);
  if (!/^\d+$/.test(v) || !Number.isSafeInteger(n) || n > MAX_ID) fail(`${flag} ${v}: expected a numeric id (0 to ${MAX_ID}), e.g. ${flag} 1000`);
  return n;
}

/** Whom the program runs as, or null for --privileged. --uid alone gives the same number as gid. */
export function sandboxUser(o: Pick<RunOptions, 'uid' | 'gid' | 'privileged'>): SandboxUser | null {
  if (o.privileged) {
    if (o.uid !== undefined || o.gid !== undefined) fail('--uid/--gid cannot be used with --privileged: a privileged program runs as the caller, capabilities and all');
    return null;
  }
  const def = defaultSandboxUser();
  const uid = o.uid !== undefined ? idOption('--uid', o.uid) : def.uid;
  const gid = o.gid !== undefined ? idOption('--gid', o.gid) : o.uid !== undefined ? uid : def.gid;
  return { uid, gid };
}

function fail(message: string): never {
  throw new UserError(message, RUN_FAILED);
}

/** `a` is `b`, or one holds the other. */
const overlaps = (a: string, b: string): boolean => within(a, b) || within(b, a);

/**
 * A read-only bind of the backend directory or the journal would let the program read past the
 * policy (hidden files, other roots, before-images): refuse `--ro` paths that reach them.
 */
function checkReadOnlyPaths(ro: string[], guarded: { what: string; dir: string }[]): void {
  for (const p of ro) {
    const real = realish(p);
    for (const g of guarded) {
      if (overlaps(real, realish(g.dir))) {
        fail(`--ro ${p} would show the program ${g.what} (${g.dir}) directly, past the policy; bind something that does not contain it`);
      }
    }
  }
}

/**
 * What a running mount (--mount) serves, as its journal remembers it: the backend directory, to
 * be kept from the program like the flags' own. Nothing when the journal is not found or the
 * policy no longer loads (the mount itself then says what it serves).
 */
function runningMountGuarded(stateDir: string | null): { what: string; dir: string }[] {
  const w = stateDir ? rememberedWorkspace(stateDir) : null;
  if (!w) return [];
  if (w.source !== undefined) return gcsSource(w.source) ? [] : [{ what: 'the mount\'s source', dir: w.source }];
  try {
    const config = loadMountFile(w.policy as string);
    return config.backend.type === 'local' ? [{ what: 'the mount\'s backend', dir: config.backend.path }] : [];
  } catch {
    return [];
  }
}

interface Workspace {
  /** host path of the mounted view */
  mountpoint: string;
  session: string | null;
  stateDir: string | null;
  /** null when the mount is someone else's (--mount) */
  daemon: LinkedDaemon | null;
  /** what the journal's start found, if anything */
  note?: string;
}

/** The live daemon serving `mountpoint`, looked up from the flags' state dir or every default one. */
function daemonServing(mountpoint: string, o: RunOptions): { session: string; stateDir: string } | null {
  let dirs: string[];
  if (o.state !== undefined || o.source !== undefined || o.policy !== undefined) {
    dirs = [resolveStateDir(o)];
  } else {
    try {
      dirs = fs.readdirSync(DEFAULTS.journal.stateHome).map((d) => path.join(DEFAULTS.journal.stateHome, d));
    } catch {
      dirs = [];
    }
  }
  for (const d of dirs) {
    const info = liveDaemon(d);
    if (info && path.resolve(info.mountpoint) === mountpoint) return { session: info.session, stateDir: d };
  }
  return null;
}

function useRunningMount(o: RunOptions): Workspace {
  const mountpoint = path.resolve(o.mount as string);
  if (o.session !== undefined) {
    fail(`--session cannot be chosen with --mount: the mount's changes carry the session its daemon was started with (ledgerfs mount --session ID)`);
  }
  if (o.allowOther) fail('--allow-other applies only when run mounts the workspace itself; give it to `ledgerfs mount`');
  if (o.durability !== undefined) fail('--durability applies only when run mounts the workspace itself; give it to `ledgerfs mount`');
  if (o.binding !== undefined) fail('--binding applies only when run mounts the workspace itself; give it to `ledgerfs mount`');
  const m = mountAt(mountpoint);
  if (!m) fail(`--mount ${o.mount}: no mount there; start one first: ledgerfs mount --source DIR ${mountpoint}`);
  // another file system there would take the program's changes unjournaled and unpoliced
  if (!isLedgerfsMount(m)) fail(`--mount ${o.mount}: ${m.fstype} (${m.source}) is mounted there, not ledgerfs; start one: ledgerfs mount --source DIR MOUNTPOINT`);
  const found = daemonServing(mountpoint, o);
  return { mountpoint, session: found?.session ?? null, stateDir: found?.stateDir ?? null, daemon: null };
}

async function mountOwn(o: RunOptions, session: string): Promise<Workspace> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ledgerfs-run-'));
  const args = [
    ...(o.source !== undefined ? ['--source', o.source, '--preset', o.preset ?? DEFAULTS.run.sourcePreset] : []),
    ...(o.policy !== undefined ? ['--policy', o.policy] : []),
    ...(o.state !== undefined ? ['--state', o.state] : []),
    ...(o.allowOther ? ['--allow-other'] : []),
    ...(o.durability !== undefined ? ['--durability', o.durability] : []),
    ...(o.staged ? ['--staged'] : []),
    ...(o.binding !== undefined ? ['--binding', o.binding] : []),
    '--session', session, '--actor', DEFAULTS.run.actor, '--log-level', o.logLevel, dir,
  ];
  try {
    const daemon = await startLinkedDaemon(args, DEFAULTS.run.mountTimeoutMs);
    const m = daemon.mount;
    return { mountpoint: dir, session: m.session, stateDir: m.stateDir, daemon, ...(m.note ? { note: m.note } : {}) };
  } catch (err) {
    try {
      fs.rmdirSync(dir);
    } catch {
      /* the daemon removed it */
    }
    if (err instanceof LinkedDaemonError) fail(err.message);
    throw err;
  }
}

/** Unmount what we mounted: the daemon does it when we let go; make sure, then tidy up. */
async function release(ws: Workspace): Promise<void> {
  const d = ws.daemon;
  if (!d) return;
  releaseDaemon(d);
  const grace = (DEFAULTS.unmountGraceSec + DEFAULTS.run.daemonExitExtraSec) * 1000;
  const timer = setTimeout(() => d.child.kill('SIGTERM'), grace);
  await d.exited;
  clearTimeout(timer);
  if (mountAt(ws.mountpoint)) await unmountPath(ws.mountpoint, true).catch(() => undefined);
  try {
    fs.rmdirSync(ws.mountpoint);
  } catch {
    /* the daemon removed it */
  }
}

/** The only child of `pid`, or null. */
function onlyChild(pid: number): number | null {
  try {
    const kids = fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
    return kids.length === 1 ? Number(kids[0]) : null;
  } catch {
    return null;
  }
}

/** The program bwrap runs: bwrap -> bwrap as pid 1 of the new PID namespace -> the program. */
function programPid(bwrapPid: number): number | null {
  const init = onlyChild(bwrapPid);
  return init === null ? null : onlyChild(init);
}

/** The session line on stderr: the id, and how to look at and undo what the run did. */
function announce(ws: Workspace, mounted: boolean, staged = false): void {
  const state = ws.stateDir ? ` --state ${ws.stateDir}` : '';
  const lines: string[] = [];
  if (ws.session === null) {
    lines.push(
      mounted
        ? 'ledgerfs run: journal off: this run is not recorded'
        : `ledgerfs run: using the mount at ${ws.mountpoint}; its changes carry that mount's session (not found here: name the mount's journal with --state DIR to see it)`,
    );
  } else {
    lines.push(
      mounted
        ? `ledgerfs run: session ${ws.session}`
        : `ledgerfs run: using the mount at ${ws.mountpoint}, session ${ws.session} (the mount's own: it holds more than this run)`,
      `  review: ledgerfs diff${state} --session ${ws.session}`,
      ...(staged
        ? [
            `  staged: nothing reached the workspace; apply: ledgerfs apply${state} --session ${ws.session}`,
            `          drop:  ledgerfs discard${state} --session ${ws.session}`,
          ]
        : [`  undo:   ledgerfs rollback${state} --session ${ws.session}`]),
    );
  }
  if (ws.note) lines.push(`  journal: ${ws.note}`);
  process.stderr.write(lines.join('\n') + '\n');
}

export async function runCommand(command: string[], o: RunOptions): Promise<number> {
  if (command.length === 0 || command[0] === '') {
    fail('name the program to run after --, e.g.: ledgerfs run --source ./case -- python3 /tools/agent.py');
  }
  if (o.source !== undefined && o.policy !== undefined) {
    fail('--source and --policy cannot be used together: the policy file names the backend (backend: {type: local, path: DIR})');
  }
  if (o.staged && o.mount !== undefined) fail('--staged applies only when run mounts the workspace itself; start the mount with `ledgerfs mount --staged` and use --mount');
  if (o.preset !== undefined && o.source === undefined) {
    fail('--preset applies to --source only: a policy file names its own preset, and a running mount already chose what it hides');
  }
  if (o.mount === undefined && o.source === undefined && o.policy === undefined) {
    fail('name the workspace: --source DIR, --policy FILE, or --mount MOUNTPOINT (a running ledgerfs mount)');
  }
  const problem = atProblem(o.at);
  if (problem) fail(problem);

  const user = sandboxUser(o);
  // no sandbox without its seccomp filter, unless asked for the old, privileged one
  let filter: Buffer | null = null;
  if (user) {
    const f = sandboxFilter();
    if (typeof f === 'string') fail(`${f}; or, to run the program with the caller's privileges and no filter, --privileged`);
    filter = f;
  }

  let bwrap: string;
  try {
    bwrap = findBwrap();
    checkNamespaces(bwrap, o.network === true, user);
  } catch (err) {
    if (err instanceof SandboxError) fail(err.message);
    throw err;
  }
  // as a shell does: 127 for a program that is not there, told apart from the program's own
  // codes (after ledgerfs run's own checks: a missing bwrap is 125 whatever the program)
  const missing = commandProblem(command[0] as string, o.ro);
  if (missing) throw new UserError(missing, COMMAND_NOT_FOUND);

  let session = o.session;
  const guarded: { what: string; dir: string }[] = [];
  try {
    if (o.source !== undefined && !gcsSource(o.source)) guarded.push({ what: 'the workspace source', dir: o.source });
    if (o.policy !== undefined) {
      const config = loadMountFile(o.policy);
      if (config.backend.type === 'local') guarded.push({ what: 'the workspace backend', dir: config.backend.path });
      session ??= config.session;
    }
    if (o.mount === undefined || o.state !== undefined) guarded.push({ what: 'the journal', dir: resolveStateDir(o) });
  } catch (err) {
    if (err instanceof ConfigError || err instanceof StateDirError) fail(err.message);
    throw err;
  }
  checkReadOnlyPaths(o.ro, guarded);

  // Signals that arrive while mounting are acted on once the mount is up (or failed).
  let pending: NodeJS.Signals | null = null;
  let sandbox: ReturnType<typeof spawn> | null = null;
  let forwarded = 0;
  const onSignal = (sig: NodeJS.Signals) => {
    if (!sandbox || sandbox.exitCode !== null || sandbox.signalCode !== null) {
      pending ??= sig;
      return;
    }
    // the first signal is the program's to handle (save, clean up); a second one ends the sandbox
    const program = forwarded++ === 0 && sandbox.pid !== undefined ? programPid(sandbox.pid) : null;
    if (program !== null) {
      try {
        process.kill(program, sig);
        return;
      } catch {
        /* exited meanwhile */
      }
    }
    sandbox.kill(sig);
  };
  const sigs: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  for (const s of sigs) process.on(s, onSignal);

  let ws: Workspace | null = null;
  try {
    ws = o.mount !== undefined ? useRunningMount(o) : await mountOwn(o, session ?? newSessionId(DEFAULTS.run.sessionPrefix));
    if (pending) return exitCodeOf(null, pending);
    announce(ws, ws.daemon !== null, o.staged === true);

    // the program never reaches the journal or the backend, a running mount's included
    if (ws.daemon === null) {
      const theirs = [...(ws.stateDir ? [{ what: 'the mount\'s journal', dir: ws.stateDir }] : []), ...runningMountGuarded(ws.stateDir)];
      checkReadOnlyPaths(o.ro, theirs);
      guarded.push(...theirs);
    }
    const hidden = guarded.map((g) => g.dir);
    let args: string[];
    try {
      args = bwrapArgs({
        workspace: ws.mountpoint, at: o.at, network: o.network === true, readOnly: o.ro, command,
        user, ...(filter ? { seccompFd: SECCOMP_FD } : {}), hidden,
      });
    } catch (err) {
      if (err instanceof SandboxError) fail(err.message);
      throw err;
    }
    // its own process group: a Ctrl-C at the terminal reaches us, and we hand it to the program.
    // bwrap reads the seccomp program from its fd 3 up to the end, and closes it.
    // what the caller left open must not reach the program (bwrap passes every descriptor on)
    closeStrayDescriptors();
    const child = spawn(bwrap, args, { stdio: ['inherit', 'inherit', 'inherit', filter ? 'pipe' : 'ignore'], detached: true });
    const filterPipe = child.stdio[SECCOMP_FD] as Writable | null;
    if (filter && filterPipe) {
      filterPipe.on('error', () => undefined); // bwrap failed before reading: its exit code tells
      filterPipe.end(filter);
    }
    sandbox = child;
    const done = new Promise<number>((resolve) => {
      child.once('exit', (code, signal) => resolve(exitCodeOf(code, signal)));
      child.once('error', (err) => {
        process.stderr.write(`ledgerfs run: cannot start bwrap: ${err.message}\n`);
        resolve(RUN_FAILED);
      });
    });
    // a daemon that dies under the program leaves it a dead mount: stop the program, say why
    const daemonDied = ws.daemon?.exited.then((code) => ({ code })) ?? new Promise<never>(() => undefined);
    const first = await Promise.race([done.then((code) => ({ program: code })), daemonDied]);
    if ('program' in first) return first.program;
    process.stderr.write(`ledgerfs run: the file system daemon exited (code ${first.code}) while the program ran; stopping the program\n`);
    child.kill('SIGKILL');
    await done;
    return RUN_FAILED;
  } finally {
    if (ws) await release(ws);
    for (const s of sigs) process.off(s, onSignal);
  }
}

