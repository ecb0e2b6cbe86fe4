import type { Command } from 'commander';
import { printable } from '../core/index.js';
import { verifyJournal } from '../journal/index.js';
import { addStateFlags, printJson, STATE_HELP, stateDirOf, syncLiveDaemon, type StateFlags } from './journal-flags.js';
import { Progress } from './progress.js';

export function registerVerifyCommand(program: Command): void {
  addStateFlags(
    program
      .command('verify')
      .description('Check a journal: record checksums, references between records, and every before-image it names.')
      .option('--no-hash', 'check that blobs exist with the right size, without re-hashing their content')
      .option('--json', 'print the report as JSON', false),
  )
    .addHelpText(
      'after',
      `
Changes nothing; safe on a mounted workspace. Exit status 0 when clean, 1 when it found damage.
Each problem is one line naming its kind and where it is:
  record           a record that does not read back (checksum), with the records around it
  missing-segment  a segment gone from between others (or the one a closed segment went on to)
  cut-segment      a segment that lost records at its end (no close record) or before its close
  framing          records where they cannot be (after a close record, under another number)
  blob-missing, blob-size, blob-hash
                   a before-image a record needs is gone, has the wrong size or bytes
  reference        records that name operations the journal does not hold
--json gives the same as "damage": [{kind, message, segment, offset, afterSeq, beforeSeq, blob,
seq, path}]. The torn end of the segment a crash interrupted is a note, not damage: the next
start cuts it and closes the segment.

Examples:
  ledgerfs verify --source ./case-files
  ledgerfs verify --state ./state --no-hash --json
${STATE_HELP}`,
    )
    .action(async (o: StateFlags & { hash: boolean; json: boolean }) => {
      const stateDir = stateDirOf(o);
      await syncLiveDaemon(stateDir);
      const progress = new Progress('verifying');
      let r;
      try {
        r = await verifyJournal(stateDir, { hashBlobs: o.hash, onProgress: (d, t) => progress.update(d, t) });
      } finally {
        progress.finish();
      }
      if (o.json) {
        printJson({ ...r, clean: r.problems.length === 0, stateDir });
      } else {
        const out = (s: string) => process.stdout.write(printable(s) + '\n');
        out(
          `${stateDir}: ${r.segments} segment(s), ${r.records} record(s), ${r.operations} mutation(s) ` +
            `(#${r.firstSeq}..#${r.lastSeq}), ${r.blobsChecked} before-image(s) ${o.hash ? 're-hashed' : 'checked'} (${r.blobBytes} bytes)${r.live ? '; a daemon is writing it' : ''}`,
        );
        for (const n of r.notes) out(`note: ${n}`);
        for (const d of r.damage) out(`PROBLEM (${d.kind}): ${d.message}`);
        out(r.problems.length === 0 ? 'clean' : `${r.problems.length} problem(s)`);
      }
      process.exitCode = r.problems.length === 0 ? 0 : 1;
    });
}
