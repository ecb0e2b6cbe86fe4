import fs from 'node:fs';
import type { Command } from 'commander';
import { type GcsJournalRemote, openGcsJournalRemote } from '../backend/index.js';
import { ConfigError, DEFAULT_STATE_DIR_PATTERN, DEFAULTS, type GcsBackendConfig, gcsSource, loadMountFile } from '../config/index.js';
import { type OpenedWorkspace, openWorkspace, UserError, WorkspaceError } from '../app/index.js';
import { blobRefs, BlobStore, BucketMirror, buildHistory, daemonRequest, JournalLock, JournalLockedError, liveDaemon, readJournal, rememberedWorkspace, resolveStateDir, StateDirError, stateLayout, type TagRecord } from '../journal/index.js';
import { type Logger, normalizePath } from '../core/index.js';

/** The flags that name a workspace and its journal, as `mount` takes them. */
export interface StateFlags {
  source?: string;
  policy?: string;
  state?: string;
}

export const STATE_HELP = `
The journal is found as 'mount' finds it: from --state, else the mount file's 'state'
(--policy), else a directory derived from the source:
  ${DEFAULT_STATE_DIR_PATTERN}
(XDG_STATE_HOME moves its base). Without any flag: the demo workspace's journal.`;

export function addStateFlags(cmd: Command): Command {
  return cmd
    .option('--source <dir>', 'the workspace directory, as given to mount')
    .option('--policy <file>', 'the mount/policy file, as given to mount')
    .option('--state <dir>', 'the journal directory, as given to mount (default: derived from the source, see below)');
}

export function stateDirOf(flags: StateFlags, mustExist = true): string {
  if (flags.source !== undefined && flags.policy !== undefined) throw new UserError('--source and --policy cannot be used together');
  let dir: string;
  try {
    dir = resolveStateDir(flags);
  } catch (err) {
    if (err instanceof StateDirError) throw new UserError(err.message);
    throw err;
  }
  if (mustExist && !fs.existsSync(stateLayout(dir).journalDir)) {
    throw new UserError(
      `no journal in ${dir}: this workspace has not been mounted with a journal yet` +
        (flags.state === undefined ? ' (or name it: --source DIR / --policy FILE as given to mount, or --state DIR)' : ''),
    );
  }
  return dir;
}

/** The GCS backend a workspace is on (from --source gs://, the policy file, or the last mount), if it is. */
function gcsBackendOf(flags: StateFlags, stateDir: string): GcsBackendConfig | undefined {
  const named = flags.source === undefined && flags.policy === undefined ? rememberedWorkspace(stateDir) ?? {} : flags;
  if (named.policy !== undefined) {
    try {
      const b = loadMountFile(named.policy).backend;
      return b.type === 'gcs' ? b : undefined;
    } catch (err) {
      if (err instanceof ConfigError) throw new UserError(err.message);
      throw err;
    }
  }
  return gcsSource(named.source);
}

/**
 * stateDirOf for the commands that read the journal (log, show, diff, rollback). On a GCS
 * workspace the journal is mirrored in the bucket: first bring what other hosts wrote there into
 * this host's spool (all of it, on a host that never mounted the workspace) -- not while
 * something here holds the journal (a mount pulled at its start and its spool is current) --
 * and with `blobs` also the before-images the history names that are not here (server-side
 * copies are only in the bucket).
 */
export async function journalStateDir(flags: StateFlags, log: Logger, o: { blobs?: boolean } = {}): Promise<string> {
  const dir = stateDirOf(flags, false);
  const b = gcsBackendOf(flags, dir);
  if (!b) return stateDirOf(flags);
  const layout = stateLayout(dir);
  let remote: GcsJournalRemote | undefined;
  const reach = async () =>
    (remote ??= await openGcsJournalRemote(b, layout.stagingDir).catch((err: unknown) => {
      throw new UserError(`cannot reach the journal in the bucket: ${(err as Error).message}`);
    }));
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const lock = liveDaemon(dir) ? null : tryLock(layout.lockFile, 'journal pull');
  if (lock) {
    try {
      await BucketMirror.open({ remote: await reach(), layout, log, intervalMs: DEFAULTS.journal.mirrorIntervalMs, retryMs: DEFAULTS.journal.mirrorRetryMs });
    } finally {
      lock.release();
    }
  }
  const found = stateDirOf(flags);
  if (o.blobs) {
    const blobs = new BlobStore(layout.blobsDir);
    const refs = buildHistory(readJournal(dir).records).ops.flatMap((op) => blobRefs(op).map((r) => r.hash));
    if (refs.some((r) => !blobs.has(r))) {
      const from = await reach();
      blobs.mirror = { committed: () => undefined, fetch: (ref, dest) => from.fetchBlob(ref, dest) };
      await blobs.ensure(refs);
    }
  }
  return found;
}

function tryLock(file: string, role: string): JournalLock | null {
  try {
    return JournalLock.acquire(file, role);
  } catch (err) {
    if (err instanceof JournalLockedError) return null;
    throw err;
  }
}

/** Ask a running daemon to write out what it buffers, so the journal on disk is current. */
export async function syncLiveDaemon(stateDir: string): Promise<void> {
  const info = liveDaemon(stateDir);
  if (!info) return;
  await daemonRequest(info, { cmd: 'sync' }).catch(() => undefined);
}

