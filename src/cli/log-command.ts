import type { Command } from 'commander';
import { describeConflict, formatTime, JournalFollower, type JournalRecord, type Operation, readJournalFor, recordSeq, statusNotes, summarize, type TagRecord, undoneByMap } from '../journal/index.js';
import { createLogger, isWithin, printable } from '../core/index.js';
import { UserError } from '../app/index.js';
import { DEFAULTS } from '../config/index.js';
import { addStateFlags, parseWhen, pathArg, printJson, journalStateDir, STATE_HELP, syncLiveDaemon, type StateFlags } from './journal-flags.js';
import { knownIn, requireKnownSeq, requireKnownSession } from './journal-known.js';

interface LogOptions extends StateFlags {
  since?: string;
  session?: string;
  path?: string;
  limit?: string;
  all: boolean;
  json: boolean;
  follow: boolean;
}

/** One journal record on one line, for `log --follow` read by people. */
function recordLine(r: JournalRecord): string {
  const t = formatTime(r.time);
  switch (r.kind) {
    case 'op':
      return `#${r.seq}  ${t}  ${r.session}  ${r.actor}${r.pid !== undefined ? `[${r.pid}${r.cmd !== undefined ? ` ${r.cmd.length > 40 ? `${r.cmd.slice(0, 39)}…` : r.cmd}` : ''}]` : ''}  ${r.op} ${r.paths.join(' -> ')}${r.undoes !== undefined ? `  [undoes #${r.undoes}]` : ''}`;
    case 'failed':
      return `#${r.of}  ${t}  failed: ${r.errno}`;
    case 'done':
      return `#${r.of}  ${t}  done`;
    case 'end':
      return `#${r.of}  ${t}  written (${r.reason})`;
    case 'capture':
      return `#${r.of}  ${t}  before-image kept (${r.size} bytes)`;
    case 'range':
      return `#${r.of}  ${t}  before-image of [${r.offset}, ${r.offset + r.length}) kept${r.blob ? '' : ' (a hole)'}`;
    case 'resume':
      return `#${r.of}  ${t}  written again after its fsync`;
    case 'tag':
      return `@  ${t}  ${tagText(r)}`;
    default:
      return `${t}  ${r.kind}${'session' in r ? ` ${String(r.session)}` : ''}`;
  }
}

/**
 * Print records as they are journaled until interrupted: from --since SEQ on (resume where a
 * consumer stopped), else only new ones. --json: one JSON object a line (for jq or a SIEM).
 */
async function follow(stateDir: string, o: LogOptions): Promise<void> {
  const since = o.since !== undefined ? parseWhen(o.since) : undefined;
  const follower = new JournalFollower(stateDir);
  const first = follower.poll();
  const show = (r: JournalRecord) => {
    if (o.session !== undefined && 'session' in r && r.session !== o.session) return;
    process.stdout.write(o.json ? `${JSON.stringify(r)}\n` : `${printable(recordLine(r))}\n`);
  };
  if (since !== undefined) {
    for (const r of first) {
      const seq = recordSeq(r);
      if ('seq' in since ? seq !== undefined && seq >= since.seq : r.time >= since.time) show(r);
    }
  }
  let stop = false;
  const onSignal = () => (stop = true);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  process.stdout.on('error', onSignal); // the reader went away (| head)
  while (!stop) {
    await new Promise((r) => setTimeout(r, DEFAULTS.journal.followPollMs));
    for (const r of follower.poll()) show(r);
  }
}

/** "tag before-reorg: after #41 (session X)" */
function tagText(t: TagRecord): string {
  return `tag ${t.name}: after #${t.at}${t.session !== undefined ? ` (session ${t.session})` : ''}`;
}

/** A tag as scripts see it (`log --json`). */
function tagJson(t: TagRecord): Record<string, unknown> {
  return { ...t, time: new Date(t.time).toISOString(), summary: tagText(t) };
}

/** An operation as scripts see it (`log --json`, `show --json`). */
export function operationJson(op: Operation, undoneBy?: number): Record<string, unknown> {
  const { records: _records, ...rest } = op;
  return { ...rest, time: new Date(op.time).toISOString(), ...(op.endTime ? { endTime: new Date(op.endTime).toISOString() } : {}), summary: summarize(op), ...(undoneBy !== undefined ? { undoneBy } : {}) };
}

/** `[pid command]` when the binding told us the caller; the command cut to keep lines short. */
function caller(op: Operation): string {
  if (op.pid === undefined) return '';
  const cmd = op.cmd === undefined ? '' : ` ${op.cmd.length > 40 ? `${op.cmd.slice(0, 39)}…` : op.cmd}`;
  return `[${op.pid}${cmd}]`;
}

export function registerLogCommand(program: Command): void {
  addStateFlags(
    program
      .command('log')
      .description('List the journaled mutations of a workspace, newest first.')
      .option('--since <when>', 'only from this seq (42), this long ago (10m, 2h) or this ISO 8601 time with zone (2026-11-22T05:30:00Z)')
      .option('--session <id>', 'only this session (a mount, or a rollback)')
      .option('--path <prefix>', 'only mutations that name this path or something below it')
      .option('--limit <n>', 'at most this many')
      .option('--all', 'include mutations the backend refused (nothing changed)', false)
      .option('--follow', 'keep printing records as they are journaled (one a line; with --json one JSON object a line), from --since SEQ or from now, until interrupted', false)
      .option('--json', 'print a JSON array for scripts: conflicts tied to no mutation ({kind: "conflict"}), then the mutations and tags ({kind: "tag"}), newest first', false),
  )
    .addHelpText(
      'after',
      `
Each line: seq, time, session, actor (with [pid command] when the FUSE binding names the
calling process), what changed, and notes ([undoes #N], [undone by #N],
[writing], [pending], [recovered after a crash], [conflict: ... kept at FILE] when a GCS upload
was refused because another writer changed the object: the local bytes are in FILE, see
\`show\`). A write session (open .. close) is one entry. A conflict the journal cannot tie to
an entry has a line of its own, starting with '!'. A tag (ledgerfs tag NAME) has a line starting
with '@', above the mutations made after it: 'tag NAME: after #SEQ'.

Examples:
  ledgerfs log --source ./case-files
  ledgerfs log --source ./case-files --since 1h --path /projects
  ledgerfs log --source ./case-files --follow --json --since 1200 | jq -c 'select(.kind == "op")'
      stream records from #1200 on as they are journaled (resume a consumer where it stopped)
  ledgerfs log --state /var/lib/ledgerfs/ws --session 2026-11-22T05-30-12-ab12 --json | jq '.[].summary'
${STATE_HELP}`,
    )
    .action(async (o: LogOptions) => {
      const stateDir = await journalStateDir(o, createLogger('warn'));
      if (o.follow) return follow(stateDir, o);
      await syncLiveDaemon(stateDir);
      const since = o.since !== undefined ? parseWhen(o.since, '--since') : undefined;
      const prefix = o.path !== undefined ? pathArg(o.path) : undefined;
      const h = readJournalFor(stateDir, {
        ...(o.session !== undefined ? { session: o.session } : {}), ...(prefix !== undefined ? { path: prefix } : {}),
        ...(since ? ('seq' in since ? { fromSeq: since.seq } : { fromTime: since.time }) : {}),
      }).history;
      knownIn(stateDir, h, (k) => {
        requireKnownSession(k, o.session);
        if (since && 'seq' in since) requireKnownSeq(k, since.seq, '--since');
      });
      const limit = o.limit !== undefined ? Number(o.limit) : Infinity;
      if (Number.isNaN(limit) || limit < 0) throw new UserError(`--limit: expected a number, got ${JSON.stringify(o.limit)}`);
      const undoneBy = undoneByMap(h.ops, h);
      const out: Operation[] = [];
      let truncated = false;
      for (let i = h.ops.length - 1; i >= 0; i--) {
        const op = h.ops[i] as Operation;
        if (!o.all && op.status === 'failed') continue;
        if (since && ('seq' in since ? op.seq < since.seq : op.time < since.time)) continue;
        if (o.session !== undefined && op.session !== o.session) continue;
        if (prefix !== undefined && !op.paths.some((p) => isWithin(p, prefix))) continue;
        if (out.length >= limit) {
          truncated = true;
          break;
        }
        out.push(op);
      }
      // tags among the mutations, each above the mutations it comes after; within what is shown
      const oldestShown = truncated ? (out[out.length - 1] as Operation).seq : -Infinity;
      const tags = [...h.tags.values()]
        .filter((t) => (!since || ('seq' in since ? t.at >= since.seq : t.time >= since.time)) && (o.session === undefined || t.session === o.session) && t.at >= oldestShown)
        .sort((a, b) => b.at - a.at || b.time - a.time);
      const entries: Array<{ op: Operation } | { tag: TagRecord }> = [];
      let ti = 0;
      for (const op of out) {
        while (ti < tags.length && (tags[ti] as TagRecord).at >= op.seq) entries.push({ tag: tags[ti++] as TagRecord });
        entries.push({ op });
      }
      while (ti < tags.length) entries.push({ tag: tags[ti++] as TagRecord });
      // conflicts tied to no operation the journal holds: their own entries, newest first, before
      // the operations (a conflict tied to one is in that operation's `conflicts`)
      const loose = h.conflicts
        .filter((c) => (c.of === undefined || !h.bySeq.has(c.of)) && (!since || 'seq' in since || c.time >= since.time) && (prefix === undefined || isWithin(c.path, prefix)))
        .reverse();
      if (o.json) {
        printJson([
          ...loose.map((c) => ({ ...c, time: new Date(c.time).toISOString(), summary: `conflict ${c.path}: ${describeConflict(c)}` })),
          ...entries.map((e) => ('tag' in e ? tagJson(e.tag) : operationJson(e.op, undoneBy.get(e.op.seq)))),
        ]);
        return;
      }
      const w = String(h.lastSeq).length;
      for (const c of loose) process.stdout.write(`${printable(`${'!'.padEnd(w + 1)}  ${formatTime(c.time)}  conflict ${c.path}: ${describeConflict(c)}`)}\n`);
      for (const e of entries) {
        if ('tag' in e) {
          process.stdout.write(`${'@'.padEnd(w + 1)}  ${formatTime(e.tag.time)}  ${tagText(e.tag)}\n`);
          continue;
        }
        const op = e.op;
        const notes = statusNotes(op, undoneBy.get(op.seq));
        process.stdout.write(
          `${printable(`#${String(op.seq).padEnd(w)}  ${formatTime(op.time)}  ${op.session}  ${op.actor}${caller(op)}  ${summarize(op)}${notes.length ? `  [${notes.join('; ')}]` : ''}`)}\n`,
        );
      }
    });
}
