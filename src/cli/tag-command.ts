import type { Command } from 'commander';
import { buildHistory, daemonRequest, JournalService, liveDaemon, newSessionId, readIntactJournal, RollbackError, TagError, type TagRecord, type TagRequest } from '../journal/index.js';
import { createLogger } from '../core/index.js';
import { UserError } from '../app/index.js';
import { addStateFlags, cliLockError, journalStateDir, openWorkspaceOf, printJson, STATE_HELP, syncLiveDaemon, tagNameProblem, type StateFlags } from './journal-flags.js';
import { requireKnownSession } from './journal-known.js';

interface TagOptions extends StateFlags {
  session?: string;
  actor: string;
  json: boolean;
}

export function registerTagCommand(program: Command): void {
  addStateFlags(
    program
      .command('tag')
      .argument('<name>', 'the checkpoint\'s name: letters, digits, . _ -; not a number, duration or time')
      .description('Name the journal\'s current point (a checkpoint), for rollback --to NAME and diff --from NAME.')
      .option('--session <id>', 'the checkpoint stands for this session: rollback --to NAME and diff --from NAME then select only its mutations after the point')
      .option('--actor <label>', 'who tagged, as the tag record says', 'tag')
      .option('--json', 'print the tag record as JSON', false),
  )
    .addHelpText(
      'after',
      `
A tag is a journaled record naming the last sequence number at the moment it is made: what
happens after it is "after NAME". It shows in 'ledgerfs log' (text and --json). Tag names are
unique in a journal (a second 'tag NAME' exits 2) and never read as a sequence number, a
duration or a time (42, 10m, 2026-11-22T05:30:00Z are refused: --to would take them as such).
On a mounted workspace the daemon writes the record (its point includes everything the mount
has journaled); on an unmounted one the journal is written directly.

Examples:
  ledgerfs tag --source ./case-files before-reorg
  ledgerfs tag --source ./case-files agent-plan-1 --session run-2026-11-22T15-17-53-7e17
  ledgerfs diff --source ./case-files --from before-reorg
  ledgerfs rollback --source ./case-files --to before-reorg --dry-run
${STATE_HELP}`,
    )
    .action(async (name: string, o: TagOptions) => {
      const problem = tagNameProblem(name);
      if (problem) throw new UserError(problem);
      const stateDir = await journalStateDir(o, createLogger('warn'));
      await syncLiveDaemon(stateDir);
      const h = buildHistory(readIntactJournal(stateDir).records);
      requireKnownSession(h, o.session);
      const req: TagRequest = { name, actor: o.actor, ...(o.session !== undefined ? { session: o.session } : {}) };
      let rec: TagRecord;
      try {
        const daemon = liveDaemon(stateDir);
        rec = daemon ? await daemonRequest<TagRecord>(daemon, { cmd: 'tag', request: req }) : await tagDirect(o, stateDir, req);
      } catch (err) {
        // through the daemon a refusal arrives as its message
        if (err instanceof TagError || err instanceof RollbackError) throw new UserError(err.message, 2);
        throw err;
      }
      if (o.json) {
        printJson(rec);
        return;
      }
      process.stdout.write(`Tagged #${rec.at} as ${rec.name}${rec.session !== undefined ? ` (session ${rec.session})` : ''}.\n`);
    });
}

async function tagDirect(o: TagOptions, stateDir: string, req: TagRequest): Promise<TagRecord> {
  const log = createLogger('warn');
  const ws = await openWorkspaceOf(o, log, stateDir);
  try {
    const svc = await JournalService.open({
      stateDir, backend: ws.backend, source: (ws.store ?? ws.backend).location, session: newSessionId('tag-'), actor: o.actor,
      role: 'tag', log, remote: ws.journalRemote,
    }).catch(cliLockError);
    try {
      return await svc.tag(req);
    } finally {
      await svc.close();
    }
  } finally {
    await ws.backend.close();
  }
}
