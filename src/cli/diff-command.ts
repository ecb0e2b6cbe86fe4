import type { Command } from 'commander';
import { addTextDiffs, BlobStore, buildHistory, type Change, netChanges, type Operation, readIntactJournal, readJournalFor, stateLayout } from '../journal/index.js';
import { createLogger, isWithin, printable, printableLines } from '../core/index.js';
import { UserError } from '../app/index.js';
import { addStateFlags, mayBeTag, openWorkspaceOf, parseWhen, pathArg, printJson, journalStateDir, STATE_HELP, syncLiveDaemon, type StateFlags, type When } from './journal-flags.js';
import { knownIn, requireKnownSeq, requireKnownSession } from './journal-known.js';

interface DiffOptions extends StateFlags {
  session?: string;
  from?: string;
  to?: string;
  path?: string;
  content: boolean;
  json: boolean;
}

const MARK: Record<Change['kind'], string> = { added: 'A', modified: 'M', deleted: 'D', renamed: 'R' };

function after(op: Operation, w: When | undefined): boolean {
  return w === undefined || ('seq' in w ? op.seq > w.seq : op.time > w.time);
}

export function registerDiffCommand(program: Command): void {
  addStateFlags(
    program
      .command('diff')
      .description('What a session or a range of the journal changed: paths added, modified, deleted, renamed; unified diffs of text files.')
      .option('--session <id>', 'the changes of this session')
      .option('--from <when>', 'changes after this seq (42), duration ago (10m), ISO 8601 time with zone or tag (exclusive)')
      .option('--to <when>', 'changes up to this seq (42), duration ago (10m), ISO 8601 time with zone or tag (inclusive)')
      .option('--path <prefix>', 'only paths at or below this one')
      .option('--no-content', 'list paths only, no unified diffs')
      .option('--json', 'print the changes as JSON', false),
  )
    .addHelpText(
      'after',
      `
A: added, M: modified, D: deleted, R: renamed (from -> to). Several mutations of one path are
one net change; something created and removed within the range does not appear. Text files
(UTF-8, up to 1 MiB) get a unified diff when the journal's before-images (or the workspace,
for files unchanged since) hold both sides.

Examples:
  ledgerfs diff --source ./case-files --session 2026-11-22T05-30-12-ab12
  ledgerfs diff --source ./case-files --from 120 --to 180 --no-content
  ledgerfs diff --source ./case-files --from 1h --path /projects --json
  ledgerfs diff --source ./case-files --from before-reorg --to after-reorg   # tags (ledgerfs tag)
A tag made with --session selects that session's changes only (as --session would).
${STATE_HELP}`,
    )
    .action(async (o: DiffOptions) => {
      if (o.session === undefined && o.from === undefined && o.to === undefined) {
        throw new UserError('say which changes: --session ID and/or --from/--to (seq, time or duration ago)');
      }
      const stateDir = await journalStateDir(o, createLogger('warn'), { blobs: o.content === true });
      await syncLiveDaemon(stateDir);
      // a tag is found in the whole journal; otherwise the index reads only what the range needs
      const tagsOf = [o.from, o.to].some((v) => v !== undefined && mayBeTag(v)) ? buildHistory(readIntactJournal(stateDir).records).tags : undefined;
      const from = o.from !== undefined ? parseWhen(o.from, '--from', tagsOf) : undefined;
      const to = o.to !== undefined ? parseWhen(o.to, '--to', tagsOf) : undefined;
      for (const [flag, w] of [['--from', from], ['--to', to]] as const) {
        const tagged = w && 'seq' in w ? w.tag?.session : undefined;
        if (tagged === undefined) continue;
        if (o.session !== undefined && o.session !== tagged) {
          throw new UserError(`${flag} ${w && 'seq' in w ? w.tag?.name : ''} is a checkpoint of session ${tagged}; --session ${o.session} names another`);
        }
        o.session = tagged; // a session's checkpoint selects that session's changes
      }
      const h = readJournalFor(stateDir, {
        ...(o.session !== undefined ? { session: o.session } : {}),
        ...(from ? ('seq' in from ? { fromSeq: from.seq + 1 } : { fromTime: from.time }) : {}),
      }).history;
      knownIn(stateDir, h, (k) => {
        requireKnownSession(k, o.session);
        if (from && 'seq' in from) requireKnownSeq(k, from.seq, '--from');
        if (to && 'seq' in to) requireKnownSeq(k, to.seq, '--to');
      });
      const prefix = o.path !== undefined ? pathArg(o.path) : undefined;
      const inRange = (op: Operation) => after(op, from) && (to === undefined || !after(op, to)) && (o.session === undefined || op.session === o.session);
      const selected = h.ops.filter((op) => op.status !== 'failed' && inRange(op));
      const lastSelected = selected[selected.length - 1];
      // what changed the files since (content diffs only): everything after the selection, not just the session's
      const later = lastSelected && o.content ? readJournalFor(stateDir, { fromSeq: lastSelected.seq + 1 }).history.ops.filter((op) => op.seq > lastSelected.seq && op.status !== 'failed') : [];
      let { changes, nodes } = netChanges(selected);
      if (prefix !== undefined) changes = changes.filter((c) => isWithin(c.path, prefix) || (c.from !== undefined && isWithin(c.from, prefix)));
      if (o.content) {
        let backend;
        try {
          backend = (await openWorkspaceOf(o, createLogger('silent'), stateDir)).backend;
        } catch {
          backend = undefined; // the workspace is gone: diffs only from the journal's before-images
        }
        try {
          await addTextDiffs(changes, nodes, { blobs: new BlobStore(stateLayout(stateDir).blobsDir), later, ...(backend ? { backend } : {}) });
        } finally {
          await backend?.close();
        }
      }
      if (o.json) {
        printJson(changes);
        return;
      }
      for (const c of changes) {
        const where = c.kind === 'renamed' ? `${c.from} -> ${c.path}` : c.path;
        process.stdout.write(`${printable(`${MARK[c.kind]} ${where}${c.type === 'dir' ? '/' : ''}${c.details.length ? `  (${c.details.join(', ')})` : ''}`)}\n`);
      }
      // the content a program wrote is shown, not played: an ESC or CR in it would redraw the review
      if (o.content) for (const c of changes) if (c.diff) process.stdout.write(printableLines(c.diff));
    });
}
