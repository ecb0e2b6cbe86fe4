import fs from 'node:fs';
import path from 'node:path';
import { Command, Option } from 'commander';
import { BINDING_NAMES, DEFAULT_STATE_DIR_PATTERN, DEFAULTS, LOG_FORMATS, LOG_LEVELS, type LogFormat, POLICY_PRESETS, PRESET_NAMES, type BindingName, type LogLevel, type PresetName } from '../config/index.js';
import { flushLogs } from '../core/index.js';
import { canonicalMountpoint, notOurMount, NotOurMountError, unmountPath } from '../fuse/index.js';
import { describeSpool, liveMounts, requestNoWait, serveMount, spoolSummary, startDaemon, UserError } from '../app/index.js';
import { pidAlive } from '../core/index.js';
import { daemonGone, JournalDamagedError } from '../journal/index.js';
import { registerPolicyCommand } from './policy-command.js';
import { registerRunCommand } from './run-command.js';
import { registerLogCommand } from './log-command.js';
import { registerShowCommand } from './show-command.js';
import { registerDiffCommand } from './diff-command.js';
import { registerRollbackCommand } from './rollback-command.js';
import { registerVerifyCommand } from './verify-command.js';
import { registerGcCommand } from './gc-command.js';
import { registerStagedCommands } from './staged-command.js';
import { registerTagCommand } from './tag-command.js';
import { registerDevCommand } from './dev-command.js';
import { registerStatusCommand } from './status-command.js';
import { runMountHelper } from './mount-helper.js';
import { registerStateCommand } from './state-command.js';

function positiveNumber(v: string): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new UserError(`expected a number of seconds >= 0, got ${JSON.stringify(v)}`);
  return n;
}

function busyPollMicros(v: string): number {
  const n = Number(v);
  const max = DEFAULTS.busyPollMaxMicros;
  if (!Number.isInteger(n) || n < 0 || n > max) throw new UserError(`--busy-poll: expected whole microseconds from 0 to ${max}, got ${JSON.stringify(v)}`);
  return n;
}

function numericId(flag: string) {
  return (v: string): number => {
    const n = Number(v);
    // (uid_t)-1 means "no change" to chown: it cannot be an owner
    if (!/^\d+$/.test(v) || n >= 0xffffffff) throw new UserError(`${flag}: expected a numeric id (0 to 4294967294), got ${JSON.stringify(v)}`);
    return n;
  };
}

function permissionBits(flag: string) {
  return (v: string): number => {
    // no setuid/setgid/sticky bits: exec honours a shown setuid bit
    if (!/^0?[0-7]{1,3}$/.test(v)) throw new UserError(`${flag}: expected octal permission bits from 000 to 777 (e.g. 644), got ${JSON.stringify(v)}`);
    return parseInt(v, 8);
  };
}

