import type { Command } from 'commander';
import { DEFAULTS } from '../config/index.js';
import { BlobStore, buildHistory, damagedImages, describeDamage, stateLayout, daemonGone, daemonRequest, DaemonUnreachableError, formatTime, JournalService, liveDaemon, newSessionId, planRollback, readJournal, readJournalFor, RollbackError, rollbackQuery, type RollbackRequest, type RollbackResult } from '../journal/index.js';
import { createLogger, printable } from '../core/index.js';
import { UserError } from '../app/index.js';
import {
  addStateFlags, cliLockError, mayBeTag, openWorkspaceOf, parseWhen, pathArg, printJson, journalStateDir, STATE_HELP, syncLiveDaemon, type StateFlags, type When,
} from './journal-flags.js';
import { Progress } from './progress.js';
import { requireKnownInJournal } from './journal-known.js';

interface RollbackOptions extends StateFlags {
  to?: string;
  session?: string;
  path?: string;
  dryRun: boolean;
  force: boolean;
  partial: boolean;
  skipConflicts: boolean;
  json: boolean;
  actor: string;
}

function flagsAgain(o: StateFlags): string {
  if (o.state !== undefined) return ` --state ${o.state}`;
  if (o.policy !== undefined) return ` --policy ${o.policy}`;
  if (o.source !== undefined) return ` --source ${o.source}`;
  return '';
}

function report(r: RollbackResult, o: RollbackOptions, where: string): number {
  if (o.json) {
    printJson({ ...r, via: where });
    return r.conflicts.length > 0 || !r.complete ? 1 : 0;
  }
  const out = (s: string) => process.stdout.write(printable(s) + '\n');
  const planned = new Set(r.planned.map((s) => s.seq));
  for (const u of r.unfinished ?? []) {
    const left = u.left.filter((seq) => planned.has(seq)).length;
    const seqs = u.left.slice(0, 8).map((s) => `#${s}`).join(', ') + (u.left.length > 8 ? ', …' : '');
    out(
      `An earlier rollback (${u.session}, ${u.target}) ${u.interrupted ? 'was cut short' : 'stopped'} after ${u.restored} of ${u.total} undo(s); ` +
        `${u.left.length} left (${seqs})` +
        (left === u.left.length ? `: ${r.dryRun ? 'this rollback would finish them' : 'this rollback takes them up'}.` : left > 0 ? `; ${left} of them are in this selection.` : `; none is in this selection (roll back ${u.target} to finish it).`),
    );
  }
  if (r.alreadyUndone > 0) out(`${r.alreadyUndone} selected mutation(s) were already undone by an earlier rollback; left alone.`);
  if (r.planned.length === 0) {
    out('Nothing to roll back.');
    return 0;
  }
  if (r.dryRun) {
    out(`Would undo ${r.planned.length} mutation(s), newest first:`);
    for (const s of r.planned) out(`  #${s.seq}  ${formatTime(s.time)}  ${s.session}  ${s.op.padEnd(8)}  ${s.undo}`);
  }
  if (r.conflicts.length > 0) {
    out(`${r.dryRun ? 'Conflicts (the rollback would stop here; --force overrides, --skip-conflicts leaves them)' : `Stopped after ${r.undone} of ${r.planned.length}: conflicts (--force overrides, --skip-conflicts leaves them)`}:`);
    for (const c of r.conflicts) out(`  #${c.seq} ${c.op} ${c.path}: ${c.reason}`);
  }
  if (r.skipped && r.skipped.length > 0) {
    out(`Skipped ${r.skipped.length} mutation(s) (--skip-conflicts), left as they are:`);
    for (const c of r.skipped) out(`  #${c.seq} ${c.op} ${c.path}: ${c.reason}`);
  }
  if (r.forced.length > 0) {
    out(`Overrode ${r.forced.length} conflict(s) (--force):`);
    for (const c of r.forced) out(`  #${c.seq} ${c.op} ${c.path}: ${c.reason}`);
  }
  if (!r.dryRun && r.undone > 0) {
    out(`Rolled back ${r.undone} mutation(s)${r.complete ? '' : ` of ${r.planned.length}`} (${where}); journaled as session ${r.session}.`);
    out(`To undo this rollback: ledgerfs rollback${flagsAgain(o)} --session ${r.session}`);
  }
  return r.conflicts.length > 0 || !r.complete ? 1 : 0;
}

