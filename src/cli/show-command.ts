import type { Command } from 'commander';
import { buildHistory, describeConflict, type Range, describeState, describeUndo, formatTime, readIntactJournal, type State, statusNotes, summarize, undoneByMap } from '../journal/index.js';
import { createLogger, printable, shellQuote } from '../core/index.js';
import { UserError } from '../app/index.js';
import { addStateFlags, printJson, journalStateDir, STATE_HELP, syncLiveDaemon, type StateFlags } from './journal-flags.js';
import { operationJson } from './log-command.js';

function stateLine(path: string, s: State): string {
  const ranges = s?.ranges ? `; before-image of bytes ${s.rangesFrom ?? 0}.. as ${s.ranges.length} data range(s), holes elsewhere` : '';
  return `${path}: ${describeState(s)}${s?.blob ? `; before-image ${s.blob.slice(0, 12)}` : ''}${ranges}`;
}

/** One line per kept range: where, how long, and its blob (or that it was a hole). */
function rangeLines(ranges: readonly Range[] | undefined, label: string): string[] {
  return (ranges ?? []).map((r) => `  ${label.padEnd(9)} [${r.offset}, ${r.offset + r.length}) ${r.length} bytes: ${r.blob ? `blob ${r.blob.slice(0, 12)}` : 'a hole (zeros), no blob'}`);
}

export function registerShowCommand(program: Command): void {
  addStateFlags(
    program
      .command('show')
      .description('Show one journaled mutation in full: before and after states, before-images, its undo.')
      .argument('<seq>', 'the mutation\'s number, as `ledgerfs log` prints it')
      .option('--json', 'print it as JSON, with its raw journal records', false),
  )
    .addHelpText('after', `\nExamples:\n  ledgerfs show --source ./case-files 42\n  ledgerfs show --state ./state --json 42 | jq .before\n${STATE_HELP}`)
    .action(async (seqArg: string, o: StateFlags & { json: boolean }) => {
      const seq = Number(seqArg.replace(/^#/, ''));
      if (!Number.isInteger(seq) || seq <= 0) throw new UserError(`not a seq: ${JSON.stringify(seqArg)}`);
      const stateDir = await journalStateDir(o, createLogger('warn'));
      await syncLiveDaemon(stateDir);
      const h = buildHistory(readIntactJournal(stateDir).records);
      const op = h.bySeq.get(seq);
      if (!op) {
        throw new UserError(seq < h.firstSeq ? `#${seq} is older than the journal's start (#${h.firstSeq}); gc dropped it` : `no #${seq} in the journal (it ends at #${h.lastSeq})`);
      }
      const undoneBy = undoneByMap(h.ops, h).get(seq);
      if (o.json) {
        printJson({ ...operationJson(op, undoneBy), records: op.records.map((r) => r.record) });
        return;
      }
      const lines = [
        `#${op.seq}  ${summarize(op)}`,
        `  time      ${formatTime(op.time)}${op.endTime ? ` .. ${formatTime(op.endTime)} (${op.endReason})` : ''}`,
        `  session   ${op.session}   actor ${op.actor}${op.pid !== undefined ? `   pid ${op.pid}${op.cmd !== undefined ? ` (${op.cmd})` : ''}` : ''}`,
        `  status    ${op.status}${statusNotes(op, undoneBy).length ? ` [${statusNotes(op, undoneBy).join('; ')}]` : ''}`,
        ...op.paths.flatMap((p, i) => [`  before    ${stateLine(p, op.before[i] ?? null)}`, ...rangeLines(op.before[i]?.ranges, 'range')]),
        ...(op.capture ? [`  kept      before-image ${op.capture.blob.slice(0, 12)} (${op.capture.size} bytes, taken before the first overwrite)`] : []),
        ...(op.ranges ? [`  kept      old bytes of ${op.ranges.length} range(s), each taken before its first change:`, ...rangeLines(op.ranges, 'range')] : []),
        ...(op.after ? op.paths.map((p, i) => `  after     ${stateLine(p, op.after?.[i] ?? null)}`) : []),
        ...(op.status !== 'failed' ? [`  undo      ${describeUndo(op)}`] : []),
        ...(op.conflicts ?? []).flatMap((c) => [
          `  conflict  ${c.path}: ${describeConflict(c)}`,
          `  restore   cp ${shellQuote(c.localFile)} MOUNTPOINT${shellQuote(c.path)}   (after looking at what the bucket has now)`,
        ]),
      ];
      process.stdout.write(lines.map(printable).join('\n') + '\n');
    });
}