/** The version in package.json (dist/cli/ and src/cli/ both sit two levels below it). */
function packageVersion(): string {
  try {
    return (JSON.parse(fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

export function buildProgram(): Command {
  const program = new Command();
  program
    .name('ledgerfs')
    .description('Mount a workspace as a policy-filtered, journaled file system for sandboxed programs.')
    .version(packageVersion(), '-V, --version', 'print the version of ledgerfs and exit')
    .showHelpAfterError('(run with --help for usage)')
    .configureOutput({ outputError: (str, write) => write(str) })
    // `ledgerfs run ... python3 -c CODE`: options after the program's name are the program's
    .enablePositionalOptions();

  program
    .command('mount')
    .description('Mount a workspace at MOUNTPOINT and serve it in the foreground (or, with --daemon, in the background) until unmounted or signalled.')
    .argument('<mountpoint>', 'an existing, empty directory')
    .option('--source <dir>', `workspace directory to serve (local backend), or gs://BUCKET[/PREFIX] (GCS; endpoint from LEDGERFS_GCS_ENDPOINT); default (with no --policy either): the demo workspace ${DEFAULTS.demoWorkspaceDir}, served through its demo policy`)
    .option('--policy <file>', 'mount/policy file (YAML or JSON): backend, roots, hide, limits; see `ledgerfs policy check --help`')
    .addOption(new Option('--preset <name>', `with --source: hide what this preset hides (sandboxed: ${POLICY_PRESETS.sandboxed.hide.slice(0, 3).join(', ')}, ...); the tree stays read-write; default: nothing hidden`).choices(PRESET_NAMES as string[]))
    .option('--metadata-ttl <sec>', `GCS: how long attributes and listings are cached; changes by other hosts show up after this (default ${DEFAULTS.gcsCache.metadataTtlSec})`, positiveNumber)
    .addOption(new Option('--durability <mode>', `GCS: when close(2) returns. bucket: once the file is in the bucket (gcsfuse's contract). journal: once it is durable in the state directory's upload spool (fsynced) and journaled; uploads run in the background, ${DEFAULTS.gcs.uploadConcurrency} at a time, in order per file, before any rename or delete that depends on them; fsync still waits for the bucket; a crash or restart resumes the queue. Default: the mount file's backend.durability, else ${DEFAULTS.gcs.durability}`).choices(['bucket', 'journal']))
    .option('--allow-other', 'let other users and containers use the mount (needs root or user_allow_other)', false)
    .option('--uid <uid>', 'show every file and directory as owned by this numeric user id (display only: the source keeps its owners; as in gcsfuse and bindfs)', numericId('--uid'))
    .option('--gid <gid>', 'show every file and directory with this numeric group id (display only)', numericId('--gid'))
    .option('--file-mode <octal>', 'show these permission bits on every file, e.g. 644 (display only: chmod still changes the source; no setuid bits)', permissionBits('--file-mode'))
    .option('--dir-mode <octal>', 'show these permission bits on every directory, e.g. 755 (display only)', permissionBits('--dir-mode'))
    .addOption(new Option('--log-level <level>', 'log verbosity').choices(LOG_LEVELS as string[]).default(DEFAULTS.logLevel))
    .option('--log-file <path>', 'append logs to this file instead of stderr (with --daemon: else they are dropped)')
    .addOption(new Option('--log-format <format>', 'text (one readable line) or json (one object a line, for jq or a collector); default: text when logging to a terminal, else json').choices(LOG_FORMATS as string[]))
    .option('--daemon', `run in the background: return (exit 0, printing the daemon's pid) once the mount answers stat, or fail with the daemon's error and its exit code; waits at most ${DEFAULTS.daemonReadyTimeoutSec} s`, false)
    .option('--attr-timeout <sec>', 'kernel attribute cache lifetime', positiveNumber, DEFAULTS.attrTimeoutSec)
    .option('--entry-timeout <sec>', 'kernel name lookup cache lifetime', positiveNumber, DEFAULTS.entryTimeoutSec)
    .option('--busy-poll <us>', 'native-ll: after answering, keep reading requests this many microseconds before sleeping, ' +
      'while they come that fast (a program working one request at a time then pays no wake-up per request; ' +
      `costs up to this much CPU per burst; paused for a while when another process holds the CPU; at most ${DEFAULTS.busyPollMaxMicros}); 0: sleep at once`, busyPollMicros, DEFAULTS.busyPollMicros)
    .option('--state <dir>', `journal directory (outside the source); default: ${DEFAULT_STATE_DIR_PATTERN}`)
    .option('--session <id>', 'journal session id for this mount (default: generated, e.g. 2026-11-22T05-30-12-ab12)')
    .option('--actor <label>', 'actor label on this mount\'s journal records', DEFAULTS.journal.mountActor)
    .option('--metrics [addr]', `serve Prometheus metrics at http://ADDR/metrics and a health check at /healthz (HOST:PORT, :PORT or PORT; default 127.0.0.1:${DEFAULTS.metricsPort}, but then not right before the mount point, which would be taken for the address); off unless given`)
    .option('--staged', 'staged mode: the program sees its own changes, nothing reaches the backend; they wait in the state directory (per --session) until `ledgerfs apply` or `ledgerfs discard`; remount with the same --session --staged to resume them', false)
    .option('--no-journal', 'record nothing (no log, no rollback); for measuring the journal\'s cost')
    .option('--shared-source', 'mount a local source another journaled mount already serves (refused by default: each journal then sees the other\'s changes as made beside the mount, and a rollback of one may undo over the other); for benchmarks side by side', false)
    .addOption(new Option('--parent-link', 'serve for `ledgerfs run` over its IPC channel').hideHelp())
    .addOption(new Option('--binding <name>', `kernel binding: native-ll (the libfuse3 addon in native/, low-level API served from the JS thread; knows the calling uid/gid/pid) or fuse-native (libfuse 2); ` +
      `default: ${DEFAULTS.binding}, falling back to fuse-native when the addon was not built`).choices(BINDING_NAMES as string[]))
    .addHelpText(
      'after',
      `
Examples:
  mkdir -p /mnt/ws && ledgerfs mount /mnt/ws
      serve a demo workspace; Ctrl-C unmounts
  ledgerfs mount --daemon --log-file /var/log/ledgerfs-ws.log --source ./case-files /mnt/ws
      serve ./case-files in the background; returns once /mnt/ws answers;
      stop it with: ledgerfs unmount /mnt/ws
  ledgerfs mount --source /srv/ws --allow-other --log-level debug /mnt/ws
      let a container user see the mount, and log every failed request
  LEDGERFS_GCS_ENDPOINT=http://127.0.0.1:4443 ledgerfs mount --source gs://my-bucket/ws /mnt/ws
      serve a GCS bucket (here on the emulator: ledgerfs dev gcs-emulator)
  ledgerfs mount --source /srv/ws --metrics 127.0.0.1:9464 /mnt/ws
      with Prometheus metrics at http://127.0.0.1:9464/metrics and a health check at /healthz
  ledgerfs mount --source /srv/ws --allow-other --uid 65534 --gid 65534 /srv/mnt
      let user nobody (e.g. a bwrap or container user) use every file as its owner, whoever
      owns it in /srv/ws; the kernel checks the shown owner and bits, the policy still applies
  ledgerfs mount --staged --session reorg-1 --source ./case-files /mnt/ws
      review before anything changes: programs see their own changes, ./case-files stays as
      it is; then ledgerfs diff --session reorg-1, and ledgerfs apply --session reorg-1
      (or ledgerfs discard --session reorg-1) once unmounted
  ledgerfs mount --policy case.yaml /mnt/ws
      serve what case.yaml exposes (roots, modes, hidden names, quotas); see
      'ledgerfs policy check --help'; inside the mount, /.ledgerfs/ explains it
  mount -t fuse.ledgerfs /srv/ws /mnt/ws -o allow_other,uid=65534,gid=65534
      the same through mount(8) or an fstab line (type fuse.ledgerfs): each -o
      name=VALUE is the flag --name VALUE (file_mode: --file-mode); needs the
      /sbin/mount.fuse.ledgerfs link scripts/setup makes

The mount stays in the foreground (logs on stderr: text on a terminal, else JSON lines) until
SIGINT, SIGTERM, SIGHUP or 'ledgerfs unmount'; with --daemon it goes to the background once
it answers. Under systemd (Type=notify, see the README) it sends READY=1 once the mount answers
a stat made by another process. A signal unmounts cleanly when no program uses the mount. While
one does (its working directory is inside, or it holds a file open), the first signal unmounts
nothing: it names those processes (pid, command, what they hold) on stderr and the daemon keeps
serving; close them and signal again, or send a second SIGTERM/SIGINT to detach the mount
lazily (their open files then fail with ENOTCONN; exit status 130).`,
    )
    .action(async (mountpoint: string, o: {
      source?: string; policy?: string; allowOther: boolean; logLevel: LogLevel; attrTimeout: number; entryTimeout: number; busyPoll: number;
      state?: string; session?: string; actor?: string; journal: boolean; parentLink?: boolean; binding?: BindingName; metadataTtl?: number; preset?: PresetName; durability?: 'bucket' | 'journal';
      metrics?: string | true; sharedSource: boolean; logFile?: string; logFormat?: LogFormat; daemon: boolean; uid?: number; gid?: number; fileMode?: number; dirMode?: number; staged: boolean;
    }) => {
      if (o.daemon) {
        if (o.parentLink) throw new UserError('--daemon and --parent-link cannot be used together');
        process.exitCode = await startDaemon(process.argv, mountpoint);
        return;
      }
      process.exitCode = await serveMount(mountpoint, { ...o, metrics: o.metrics === true ? `127.0.0.1:${DEFAULTS.metricsPort}` : o.metrics });
    });

  program
    .command('unmount')
    .alias('umount')
    .description('Unmount a ledgerfs mount (type fuse.ledgerfs in /proc/mounts); the daemon serving it exits cleanly. Any other mount (tmpfs, bindfs, /) is refused and left mounted.')
    .argument('<mountpoint>')
    .option('--lazy', 'detach now even if files are open (they keep working until closed)', false)
    .option('--no-wait', 'GCS --durability journal: do not wait for queued uploads; they stay in the state directory\'s spool and the next mount on it uploads them')
    .addHelpText('after', `
With GCS --durability journal, unmount waits until the daemon has uploaded every closed file
still queued, printing what is left every second; --no-wait leaves them in the spool instead,
and so does a signal to the daemon while it waits (Ctrl-C on a foreground mount, systemctl stop).

Example:
  ledgerfs unmount /mnt/ws
`)
    .action(async (mountpoint: string, o: { lazy: boolean; wait: boolean }) => {
      const refused = notOurMount(mountpoint);
      if (refused) throw new UserError(refused);
      // (never a stat of the mount point: ENOTCONN when its daemon died)
      const real = canonicalMountpoint(mountpoint);
      const record = liveMounts().find((m) => m.mountpoint === real)?.record ?? null;
      if (!o.wait && record?.stateDir) requestNoWait(record.stateDir);
      try {
        await unmountPath(mountpoint, o.lazy);
      } catch (err) {
        if (err instanceof NotOurMountError) throw new UserError(err.message);
        throw new UserError(`${(err as Error).message}${/busy/i.test((err as Error).message) ? '\n(files are open on it; close them, or use --lazy)' : ''}`);
      }
      if (record?.stateDir) {
        await waitForUploads(record.stateDir, record.pid, o.wait);
        // (the daemon lets go of its journal after the kernel mount is gone: the next command
        // works on the unmounted workspace, not on a daemon on its way out)
        await daemonGone(record.stateDir, record.pid);
      }
    });
  registerStatusCommand(program);
  registerStateCommand(program);
  registerRunCommand(program);
  registerPolicyCommand(program);
  registerLogCommand(program);
  registerShowCommand(program);
  registerDiffCommand(program);
  registerRollbackCommand(program);
  registerTagCommand(program);
  registerStagedCommands(program);
  registerVerifyCommand(program);
  registerGcCommand(program);
  registerDevCommand(program);
  return program;
}

export async function main(argv: string[]): Promise<void> {
  const failed = await reportingErrors(async () => {
    await buildProgram().parseAsync(argv);
  });
  // The error is said: what the failed command left in flight (the mount's probe of a bucket
  // that never answers, its request timeout 60 s away) must not keep the process, nor
  // `mount --daemon`, which waits for the daemon to exit, waiting.
  if (failed) setTimeout(() => process.exit(), 1000).unref();
}

/** bin/mount.fuse.ledgerfs: mount(8)'s helper (`cli`: bin/ledgerfs.js, which the daemon runs). */
export async function helperMain(args: string[], cli: string): Promise<void> {
  await reportingErrors(async () => {
    process.exitCode = await runMountHelper(args, cli);
  });
}

/**
 * Errors as one sentence and an exit code, never a stack trace (UserError, system errors).
 * Resolves true when it reported one.
 */
async function reportingErrors(body: () => Promise<void>): Promise<boolean> {
  // `ledgerfs log | head`: a reader that stops early is not an error
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') process.exit(process.exitCode ?? 0);
    throw err;
  });
  try {
    await body();
    await flushLogs();
    return false;
  } catch (err) {
    await flushLogs();
    if (err instanceof UserError) {
      process.stderr.write(`ledgerfs: ${err.message}\n`);
      process.exitCode = err.exitCode;
      return true;
    }
    if (err instanceof JournalDamagedError) {
      process.stderr.write(`ledgerfs: ${err.message}\n`);
      process.exitCode = 1;
      return true;
    }
    // The system refused something no check foresaw (a full disk, a read-only file system, a
    // permission): a sentence naming the call and the path, not a stack trace.
    const sys = systemError(err);
    if (sys) {
      process.stderr.write(`ledgerfs: ${sys}\n`);
      process.exitCode = 1;
      return true;
    }
    throw err;
  }
}

function systemError(err: unknown): string | null {
  const e = err as NodeJS.ErrnoException;
  if (!(err instanceof Error) || typeof e.code !== 'string' || typeof e.syscall !== 'string' || !/^E[A-Z0-9]+$/.test(e.code)) return null;
  // "EACCES: permission denied, mkdir '/x'" -> "permission denied"
  const what = /^E[A-Z0-9]+: ([^,]+)/.exec(e.message)?.[1] ?? e.code;
  return `cannot ${e.syscall}${e.path ? ` ${e.path}` : ''}: ${what} (${e.code})`;
}

/**
 * After the unmount: the daemon uploads what is queued (durability journal) before it exits.
 * Wait for it with a progress line, or (--no-wait) say what is left in the spool.
 */
async function waitForUploads(stateDir: string, pid: number, wait: boolean): Promise<void> {
  if (!wait) {
    const s = spoolSummary(stateDir);
    if (s.files > 0) process.stderr.write(`ledgerfs: not waiting: ${describeSpool(s)} queued for upload stay in ${stateDir}; the next mount on it uploads them\n`);
    return;
  }
  let said = false;
  // Ctrl-C (or a stop) here stops the daemon's wait as a signal to the daemon itself does: the
  // mount is gone, so nothing else (`unmount --no-wait`, status) reaches that daemon any more,
  // and a bucket out of reach would keep it for ever. It exits leaving the rest in the spool.
  let stopped: NodeJS.Signals | undefined;
  const stop = (sig: NodeJS.Signals) => {
    stopped ??= sig;
    try {
      process.kill(pid, 'SIGINT');
    } catch {
      /* gone already */
    }
  };
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  for (const sig of signals) process.on(sig, stop);
  try {
    while (pidAlive(pid)) {
      const s = spoolSummary(stateDir);
      if (s.files === 0) break; // nothing queued (any backend but GCS with durability journal: at once)
      if (!stopped) process.stderr.write(`ledgerfs: waiting for uploads: ${describeSpool(s)} left\n`);
      said = true;
      await new Promise((r) => setTimeout(r, stopped ? 100 : 1000));
    }
  } finally {
    for (const sig of signals) process.off(sig, stop);
  }
  if (stopped) process.exitCode = 130;
  const s = spoolSummary(stateDir);
  if (s.files > 0) process.stderr.write(`ledgerfs: the daemon exited with ${describeSpool(s)} not uploaded; they stay in ${stateDir} for the next mount\n`);
  else if (said) process.stderr.write('ledgerfs: every queued upload is in the bucket\n');
}
