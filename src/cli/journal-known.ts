import { UserError } from '../app/index.js';
import { buildHistory, type History, journalCatalog, readIntactJournal, readJournal } from '../journal/index.js';
import { syncLiveDaemon } from './journal-flags.js';

/** Edit distance (insert, delete, substitute: 1 each), to suggest what a typo meant. */
function distance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_v, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min((prev[j] as number) + 1, (cur[j - 1] as number) + 1, (prev[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length] as number;
}

/** Every session the journal names, oldest first: mounts (start records, even with no change) and writers of changes. */
export function knownSessions(h: History): string[] {
  const seen = new Set<string>();
  for (const s of h.starts) seen.add(s.session);
  for (const op of h.ops) seen.add(op.session);
  return [...seen];
}

/** The `n` sessions nearest to `id` (fewest edits; on a tie, the newest). */
export function nearestSessions(id: string, sessions: string[], n = 3): string[] {
  return sessions
    .map((s, i) => ({ s, i, d: distance(id, s) }))
    .sort((a, b) => a.d - b.d || b.i - a.i)
    .slice(0, n)
    .map((x) => x.s);
}

/**
 * A session the journal does not know is a typo, not an empty selection: say so (exit 2) and
 * name the nearest ones, rather than "Nothing to roll back." and exit 0.
 */
export function requireKnownSession(h: History, id: string | undefined, flag = '--session'): void {
  if (id === undefined) return;
  const sessions = knownSessions(h);
  if (sessions.includes(id)) return;
  if (sessions.length === 0) throw new UserError(`${flag} ${id}: no such session; this journal has none yet`);
  throw new UserError(`${flag} ${id}: no such session in this journal; nearest: ${nearestSessions(id, sessions).join(', ')} (all of them: ledgerfs log)`);
}

/** A sequence number past the journal's last is an error (exit 2) naming the range there is. */
export function requireKnownSeq(h: History, seq: number | undefined, flag = '--to'): void {
  if (seq === undefined || seq <= h.lastSeq) return;
  if (h.lastSeq === 0) throw new UserError(`${flag} ${seq}: the journal holds no mutations yet`);
  const last = h.ops.slice(-3).map((op) => `#${op.seq}`);
  throw new UserError(`${flag} ${seq}: the journal ends at #${h.lastSeq}; nearest: ${last.join(', ')} (ledgerfs log lists them)`);
}

/**
 * Run checks (requireKnownSession, requireKnownSeq) on a history read through the journal index
 * (readJournalFor): one it refuses is judged again on the whole journal, so the message (nearest
 * sessions, last seqs) is what the whole journal says.
 */
export function knownIn(stateDir: string, partial: History, checks: (h: History) => void): void {
  try {
    checks(partial);
  } catch (err) {
    if (!(err instanceof UserError)) throw err;
    checks(buildHistory(readIntactJournal(stateDir).records));
  }
}

/** requireKnownSession and requireKnownSeq on the journal in `stateDir` as it is on disk now (a live daemon synced first). */
export async function requireKnownInJournal(stateDir: string, sel: { session?: string; seq?: number }): Promise<void> {
  if (sel.session === undefined && sel.seq === undefined) return;
  await syncLiveDaemon(stateDir);
  // the index knows every session and the last seq: the whole journal is read only to word a refusal
  const cat = journalCatalog(stateDir);
  if ((sel.session === undefined || cat.sessions.has(sel.session)) && (sel.seq === undefined || sel.seq <= cat.lastSeq)) return;
  const h = buildHistory(readJournal(stateDir).records);
  requireKnownSession(h, sel.session);
  requireKnownSeq(h, sel.seq);
}