/**
 * Open the workspace a journal belongs to: as named by --source/--policy, or, given only
 * --state, as the last mount of that journal named it.
 */
export async function openWorkspaceOf(flags: StateFlags, log: Logger, stateDir?: string): Promise<OpenedWorkspace> {
  let named: StateFlags = flags;
  if (flags.source === undefined && flags.policy === undefined && stateDir !== undefined) {
    const w = rememberedWorkspace(stateDir);
    if (!w) throw new UserError(`${stateDir} does not say which workspace it belongs to; name it: --source DIR or --policy FILE`);
    named = w;
  }
  try {
    // the journal in use is the one checked against the roots (never reachable through the view)
    return await openWorkspace({ source: named.source, policy: named.policy, log, ...(stateDir !== undefined ? { state: stateDir } : {}) });
  } catch (err) {
    if (err instanceof WorkspaceError) throw new UserError(err.message);
    throw err;
  }
}

export function cliLockError(err: unknown): never {
  if (err instanceof JournalLockedError) throw new UserError(err.message);
  throw err;
}

/** A point in the journal; `tag` when it was named by a tag (its `at` is the seq). */
export type When = { seq: number; tag?: TagRecord } | { time: number };

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** "90s", "10m", "24h", "7d", "2w" (also combined: "1h30m") in milliseconds. */
export function parseDuration(s: string): number {
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h|d|w)/g;
  let total = 0;
  let consumed = 0;
  for (const m of s.trim().matchAll(re)) {
    total += Number(m[1]) * (UNITS[m[2] as string] as number);
    consumed += m[0].length;
  }
  if (consumed === 0 || consumed !== s.trim().length) {
    throw new UserError(`not a duration: ${JSON.stringify(s)} (use e.g. 30s, 10m, 24h, 7d)`);
  }
  return total;
}

/** ISO 8601 date and time with its zone (Z or +hh:mm): a time without one would mean the local zone of whoever reads it. */
const ISO_WITH_ZONE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})$/i;

/**
 * A point in the journal: a seq ("42" or "#42"), a duration ago ("10m", "1h30m"), or an ISO 8601
 * time with its zone ("2026-11-22T05:30:00Z", "...+01:00"), and nothing else: anything handed to
 * Date.parse ("-1", "yesterday") would pick some point, and a rollback would undo from there.
 */
export function parseWhen(s: string, flag = '--to', tags?: ReadonlyMap<string, TagRecord>): When {
  const t = s.trim();
  if (/^#?\d+$/.test(t)) return { seq: Number(t.replace('#', '')) };
  if (/^(\d+(\.\d+)?(ms|s|m|h|d|w))+$/.test(t)) return { time: Date.now() - parseDuration(t) };
  const ms = ISO_WITH_ZONE.test(t) ? Date.parse(t) : NaN;
  if (Number.isNaN(ms)) {
    // a tag never reads as any of the above (tagNameProblem), so this order is no choice
    const tag = tags?.get(t);
    if (tag) return { seq: tag.at, tag };
    const known = tags ? [...tags.keys()] : [];
    throw new UserError(
      `${flag}: ${JSON.stringify(s)} is not a sequence number, a duration or an ISO 8601 time with zone${tags ? ', nor a tag of this journal' : ''} (use e.g. 42, 10m, 2h, or 2026-11-22T05:30:00Z` +
        `${tags ? `; ${known.length ? `tags: ${known.slice(-5).join(', ')}${known.length > 5 ? ', …' : ''}` : 'the journal has no tags'}` : ''})`,
    );
  }
  return { time: ms };
}

/** Whether `s` could name a tag (a point that is no seq, duration or time). */
export function mayBeTag(s: string): boolean {
  return TAG_NAME.test(s.trim()) && !readsAsWhen(s);
}

const TAG_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

function readsAsWhen(s: string): boolean {
  try {
    parseWhen(s);
    return true;
  } catch {
    return false;
  }
}

/**
 * Why `name` cannot be a tag, or null: a name --to, --from or --since would read as a seq, a
 * duration or a time would never reach the tag, so it is refused when the tag is made.
 */
export function tagNameProblem(name: string): string | null {
  if (!TAG_NAME.test(name)) {
    return `tag name ${JSON.stringify(name)}: use letters, digits, '.', '_' and '-', starting with a letter or digit (at most 100 characters)`;
  }
  if (readsAsWhen(name)) {
    return `tag name ${JSON.stringify(name)} reads as a sequence number, a duration or an ISO 8601 time, which --to, --from and --since take as such; choose another (e.g. before-${name})`;
  }
  return null;
}

export function pathArg(p: string): string {
  try {
    return normalizePath(p);
  } catch {
    throw new UserError(`not a usable path: ${JSON.stringify(p)}`);
  }
}

/** Fields that hold a moment as milliseconds since the epoch in the journal's records and results. */
const TIME_KEYS = new Set(['time', 'endTime', 'started', 'cutoff']);

/**
 * --json output: every moment in one format, ISO 8601 with its zone (Z), whatever the command
 * (log, show, diff, rollback, verify, gc). File timestamps in node states stay as recorded.
 */
export function printJson(value: unknown): void {
  const replacer = (key: string, v: unknown) => (TIME_KEYS.has(key) && typeof v === 'number' && Number.isFinite(v) ? new Date(v).toISOString() : v);
  process.stdout.write(JSON.stringify(value, replacer, 2) + '\n');
}
