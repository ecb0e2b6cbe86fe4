import fs from 'node:fs';
import { Command, Option } from 'commander';
import { BINDING_NAMES, DEFAULT_STATE_DIR_PATTERN, DEFAULTS, LOG_LEVELS, POLICY_PRESETS, PRESET_NAMES, type BindingName, type LogLevel, type PresetName } from '../config/index.js';
import { notOurMount, NotOurMountError, unmountPath } from '../fuse/index.js';
import { serveMount, UserError } from '../app/index.js';
import { JournalDamagedError } from '../journal/index.js';
import { registerPolicyCommand } from './policy-command.js';
import { registerRunCommand } from './run-command.js';
import { registerLogCommand } from './log-command.js';
import { registerShowCommand } from './show-command.js';
import { registerDiffCommand } from './diff-command.js';
import { registerRollbackCommand } from './rollback-command.js';
import { registerVerifyCommand } from './verify-command.js';
import { registerGcCommand } from './gc-command.js';
import { registerTagCommand } from './tag-command.js';
import { registerDevCommand } from './dev-command.js';
import { registerStatusCommand } from './status-command.js';

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
    .description('Mount a workspace at MOUNTPOINT and serve it in the foreground until unmounted or signalled.')
    .argument('<mountpoint>', 'an existing, empty directory')
    .option('--source <dir>', `workspace directory to serve (local backend), or gs://BUCKET[/PREFIX] (GCS; endpoint from LEDGERFS_GCS_ENDPOINT); default (with no --policy either): the demo workspace ${DEFAULTS.demoWorkspaceDir}, served through its demo policy`)
    .option('--policy <file>', 'mount/policy file (YAML or JSON): backend, roots, hide, limits; see `ledgerfs policy check --help`')
    .addOption(new Option('--preset <name>', `with --source: hide what this preset hides (sandboxed: ${POLICY_PRESETS.sandboxed.hide.slice(0, 3).join(', ')}, ...); the tree stays read-write; default: nothing hidden`).choices(PRESET_NAMES as string[]))
    .option('--metadata-ttl <sec>', `GCS: how long attributes and listings are cached; changes by other hosts show up after this (default ${DEFAULTS.gcsCache.metadataTtlSec})`, positiveNumber)
    .option('--allow-other', 'let other users and containers use the mount (needs root or user_allow_other)', false)
    .addOption(new Option('--log-level <level>', 'log verbosity on stderr').choices(LOG_LEVELS as string[]).default(DEFAULTS.logLevel))
    .option('--attr-timeout <sec>', 'kernel attribute cache lifetime', positiveNumber, DEFAULTS.attrTimeoutSec)
    .option('--entry-timeout <sec>', 'kernel name lookup cache lifetime', positiveNumber, DEFAULTS.entryTimeoutSec)
    .option('--busy-poll <us>', 'native-ll: after answering, keep reading requests this many microseconds before sleeping, ' +
      'while they come that fast (a program working one request at a time then pays no wake-up per request; ' +
      `costs up to this much CPU per burst; at most ${DEFAULTS.busyPollMaxMicros}); 0: sleep at once`, busyPollMicros, DEFAULTS.busyPollMicros)
    .option('--state <dir>', `journal directory (outside the source); default: ${DEFAULT_STATE_DIR_PATTERN}`)
    .option('--session <id>', 'journal session id for this mount (default: generated, e.g. 2026-11-22T05-30-12-ab12)')
    .option('--actor <label>', 'actor label on this mount\'s journal records', DEFAULTS.journal.mountActor)
    .option('--metrics [addr]', `serve Prometheus metrics at http://ADDR/metrics and a health check at /healthz (HOST:PORT, :PORT or PORT; default 127.0.0.1:${DEFAULTS.metricsPort}, but then not right before the mount point, which would be taken for the address); off unless given`)
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
  ledgerfs mount --source ./case-files /mnt/ws &
      serve ./case-files in the background; stop it with: ledgerfs unmount /mnt/ws
  ledgerfs mount --source /srv/ws --allow-other --log-level debug /mnt/ws
      let a container user see the mount, and log every failed request
  LEDGERFS_GCS_ENDPOINT=http://127.0.0.1:4443 ledgerfs mount --source gs://my-bucket/ws /mnt/ws
      serve a GCS bucket (here on the emulator: ledgerfs dev gcs-emulator)
  ledgerfs mount --source /srv/ws --metrics 127.0.0.1:9464 /mnt/ws
      with Prometheus metrics at http://127.0.0.1:9464/metrics and a health check at /healthz
  ledgerfs mount --policy case.yaml /mnt/ws
      serve what case.yaml exposes (roots, modes, hidden names, quotas); see
      'ledgerfs policy check --help'; inside the mount, /.ledgerfs/ explains it

