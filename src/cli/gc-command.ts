import type { Command } from 'commander';
import { collectGarbage, daemonRequest, type GcResult, JournalService, liveDaemon, newSessionId, readIntactJournal } from '../journal/index.js';
import { createLogger } from '../core/index.js';
import { UserError } from '../app/index.js';
import { addStateFlags, cliLockError, openWorkspaceOf, parseDuration, printJson, STATE_HELP, stateDirOf, syncLiveDaemon, type StateFlags } from './journal-flags.js';

export function registerGcCommand(program: Command): void {
  addStateFlags(
    program
      .command('gc')
      .description('Drop journal records older than a retention, and before-images no remaining record needs.')
      .requiredOption('--keep <duration>', 'keep this much history: 30m, 24h, 7d, 4w')
      .option('--dry-run', 'print what would be removed (sessions, segments, before-images, bytes); change nothing', false)
      .option('--json', 'print the result as JSON', false),
  )
    .addHelpText(
      'after',
      `
Mutations are dropped from the oldest on, and only as a whole run of whole sessions: the
journal always holds a contiguous history, so a rollback can reach any point within the
retention (and none before it), and a session is either all there or all gone. A session that
goes on after the cutoff keeps all of it, and stops the dropping there (the result says where).
A journal that cannot be read whole is refused ('ledgerfs verify' says why). On a mounted
workspace the daemon does it; otherwise the journal is worked on directly.

Examples:
  ledgerfs gc --source ./case-files --keep 7d --dry-run
  ledgerfs gc --source ./case-files --keep 7d
  ledgerfs gc --state /var/lib/ledgerfs/ws --keep 24h --json
${STATE_HELP}`,
    )
    .action(async (o: StateFlags & { keep: string; json: boolean; dryRun: boolean }) => {
      const keepMs = parseDuration(o.keep);
      const stateDir = stateDirOf(o);
      const daemon = liveDaemon(stateDir);
      let r: GcResult;
      if (o.dryRun) {
        // read-only: no lock, nothing written; a live daemon first writes out what it buffers
        await syncLiveDaemon(stateDir);
        r = collectGarbage(stateDir, Date.now() - keepMs, null, { dryRun: true });
      } else if (daemon) {
        r = await daemonRequest<GcResult>(daemon, { cmd: 'gc', keepMs }).catch((err: Error) => {
          throw new UserError(err.message);
        });
      } else {
        readIntactJournal(stateDir); // a damaged journal is refused before anything is written
        const log = createLogger('warn');
        const ws = await openWorkspaceOf(o, log, stateDir);
        try {
          const svc = await JournalService.open({
            stateDir, backend: ws.backend, source: (ws.store ?? ws.backend).location, session: newSessionId('gc-'), actor: 'gc', role: 'gc', log,
          }).catch(cliLockError);
          try {
            r = await svc.gc(keepMs);
          } finally {
            await svc.close();
          }
        } finally {
          await ws.backend.close();
        }
      }
      if (o.json) printJson(r);
      else printGc(r);
    });
}

function printGc(r: GcResult): void {
  const out = (s: string) => process.stdout.write(s + '\n');
  const would = r.dryRun ? 'Would drop' : 'Dropped';
  out(
    `${would} ${r.droppedSessions.length} session(s), ${r.droppedOperations} mutation(s) older than ${r.cutoff}, ` +
      `${r.segmentsRemoved} segment(s) (${r.segmentsRewritten} more ${r.dryRun ? 'to be ' : ''}rewritten) and ${r.blobsRemoved} before-image(s): ` +
      `${r.bytesFreed} bytes${r.dryRun ? ' to free' : ' freed'}; ${r.keptOperations} mutation(s) kept${r.firstSeq !== null ? ` (from #${r.firstSeq})` : ''}.`,
  );
  if (r.droppedSessions.length > 0) out(`  sessions: ${r.droppedSessions.join(', ')}`);
  if (r.stoppedAt) out(`  stopped at #${r.stoppedAt.seq} (session ${r.stoppedAt.session}): ${r.stoppedAt.reason}`);
  if (r.dryRun) out('Nothing was changed (--dry-run).');
}
