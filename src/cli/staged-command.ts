import type { Command } from 'commander';
import { createLogger } from '../core/index.js';
import { applyStaged, type ApplyResult, discardStaged, type LiveApplyOptions, stagedExists, stagedOf, UserError } from '../app/index.js';
import { type PendingChange, pendingLine } from '../backend/index.js';
import { type ControlRequest, DaemonRefusal, DaemonUnreachableError, daemonRequest, type DaemonInfo, liveDaemon } from '../journal/index.js';
import { Progress } from './progress.js';
import { addStateFlags, cliLockError, journalStateDir, openWorkspaceOf, pathArg, printJson, STATE_HELP, type StateFlags } from './journal-flags.js';

interface ApplyOptions extends StateFlags {
  session: string;
  path?: string;
  dryRun: boolean;
  force: boolean;
  skipConflicts: boolean;
  actor: string;
  json: boolean;
}

function againFlags(o: StateFlags): string {
  if (o.state !== undefined) return ` --state ${o.state}`;
  if (o.policy !== undefined) return ` --policy ${o.policy}`;
  if (o.source !== undefined) return ` --source ${o.source}`;
  return '';
}

/** Ask the daemon of a mounted (frozen) staged session; its refusals are the user's errors. */
async function askDaemon<T>(daemon: DaemonInfo, req: ControlRequest, onProgress?: (done: number, total: number) => void): Promise<T> {
  try {
    return await daemonRequest<T>(daemon, req, onProgress);
  } catch (err) {
    if (err instanceof DaemonRefusal || err instanceof DaemonUnreachableError) throw new UserError(err.message);
    throw err;
  }
}

function report(r: ApplyResult, o: ApplyOptions): number {
  const failed = r.conflicts.length > 0 && !o.force && (r.dryRun || !o.skipConflicts);
  if (o.json) {
    printJson(r);
    return failed || r.skipped.length > 0 ? 1 : 0;
  }
  const out = (s: string) => process.stdout.write(s + '\n');
  out(`${r.dryRun ? 'Would apply' : 'Staged'} ${r.changes.length} change(s) of session ${r.session}:`);
  for (const c of r.changes) out(`  ${pendingLine(c)}`);
  if (r.conflicts.length > 0 && !o.force) {
    out(`${r.dryRun || o.skipConflicts ? 'Conflicts' : 'Refused before any change: conflicts'} (changed beside the mount since the session read them; --skip-conflicts applies the rest, --force overrides):`);
    for (const c of r.conflicts) out(`  ${c.path}: ${c.reason}`);
  }
  for (const c of r.forced) out(`  overridden (--force): ${c.path}: ${c.reason}`);
  if (r.late.length > 0) {
    out(`Changed beside the mount while the apply ran, so left out (the store refused to write over them; nothing was overwritten):`);
    for (const c of r.late) out(`  ${c.path}: ${c.reason}`);
  }
  // (compared by value: a daemon's answer arrives as JSON)
  const skipped = r.skipped.filter((c) => !r.late.some((l) => l.path === c.path && l.reason === c.reason));
  if (skipped.length > 0) {
    out(`Left out ${skipped.length} change(s)${o.skipConflicts ? ' (--skip-conflicts)' : ''}:`);
    for (const c of skipped) out(`  ${c.path}: ${c.reason}`);
  }
  if (r.skipped.length > 0 && r.keptIn) out(`Their staged versions are kept in ${r.keptIn}.`);
  if (r.applySession) {
    out(`Applied ${r.applied} operation(s); journaled as session ${r.applySession}.`);
    out(`To undo the apply: ledgerfs rollback${againFlags(o)} --session ${r.applySession}`);
  }
  return failed || r.skipped.length > 0 ? 1 : 0;
}

