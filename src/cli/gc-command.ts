import type { Command } from 'commander';
import { collectGarbage, daemonRequest, type GcResult, JournalService, liveDaemon, newSessionId, readIntactJournal } from '../journal/index.js';
import { createLogger } from '../core/index.js';
import { UserError } from '../app/index.js';
import { parseSize } from '../config/index.js';
import { addStateFlags, cliLockError, openWorkspaceOf, parseDuration, printJson, STATE_HELP, stateDirOf, syncLiveDaemon, type StateFlags } from './journal-flags.js';

export function registerGcCommand(program: Command): void {
  addStateFlags(
    program
      .command('gc')
      .description('Drop journal records older than a retention, and before-images no remaining record needs.')
      .option('--keep <duration>', 'keep this much history: 30m, 24h, 7d, 4w (older is dropped)')
      .option('--max-bytes <size>', 'also drop the oldest whole sessions until the journal (segments and before-images) takes at most this: 500MiB, 2GiB')
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
With --max-bytes, the oldest whole sessions go too until the journal's segments and
before-images fit in SIZE (as far as whole sessions allow: a mounted session is never dropped,
and the result says where dropping stopped); with --keep as well, history older than it goes
either way. At least one of --keep and --max-bytes is needed.
A journal that cannot be read whole is refused ('ledgerfs verify' says why). On a mounted
workspace the daemon does it; otherwise the journal is worked on directly.

Examples:
  ledgerfs gc --source ./case-files --keep 7d --dry-run
  ledgerfs gc --source ./case-files --keep 7d
  ledgerfs gc --state /var/lib/ledgerfs/ws --keep 24h --json
  ledgerfs gc --source ./case-files --max-bytes 2GiB --keep 30d   # at most 2 GiB, at most 30 days
${STATE_HELP}`,
    )
    .action(async (o: StateFlags & { keep?: string; maxBytes?: string; json: boolean; dryRun: boolean }) => {
      if (o.keep === undefined && o.maxBytes === undefined) throw new UserError('say how much to keep: --keep DURATION and/or --max-bytes SIZE (see --help)');
      const keepMs = o.keep !== undefined ? parseDuration(o.keep) : undefined;
      let maxBytes: number | undefined;
      if (o.maxBytes !== undefined) {
        const b = parseSize(o.maxBytes);
        if (typeof b !== 'number') throw new UserError(`--max-bytes: ${b.error}`);
        maxBytes = b;
      }
      const bound = maxBytes !== undefined ? { maxBytes } : {};
      const stateDir = stateDirOf(o);
      const daemon = liveDaemon(stateDir);
      let r: GcResult;
      if (o.dryRun) {
        // read-only: no lock, nothing written; a live daemon first writes out what it buffers
        await syncLiveDaemon(stateDir);
        r = collectGarbage(stateDir, keepMs === undefined ? 0 : Date.now() - keepMs, null, { dryRun: true, ...bound });
      } else if (daemon) {
        r = await daemonRequest<GcResult>(daemon, { cmd: 'gc', ...(keepMs !== undefined ? { keepMs } : {}), ...bound }).catch((err: Error) => {
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
            r = await svc.gc(keepMs, bound);
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
  if (r.maxBytes !== undefined && r.bytesBefore !== undefined) {
    const after = r.bytesBefore - r.bytesFreed;
    out(`  journal ${r.bytesBefore} bytes ${r.dryRun ? 'now, would be' : 'before,'} ${after} ${r.dryRun ? '' : 'now '}(--max-bytes ${r.maxBytes}${after > r.maxBytes ? ': over it, as far as whole sessions allow' : ''})`);
  }
  if (r.droppedSessions.length > 0) out(`  sessions: ${r.droppedSessions.join(', ')}`);
  if (r.stoppedAt) out(`  stopped at #${r.stoppedAt.seq} (session ${r.stoppedAt.session}): ${r.stoppedAt.reason}`);
  if (r.dryRun) out('Nothing was changed (--dry-run).');
}
