import type { Command } from 'commander';
import { DEFAULTS, formatSize } from '../config/index.js';
import { listStateDirs, pruneStateDirs, type StateDirInfo } from '../app/index.js';
import { parseDuration } from './journal-flags.js';

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

function ago(ms: number): string {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 120) return `${s} s ago`;
  if (s < 7200) return `${Math.round(s / 60)} min ago`;
  if (s < 172_800) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86_400)} days ago`;
}

/** --json: one object per directory, times as ISO 8601 with zone. */
function asJson(s: StateDirInfo) {
  return { dir: s.dir, source: s.source, policy: s.policy, bytes: s.bytes, sessions: s.sessions, lastUsed: iso(s.lastUsed), mounted: s.mounted, inUseBy: s.inUseBy };
}

function describe(s: StateDirInfo): string {
  const what = s.source ? `source ${s.source}` : s.policy ? `policy ${s.policy}` : 'source unknown';
  const sessions = s.sessions === null ? 'journal unreadable (ledgerfs verify --state DIR)' : `${s.sessions} session${s.sessions === 1 ? '' : 's'}`;
  const state = s.mounted
    ? `mounted at ${s.mounted.mountpoint}${s.mounted.pid ? ` (pid ${s.mounted.pid})` : ''}`
    : s.inUseBy ? `in use by pid ${s.inUseBy.pid} (${s.inUseBy.role})` : 'not mounted';
  return `${s.dir}\n  ${what}\n  ${formatSize(s.bytes)}, ${sessions}, last used ${iso(s.lastUsed)} (${ago(s.lastUsed)}); ${state}\n`;
}

export function registerStateCommand(program: Command): void {
  const state = program
    .command('state')
    .description(`List or prune the state directories (journals) under the default state root, ${DEFAULTS.journal.stateHome}.`)
    .addHelpText('after', `
Every source mounted without --state gets a directory there (its journal and before-images),
and it stays after the mount ends so that log, diff and rollback keep working. They pile up:
'state list' shows them, 'state prune' removes the old ones, never one that is mounted.

Examples:
  ledgerfs state list
  ledgerfs state prune --older-than 14d --dry-run
  ledgerfs state prune --older-than 14d`);

  state
    .command('list')
    .description('List the state directories: source, size, sessions, last use, mounted or not.')
    .option('--json', 'print them as JSON (times as ISO 8601 with zone)', false)
    .addHelpText('after', `
Oldest use first. "Last use" is the newest change to the journal or its notes; a mount keeps it
current while it writes. Mounted: a live mount (ledgerfs status) journals there, or its daemon
holds the journal lock.

Example:
  ledgerfs state list --json | jq -r '.[] | select(.mounted == null) | .dir'`)
    .action((o: { json: boolean }) => {
      const dirs = listStateDirs();
      if (o.json) {
        process.stdout.write(JSON.stringify(dirs.map(asJson), null, 2) + '\n');
        return;
      }
      if (dirs.length === 0) {
        process.stdout.write(`No state directories under ${DEFAULTS.journal.stateHome}.\n`);
        return;
      }
      for (const s of dirs) process.stdout.write(describe(s));
    });

  state
    .command('prune')
    .description('Remove state directories not used for a while; never a mounted one, nor one whose journal is in use.')
    .option('--older-than <duration>', `last used longer ago than this: 12h, 7d, 4w (default ${DEFAULTS.statePruneOlderThan})`, DEFAULTS.statePruneOlderThan)
    .option('--dry-run', 'print what would be removed; remove nothing', false)
    .option('--json', 'print the result as JSON', false)
    .addHelpText('after', `
A removed directory takes its journal with it: what its mounts did can no longer be listed,
diffed or rolled back. Only directories under ${DEFAULTS.journal.stateHome} are looked at
(a --state directory elsewhere is yours to remove). Each is removed under its journal lock, so
a mount starting meanwhile is refused rather than losing its journal.

Examples:
  ledgerfs state prune --dry-run
  ledgerfs state prune --older-than 7d`)
    .action((o: { olderThan: string; dryRun: boolean; json: boolean }) => {
      const cutoff = Date.now() - parseDuration(o.olderThan);
      const r = pruneStateDirs(cutoff, { dryRun: o.dryRun });
      if (o.json) {
        process.stdout.write(JSON.stringify({
          dryRun: o.dryRun, cutoff: iso(r.cutoff), removed: r.removed.map(asJson), kept: r.refused.map((s) => ({ ...asJson(s), why: s.why })), younger: r.young,
        }, null, 2) + '\n');
        return;
      }
      const verb = o.dryRun ? 'Would remove' : 'Removed';
      const bytes = r.removed.reduce((n, s) => n + s.bytes, 0);
      for (const s of r.removed) process.stdout.write(`${o.dryRun ? 'would remove' : 'removed'} ${s.dir} (${s.source ?? s.policy ?? 'source unknown'}, ${formatSize(s.bytes)}, last used ${iso(s.lastUsed)})\n`);
      for (const s of r.refused) process.stdout.write(`kept ${s.dir}: ${s.why}\n`);
      process.stdout.write(`${verb} ${r.removed.length} state director${r.removed.length === 1 ? 'y' : 'ies'} (${formatSize(bytes)}) last used before ${iso(r.cutoff)}; ${r.young} used since, ${r.refused.length} kept in use.\n`);
    });
}
