import type { Command } from 'commander';
import { daemonRequest, type GcResult, JournalService, liveDaemon, newSessionId } from '../journal/index.js';
import { createLogger } from '../core/index.js';
import { UserError } from '../app/index.js';
import { addStateFlags, cliLockError, openWorkspaceOf, parseDuration, printJson, STATE_HELP, stateDirOf, type StateFlags } from './journal-flags.js';

export function registerGcCommand(program: Command): void {
  addStateFlags(
    program
      .command('gc')
      .description('Drop journal records older than a retention, and before-images no remaining record needs.')
      .requiredOption('--keep <duration>', 'keep this much history: 30m, 24h, 7d, 4w')
      .option('--json', 'print the result as JSON', false),
  )
    .addHelpText(
      'after',
      `
Mutations are dropped from the oldest on, and only as a whole run: the journal always holds a
contiguous history, so a rollback can reach any point within the retention (and none before
it). On a mounted workspace the daemon does it; otherwise the journal is worked on directly.

Examples:
  ledgerfs gc --source ./case-files --keep 7d
  ledgerfs gc --state /var/lib/ledgerfs/ws --keep 24h --json
${STATE_HELP}`,
    )
    .action(async (o: StateFlags & { keep: string; json: boolean }) => {
      const keepMs = parseDuration(o.keep);
      const stateDir = stateDirOf(o);
      const daemon = liveDaemon(stateDir);
      let r: GcResult;
      if (daemon) {
        r = await daemonRequest<GcResult>(daemon, { cmd: 'gc', keepMs }).catch((err: Error) => {
          throw new UserError(err.message);
        });
      } else {
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
      else {
        process.stdout.write(
          `Dropped ${r.droppedOperations} mutation(s) older than ${r.cutoff} and ${r.blobsRemoved} before-image(s); ` +
            `${r.keptOperations} kept${r.firstSeq !== null ? ` (from #${r.firstSeq})` : ''}; ${r.bytesFreed} bytes freed.\n`,
        );
      }
    });
}