export function registerRollbackCommand(program: Command): void {
  addStateFlags(
    program
      .command('rollback')
      .description('Undo journaled mutations: everything after a point, one session, or one subtree. Journaled itself, so it can be undone.')
      .option('--to <when>', 'undo everything after this seq (42), this long ago (10m, 2h, 1h30m), this ISO 8601 time with zone (2026-11-22T05:30:00Z) or this tag (ledgerfs tag NAME)')
      .option('--session <id>', 'undo this session\'s mutations (a mount\'s, or an earlier rollback\'s)')
      .option('--path <prefix>', 'only mutations that name this path or something below it')
      .option('--dry-run', 'print the plan and the conflicts visible now; change nothing', false)
      .option('--force', 'restore recorded states even where someone changed them since', false)
      .option('--partial', 'with --session: undo what remains of a session an older gc cut the start of', false)
      .option('--skip-conflicts', 'undo everything else; leave what someone changed (and older changes to the same paths) and list it', false)
      .option('--actor <label>', 'actor label on the rollback\'s own journal records', DEFAULTS.journal.rollbackActor)
      .option('--json', 'print the result as JSON', false),
  )
    .addHelpText(
      'after',
      `
Each touched path is restored to its recorded before-state, newest mutation first. If a path
no longer is what the journal says a mutation left (changed beside the mount, or by a program
still writing it), the rollback stops there and names the conflicts; --force overrides, and
--skip-conflicts undoes everything else, leaving those paths (and older changes to them) as
they are and listing them. Content is judged by its hash where the journal has one (files up
to 8 MiB a write left): a file whose mtime alone changed (touch) is no conflict.
Every before-image it would write back is checked against its hash first: a missing or
damaged one refuses the rollback before anything changes (even with --force).
A rollback that was killed part way is named by the next one; run the same command again to
finish it (its own half-done work is not taken for a conflict).
On a mounted workspace the request goes to the mount's daemon (open files, quotas and the
kernel's caches stay right; the command returns once cached attributes have expired); on an
unmounted one it works on the source directly. A journal that cannot be read whole (see
'ledgerfs verify') is refused, as is --session of a session whose start an older gc dropped
(--partial undoes what remains of it). Exit status: 0 done, 1 conflicts (also when
--skip-conflicts left some) or a damaged journal, 2 usage, a selection refused (a split
session, a point gc dropped) or a missing or damaged before-image.

Examples:
  ledgerfs rollback --source ./case-files --to 120 --dry-run
  ledgerfs rollback --source ./case-files --session 2026-11-22T05-30-12-ab12
  ledgerfs rollback --source ./case-files --to 15m --path /projects/Wilson-MVA
  ledgerfs rollback --source ./case-files --to before-reorg   # a tag: see 'ledgerfs tag --help'
  ledgerfs rollback --source ./case-files --session rollback-2026-11-22T06-01-00-77aa   # undo a rollback
${STATE_HELP}`,
    )
    .action(async (o: RollbackOptions) => {
      if (o.force && o.skipConflicts) throw new UserError('--force and --skip-conflicts contradict each other: override the conflicts, or leave them');
      const req: RollbackRequest = { dryRun: o.dryRun, force: o.force, actor: o.actor, ...(o.partial ? { partial: true } : {}) };
      if (o.skipConflicts) req.skipConflicts = true;
      // a seq, duration or time is read before the journal is; only a tag needs it
      let w: When | undefined = o.to !== undefined && !mayBeTag(o.to) ? parseWhen(o.to) : undefined;
      if (o.session !== undefined) req.session = o.session;
      if (o.path !== undefined) req.path = pathArg(o.path);
      if (o.to === undefined && req.session === undefined && req.path === undefined) {
        throw new UserError('say what to roll back: --to SEQ|TIME|TAG, --session ID and/or --path PREFIX (see --help)');
      }
      const stateDir = await journalStateDir(o, createLogger('warn'));
      if (o.to !== undefined && w === undefined) {
        await syncLiveDaemon(stateDir);
        w = parseWhen(o.to, '--to', buildHistory(readJournal(stateDir).records).tags);
      }
      if (w !== undefined) {
        if ('seq' in w) req.toSeq = w.seq;
        else req.toTime = w.time;
        const tagged = 'seq' in w ? w.tag?.session : undefined;
        if (tagged !== undefined) {
          if (req.session !== undefined && req.session !== tagged) {
            throw new UserError(`--to ${o.to} is a checkpoint of session ${tagged}; --session ${req.session} names another (leave --session out)`);
          }
          req.session = tagged; // a session's checkpoint undoes that session's later changes only
        }
      }
      await requireKnownInJournal(stateDir, { session: req.session, seq: req.toSeq });
      const progress = new Progress(o.dryRun ? 'checking' : 'rolling back');
      const onProgress = (d: number, t: number) => progress.update(d, t);
      let result: RollbackResult | undefined;
      let where = '';
      try {
        const daemon = liveDaemon(stateDir);
        let direct = !daemon;
        if (daemon) {
          where = `through the daemon of ${daemon.mountpoint}`;
          try {
            result = await daemonRequest<RollbackResult>(daemon, { cmd: 'rollback', request: req }, onProgress);
          } catch (err) {
            if (!(err instanceof DaemonUnreachableError)) throw err;
            // a daemon on its way out (unmounted a moment ago) never got the request: once it has
            // let go of the journal, the rollback runs on the unmounted workspace
            if (err.sent || !(await daemonGone(stateDir, daemon.pid))) throw new UserError(err.message, 1);
            direct = true;
          }
        }
        if (direct) {
          where = 'on the unmounted workspace';
          result = await rollbackDirect(o, stateDir, req, onProgress);
        }
      } catch (err) {
        // through the daemon a damaged journal arrives as its message: the same exit status as here
        if (err instanceof RollbackError) throw new UserError(err.message, /^the journal cannot be read whole/.test(err.message) ? 1 : 2);
        throw err;
      } finally {
        progress.finish();
      }
      process.exitCode = report(result as RollbackResult, o, where);
    });
}