The mount stays in the foreground (logs on stderr as JSON lines) until SIGINT, SIGTERM,
SIGHUP or 'ledgerfs unmount'. A signal unmounts cleanly when no program uses the mount. While
one does (its working directory is inside, or it holds a file open), the first signal unmounts
nothing: it names those processes (pid, command, what they hold) on stderr and the daemon keeps
serving; close them and signal again, or send a second SIGTERM/SIGINT to detach the mount
lazily (their open files then fail with ENOTCONN; exit status 130).`,
    )
    .action(async (mountpoint: string, o: {
      source?: string; policy?: string; allowOther: boolean; logLevel: LogLevel; attrTimeout: number; entryTimeout: number; busyPoll: number;
      state?: string; session?: string; actor?: string; journal: boolean; parentLink?: boolean; binding?: BindingName; metadataTtl?: number; preset?: PresetName;
      metrics?: string | true; sharedSource: boolean;
    }) => {
      process.exitCode = await serveMount(mountpoint, { ...o, metrics: o.metrics === true ? `127.0.0.1:${DEFAULTS.metricsPort}` : o.metrics });
    });

  program
    .command('unmount')
    .alias('umount')
    .description('Unmount a ledgerfs mount (type fuse.ledgerfs in /proc/mounts); the daemon serving it exits cleanly. Any other mount (tmpfs, bindfs, /) is refused and left mounted.')
    .argument('<mountpoint>')
    .option('--lazy', 'detach now even if files are open (they keep working until closed)', false)
    .addHelpText('after', '\nExample:\n  ledgerfs unmount /mnt/ws\n')
    .action(async (mountpoint: string, o: { lazy: boolean }) => {
      const refused = notOurMount(mountpoint);
      if (refused) throw new UserError(refused);
      try {
        await unmountPath(mountpoint, o.lazy);
      } catch (err) {
        if (err instanceof NotOurMountError) throw new UserError(err.message);
        throw new UserError(`${(err as Error).message}${/busy/i.test((err as Error).message) ? '\n(files are open on it; close them, or use --lazy)' : ''}`);
      }
    });
  registerStatusCommand(program);
  registerRunCommand(program);
  registerPolicyCommand(program);
  registerLogCommand(program);
  registerShowCommand(program);
  registerDiffCommand(program);
  registerRollbackCommand(program);
  registerTagCommand(program);
  registerVerifyCommand(program);
  registerGcCommand(program);
  registerDevCommand(program);
  return program;
}

export async function main(argv: string[]): Promise<void> {
  // `ledgerfs log | head`: a reader that stops early is not an error
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') process.exit(process.exitCode ?? 0);
    throw err;
  });
  try {
    await buildProgram().parseAsync(argv);
  } catch (err) {
    if (err instanceof UserError) {
      process.stderr.write(`ledgerfs: ${err.message}\n`);
      process.exitCode = err.exitCode;
      return;
    }
    if (err instanceof JournalDamagedError) {
      process.stderr.write(`ledgerfs: ${err.message}\n`);
      process.exitCode = 1;
      return;
    }
    // The system refused something no check foresaw (a full disk, a read-only file system, a
    // permission): a sentence naming the call and the path, not a stack trace.
    const sys = systemError(err);
    if (sys) {
      process.stderr.write(`ledgerfs: ${sys}\n`);
      process.exitCode = 1;
      return;
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
