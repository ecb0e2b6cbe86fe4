import type { Command } from 'commander';
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
A torn record at the very end (a crash mid-write) is a note, not damage: the next start cuts it.

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
        const out = (s: string) => process.stdout.write(s + '\n');
        out(
          `${stateDir}: ${r.segments} segment(s), ${r.records} record(s), ${r.operations} mutation(s) ` +
            `(#${r.firstSeq}..#${r.lastSeq}), ${r.blobsChecked} before-image(s) ${o.hash ? 're-hashed' : 'checked'} (${r.blobBytes} bytes)${r.live ? '; a daemon is writing it' : ''}`,
        );
        for (const n of r.notes) out(`note: ${n}`);
        for (const p of r.problems) out(`PROBLEM: ${p}`);
        out(r.problems.length === 0 ? 'clean' : `${r.problems.length} problem(s)`);
      }
      process.exitCode = r.problems.length === 0 ? 0 : 1;
    });
}