async function rollbackDirect(o: RollbackOptions, stateDir: string, req: RollbackRequest, onProgress: (d: number, t: number) => void): Promise<RollbackResult> {
  const log = createLogger('warn');
  const ws = await openWorkspaceOf(o, log, stateDir);
  try {
    if (req.dryRun) {
      // read-only: no lock, nothing written (operations a crash left unresolved show as conflicts)
      const { ops, result } = await planRollback(readJournalFor(stateDir, rollbackQuery(req)).history, req, { backend: ws.backend });
      // (a GCS workspace's blobs may be only in its bucket: the real run fetches and checks them)
      const damaged = ws.journalRemote ? [] : await damagedImages(ops, new BlobStore(stateLayout(stateDir).blobsDir));
      if (damaged.length > 0) throw new RollbackError(describeDamage(damaged));
      return result;
    }
    readJournalFor(stateDir, rollbackQuery(req)); // a damaged journal is refused before anything is written
    const session = newSessionId('rollback-');
    const svc = await JournalService.open({
      stateDir, backend: ws.backend, source: (ws.store ?? ws.backend).location, session, actor: o.actor,
      role: 'rollback', log, remote: ws.journalRemote,
    }).catch(cliLockError);
    try {
      svc.attachDirect(ws.stages);
      return await svc.rollback({ ...req, asSession: session }, onProgress);
    } finally {
      await svc.close();
    }
  } finally {
    await ws.backend.close();
  }
}
