import type { Command } from 'commander';
import { describeSpool, hasSpool, liveMounts, spoolSummary } from '../app/index.js';
import { printJson } from './journal-flags.js';

export function registerStatusCommand(program: Command): void {
  program
    .command('status')
    .description('List the ledgerfs mounts on this machine: mount point, source, journal, binding, daemon pid, and (GCS) the closed files still waiting for their upload.')
    .option('--json', 'print them as JSON', false)
    .addHelpText(
      'after',
      `
Read from the mount table (/proc/self/mountinfo: type fuse.ledgerfs, the source as its name)
and from the note each daemon keeps while it serves (state directory, session, binding, pid).
A mount with no live daemon is listed as dead: clean it up with ledgerfs unmount MOUNTPOINT.
Nothing here touches a mount point, so a hung mount cannot hang this command.

Examples:
  ledgerfs status
  ledgerfs status --json | jq -r '.[].mountpoint'`,
    )
    .action((o: { json: boolean }) => {
      const mounts = liveMounts().map((m) => ({
        mountpoint: m.mountpoint,
        source: m.source,
        state: m.record ? 'serving' : 'dead or unknown',
        stateDir: m.record?.stateDir ?? null,
        session: m.record?.session ?? null,
        binding: m.record?.binding ?? null,
        pid: m.record?.pid ?? null,
        started: m.record ? Date.parse(m.record.started) : null,
        // GCS: closed files waiting for their upload (durability journal), read from the spool
        uploads: m.record?.stateDir && hasSpool(m.record.stateDir) ? spoolSummary(m.record.stateDir) : null,
      }));
      if (o.json) {
        printJson(mounts);
        return;
      }
      if (mounts.length === 0) {
        process.stdout.write('No ledgerfs mounts.\n');
        return;
      }
      for (const m of mounts) {
        process.stdout.write(`${m.mountpoint}\n  source:  ${m.source}\n`);
        if (m.pid === null) {
          process.stdout.write(`  daemon:  none found (dead, or started by an older ledgerfs); clean up: ledgerfs unmount ${m.mountpoint}\n`);
          continue;
        }
        process.stdout.write(
          `  daemon:  pid ${m.pid}, binding ${m.binding}, since ${new Date(m.started as number).toISOString()}\n` +
            `  journal: ${m.stateDir ?? 'off (--no-journal)'}${m.session ? ` (session ${m.session})` : ''}\n` +
            (m.uploads ? `  uploads: ${m.uploads.files ? `${describeSpool(m.uploads)} queued` : 'none queued'}\n` : ''),
        );
      }
    });
}