export function registerStagedCommands(program: Command): void {
  addStateFlags(
    program
      .command('freeze')
      .description('Make a live staged mount (mount --staged) read-only while its changes are reviewed; --off makes it writable again.')
      .option('--off', 'writable again', false)
      .option('--json', 'print the answer as JSON', false),
  )
    .addHelpText(
      'after',
      `
While frozen every change through the mount fails with EROFS (reads work), so what you review
with 'ledgerfs diff' and /.ledgerfs/session stays what will be applied. apply and discard of
the frozen session then run in the mount's daemon; the mount stays frozen after them (showing
the workspace as it then is) until 'freeze --off'. A mount that is not staged refuses (exit 2).

Examples:
  ledgerfs freeze --source ./case-files
  ledgerfs freeze --source ./case-files --off
${STATE_HELP}`,
    )
    .action(async (o: StateFlags & { off: boolean; json: boolean }) => {
      const stateDir = await journalStateDir(o, createLogger('warn'));
      const daemon = liveDaemon(stateDir);
      if (!daemon) throw new UserError(`no mount of this workspace is running (journal ${stateDir}); freeze acts on a live staged mount`);
      let r: { session: string; mountpoint: string; frozen: boolean };
      try {
        r = await daemonRequest(daemon, { cmd: 'freeze', frozen: !o.off });
      } catch (err) {
        throw new UserError((err as Error).message);
      }
      if (o.json) printJson(r);
      else process.stdout.write(`${r.mountpoint} (staged session ${r.session}) is ${r.frozen ? 'frozen: read-only until ledgerfs freeze --off; apply or discard it now' : 'writable again'}.\n`);
    });

  addStateFlags(
    program
      .command('apply')
      .description('Apply a staged session\'s changes (mount --staged) to the workspace, as one journaled session that rollback can undo.')
      .requiredOption('--session <id>', 'the staged session')
      .option('--path <prefix>', 'only the changes at or below this path (as the program saw it); the rest stay staged. Refused when a rename crosses it')
      .option('--dry-run', 'list the changes and the conflicts; change nothing', false)
      .option('--skip-conflicts', 'apply everything but what was changed beside the mount (and what depends on it); keep those staged versions aside', false)
      .option('--force', 'apply over changes made beside the mount', false)
      .option('--actor <label>', 'actor label on the apply\'s journal records', 'apply')
      .option('--json', 'print the result as JSON', false),
  )
    .addHelpText(
      'after',
      `
Before anything changes, every file and directory the session touched is checked against
what it was when the session first read it (size and content hash; on GCS through the
bucket): if something changed beside the mount, apply refuses and names the paths
(exit 1); --skip-conflicts applies the rest, --force applies over them. On GCS the writes are
then conditional on the generation the session read (ifGenerationMatch): a change made in
the bucket after the check is not overwritten; that change is left out and named (exit 1).
The changes go through the workspace's policy and journal like any program's: renames are
replayed as renames (a moved directory moves in one rename), in the order the program made
them; then new and changed files are written where the program left them. The apply is a
session of its own: 'ledgerfs rollback --session <apply session>' undoes it (once the staged
mount is unmounted). After a complete apply the overlay is dropped; after --path PREFIX it keeps
the rest (a rename across PREFIX, or of PREFIX itself, refuses --path with a sentence).
The staged session must be unmounted, or mounted and frozen (ledgerfs freeze): the mount's
daemon then applies it, and the mount, still frozen, shows the workspace as applied. A live
(not frozen) mount of it refuses (exit 2), as does a file still open for writing there.
Exit status: 0 applied (or nothing to apply), 1 conflicts (or changes left out), 2 usage.

Examples:
  ledgerfs apply --source ./case-files --session reorg-1 --dry-run
  ledgerfs apply --source ./case-files --session reorg-1
  ledgerfs apply --source ./case-files --session reorg-1 --skip-conflicts
  ledgerfs apply --source ./case-files --session reorg-1 --path /projects/Wilson-MVA
  ledgerfs freeze --source ./case-files && ledgerfs apply --source ./case-files --session reorg-1   # mounted
${STATE_HELP}`,
    )
    .action(async (o: ApplyOptions) => {
      if (o.force && o.skipConflicts) throw new UserError('--force and --skip-conflicts contradict each other: override the conflicts, or leave them');
      const log = createLogger('warn');
      const stateDir = await journalStateDir(o, log);
      const options = { ...(o.path !== undefined ? { path: pathArg(o.path) } : {}), dryRun: o.dryRun, force: o.force, skipConflicts: o.skipConflicts, actor: o.actor };
      stagedExists(stateDir, o.session);
      const daemon = liveDaemon(stateDir);
      if (daemon) {
        // mounted: its daemon holds the journal and the overlay, and applies it (frozen only)
        const progress = new Progress(o.dryRun ? 'checking' : 'applying');
        const live: LiveApplyOptions = { ...options, session: o.session };
        try {
          process.exitCode = report(await askDaemon<ApplyResult>(daemon, { cmd: 'apply', options: live }, (d, t) => progress.update(d, t)), o);
        } finally {
          progress.finish();
        }
        return;
      }
      stagedOf(stateDir, o.session); // refused before the workspace opens: no such overlay, or mounted
      const ws = await openWorkspaceOf(o, log, stateDir);
      let r: ApplyResult;
      try {
        r = await applyStaged(ws, stateDir, o.session, options, log).catch(cliLockError);
      } finally {
        await ws.backend.close();
      }
      process.exitCode = report(r, o);
    });

  addStateFlags(
    program
      .command('discard')
      .description('Drop a staged session\'s changes (mount --staged): the workspace stays as it is.')
      .requiredOption('--session <id>', 'the staged session')
      .option('--json', 'print what was dropped as JSON', false),
  )
    .addHelpText(
      'after',
      `
The overlay in the state directory goes; the journal keeps the session's records (marked
staged: rollback refuses them, diff still shows what the program did). The staged session must
be unmounted, or mounted and frozen (ledgerfs freeze): the mount's daemon then drops it, and
the mount, still frozen, shows the workspace as it is at once. A live (not frozen) mount of it
refuses (exit 2).

Example:
  ledgerfs discard --source ./case-files --session reorg-1
  ledgerfs freeze --source ./case-files && ledgerfs discard --source ./case-files --session reorg-1   # mounted
${STATE_HELP}`,
    )
    .action(async (o: StateFlags & { session: string; json: boolean }) => {
      const stateDir = await journalStateDir(o, createLogger('warn'));
      stagedExists(stateDir, o.session);
      const daemon = liveDaemon(stateDir);
      const { changes } = daemon ? await askDaemon<{ changes: PendingChange[] }>(daemon, { cmd: 'discard', options: { session: o.session } }) : discardStaged(stateDir, o.session);
      if (o.json) printJson({ session: o.session, discarded: changes });
      else process.stdout.write(`Dropped ${changes.length} staged change(s) of session ${o.session}; the workspace is as it was.\n`);
    });
}
