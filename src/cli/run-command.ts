import { Option, type Command } from 'commander';
import { COMMAND_NOT_FOUND, RUN_FAILED, runCommand, type RunOptions } from '../app/index.js';
import { BINDING_NAMES, DEFAULT_STATE_DIR_PATTERN, DEFAULTS, LOG_LEVELS, PRESET_NAMES } from '../config/index.js';

export function registerRunCommand(program: Command): void {
  program
    .command('run')
    .description('Run a program in a bubblewrap sandbox with the workspace mounted where it expects it; the run is one journal session.')
    .argument('[command...]', 'the program and its arguments (after --, or after the last option)')
    .passThroughOptions()
    .option('--source <dir>', 'workspace directory to serve (local backend), the whole tree read-write, credential files hidden (see --preset)')
    .addOption(new Option('--preset <name>', `with --source: whose hiding applies: ${DEFAULTS.run.sourcePreset} hides common credential files (.env, *.pem, *.key, .ssh, .aws, ...); trusted hides nothing`).choices(PRESET_NAMES as string[]).default(undefined, DEFAULTS.run.sourcePreset))
    .option('--policy <file>', 'mount/policy file (YAML or JSON): backend, roots, hide, limits; see `ledgerfs policy check --help`')
    .option('--state <dir>', `journal directory (outside the source); default: ${DEFAULT_STATE_DIR_PATTERN}`)
    .option('--at <path>', 'where the program sees the workspace; also its working directory', DEFAULTS.run.at)
    .option('--network', 'give the program the host\'s network (default: none, only a loopback)')
    .option('--session <id>', `journal session of this run (default: generated, e.g. ${DEFAULTS.run.sessionPrefix}2026-11-22T05-30-12-ab12)`)
    .addOption(
      new Option('--ro <path>', 'also bind this host path read-only at the same path (a script, a tool); repeatable')
        .argParser((v: string, all: string[]) => [...all, v])
        .default([], 'none'),
    )
    .option('--uid <n>', `the program's uid in its user namespace (default: yours; when root runs this, ${DEFAULTS.run.rootUser.uid}); even 0 there has no capabilities`)
    .option('--gid <n>', `the program's gid (default: yours; when root runs this, ${DEFAULTS.run.rootUser.gid}; with --uid alone, the same number)`)
    .option('--privileged', 'no user namespace, capabilities or seccomp filter: the program runs as you (as root: real root). Only for programs you trust')
    .option('--mount <mountpoint>', 'use this running `ledgerfs mount` instead of mounting (left mounted; its session is the mount\'s)')
    .option('--staged', 'staged mode (see `ledgerfs mount --help`): the program sees its changes, the workspace does not; review with diff, then `ledgerfs apply` or `ledgerfs discard` the session')
    .option('--allow-other', 'mount with allow_other (other users and containers may use the mount too)')
    .addOption(new Option('--durability <mode>', 'GCS: when close(2) returns in the mount run makes, as for `ledgerfs mount --durability` (bucket: in the bucket; journal: durable in the state directory, uploaded in the background; the daemon uploads what is queued before it exits)').choices(['bucket', 'journal']))
    .addOption(new Option('--binding <name>', `kernel binding of the mount, as for \`ledgerfs mount\` (default: ${DEFAULTS.binding})`).choices(BINDING_NAMES as string[]))
    .addOption(new Option('--log-level <level>', 'the file system daemon\'s log verbosity on stderr (warn: every refusal)').choices(LOG_LEVELS as string[]).default(DEFAULTS.run.logLevel))
    .addHelpText(
      'after',
      `
The program sees: the workspace read-write at --at (its working directory, and
$LEDGERFS_WORKSPACE), the host's /usr, /etc, /opt read-only, a private /tmp (HOME is
/tmp/home), its own /proc and /dev, no network unless --network, and nothing else of the host:
the rest of the sandbox's root is read-only, and the journal and the backend are covered even
where they lie below /usr, /etc or /opt. With --source, the credential files the
${DEFAULTS.run.sourcePreset} preset hides (.env, *.pem, *.key, .ssh, .aws, ...) do not exist for it
(--preset trusted shows them); with --policy, the file decides.
It runs in new user/PID/IPC/UTS namespaces and a new session, with an environment cleared down
to ${DEFAULTS.run.passEnv.slice(0, 4).join(', ')}, ... (see the README).

Whom it runs as: an ordinary uid in its own user namespace (yours, or ${DEFAULTS.run.rootUser.uid}:${DEFAULTS.run.rootUser.gid} when
root runs ledgerfs; --uid/--gid choose), without capabilities or new privileges (setuid
programs do not raise it), and under a seccomp filter that refuses mount, umount, pivot_root,
chroot, unshare, setns, keyctl, ptrace, bpf, open_by_handle_at, module loading, reboot and
kexec with EPERM. So even --uid 0 is root only in name: it cannot remount anything writable.
Files it creates belong on the backend to the user who started the run. --privileged
is the old way back (the program runs as you, as root with every capability): only for a
program you trust as much as yourself. Without the filter (libseccomp-dev not installed when
ledgerfs was built) run refuses unless --privileged.

stdin, stdout and stderr are the program's; the run exits with the program's exit code (128+N
if a signal N killed it; ${COMMAND_NOT_FOUND} if the program is not there, found in none of the
sandbox's PATH directories; ${RUN_FAILED} if ledgerfs run itself failed: bwrap missing, no user
namespaces, the workspace could not be mounted). Ctrl-C, SIGTERM and SIGHUP are passed to the
program (it may save and exit); a second one ends the sandbox; then the workspace is unmounted.
A run killed outright (SIGKILL) takes the program with it, and its daemon unmounts on its own.

Every change the program makes is journaled under the run's session (printed on stderr first),
actor '${DEFAULTS.run.actor}'; review and undo it with the commands printed there:
  ledgerfs diff --session ID, ledgerfs rollback --session ID (plus --source/--policy/--state
  as given to run).

Examples:
  ledgerfs run --source ./case-files -- python3 /opt/agent/reorganise.py
      reorganise a case folder; the script lives in /opt (read-only in the sandbox)
  ledgerfs run --policy case.yaml --ro ./tools/check.sh -- bash $PWD/tools/check.sh
      only what case.yaml exposes, with its read-only roots, quotas and hidden files; the
      script is bound read-only at its own path
  echo 'print(open("notes.md").read())' | ledgerfs run --source ./case -- python3 -
      stdin reaches the program
  ledgerfs run --source ./repo --network --session fix-42 -- git pull
      with network, under a session name of your choice
  ledgerfs mount --policy case.yaml /mnt/ws &  ledgerfs run --mount /mnt/ws -- make
      run in an existing mount (it stays mounted; the changes join its session)`,
    )
    .action(async (command: string[], o: RunOptions) => {
      process.exitCode = await runCommand(command, o);
    });
}
