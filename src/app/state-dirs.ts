import fs from 'node:fs';
import path from 'node:path';
import { DEFAULTS } from '../config/index.js';
import { JournalLock, JournalLockedError, readJournal, rememberedWorkspace, stateLayout } from '../journal/index.js';
import { liveMounts } from './mount-registry.js';

/*
 * `ledgerfs state list|prune`: the state directories that pile up under the default state root
 * (one per source ever mounted). A directory is ours when it holds a journal, a workspace note
 * or a lock; anything else there is left alone.
 */

export interface StateDirInfo {
  dir: string;
  /** the source the last mount named (a directory or gs://...), or null (policy file, or unknown) */
  source: string | null;
  /** the mount file the last mount named */
  policy: string | null;
  /** bytes of its files */
  bytes: number;
  /** sessions its journal holds (null: the journal cannot be read) */
  sessions: number | null;
  /** newest change to the journal or its notes, ms since the epoch */
  lastUsed: number;
  /** the live mount whose journal it is */
  mounted: { mountpoint: string; pid: number | null } | null;
  /** a live process holding the journal lock (a daemon, or a rollback or gc at work) */
  inUseBy: { pid: number; role: string } | null;
}

function isStateDir(dir: string): boolean {
  const l = stateLayout(dir);
  return [l.journalDir, l.workspaceInfo, l.lockFile].some((p) => fs.existsSync(p));
}

function walk(dir: string, visit: (st: fs.Stats) => void): void {
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return;
  }
  for (const e of entries) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) walk(p, visit);
    else {
      try {
        visit(fs.lstatSync(p));
      } catch {
        /* gone meanwhile */
      }
    }
  }
}

function mtimeOf(p: string): number {
  try {
    return fs.statSync(p).mtimeMs;
  } catch {
    return 0;
  }
}

/** Newest of: the directory, its notes, the journal directory and its segments (blobs are only added with segments). */
function lastUse(dir: string): number {
  const l = stateLayout(dir);
  let t = Math.max(mtimeOf(dir), mtimeOf(l.workspaceInfo), mtimeOf(l.lockFile), mtimeOf(l.daemonInfo), mtimeOf(l.journalDir));
  try {
    for (const name of fs.readdirSync(l.journalDir)) t = Math.max(t, mtimeOf(path.join(l.journalDir, name)));
  } catch {
    /* no journal yet */
  }
  return t;
}

function sessionCount(dir: string): number | null {
  try {
    const sessions = new Set<string>();
    for (const { record } of readJournal(dir).records) {
      const s = (record as { session?: unknown }).session;
      if (typeof s === 'string') sessions.add(s);
    }
    return sessions.size;
  } catch {
    return null;
  }
}

function same(a: string, b: string): boolean {
  try {
    return fs.realpathSync(a) === fs.realpathSync(b);
  } catch {
    return path.resolve(a) === path.resolve(b);
  }
}

export function describeStateDir(dir: string, mounts = liveMounts()): StateDirInfo {
  const w = rememberedWorkspace(dir);
  let bytes = 0;
  walk(dir, (st) => (bytes += st.size));
  const m = mounts.find((x) => x.record?.stateDir && same(x.record.stateDir, dir));
  const holder = JournalLock.liveHolder(stateLayout(dir).lockFile);
  return {
    dir,
    source: w?.source ?? null,
    policy: w?.policy ?? null,
    bytes,
    sessions: sessionCount(dir),
    lastUsed: lastUse(dir),
    mounted: m ? { mountpoint: m.mountpoint, pid: m.record?.pid ?? null } : holder && holder.role.startsWith('mount') ? { mountpoint: holder.role.replace(/^mount\s*/, ''), pid: holder.pid } : null,
    inUseBy: holder ? { pid: holder.pid, role: holder.role } : null,
  };
}

/** The state directories under `root` (default: the default state root), oldest use first. */
export function listStateDirs(root = DEFAULTS.journal.stateHome): StateDirInfo[] {
  let names: string[];
  try {
    names = fs.readdirSync(root);
  } catch {
    return [];
  }
  const mounts = liveMounts();
  return names
    .map((n) => path.join(root, n))
    .filter((d) => fs.lstatSync(d).isDirectory() && isStateDir(d))
    .map((d) => describeStateDir(d, mounts))
    .sort((a, b) => a.lastUsed - b.lastUsed);
}

export interface PruneResult {
  removed: StateDirInfo[];
  /** kept although old enough, and why (mounted, in use) */
  refused: Array<StateDirInfo & { why: string }>;
  /** younger than the cutoff */
  young: number;
  cutoff: number;
}

/**
 * Remove the state directories last used before `cutoff`, never one that is mounted or whose
 * journal a live process holds. Each is removed under its own journal lock, so a mount starting
 * meanwhile is refused rather than journaling into a directory going away.
 */
export function pruneStateDirs(cutoff: number, o: { dryRun: boolean; root?: string }): PruneResult {
  const out: PruneResult = { removed: [], refused: [], young: 0, cutoff };
  for (const s of listStateDirs(o.root)) {
    if (s.lastUsed >= cutoff) {
      out.young++;
      continue;
    }
    if (s.mounted) {
      out.refused.push({ ...s, why: `mounted at ${s.mounted.mountpoint}${s.mounted.pid ? ` (pid ${s.mounted.pid})` : ''}` });
      continue;
    }
    if (s.inUseBy) {
      out.refused.push({ ...s, why: `in use by pid ${s.inUseBy.pid} (${s.inUseBy.role})` });
      continue;
    }
    if (o.dryRun) {
      out.removed.push(s);
      continue;
    }
    let lock: JournalLock;
    try {
      lock = JournalLock.acquire(stateLayout(s.dir).lockFile, 'state prune');
    } catch (err) {
      if (err instanceof JournalLockedError) {
        out.refused.push({ ...s, why: err.message });
        continue;
      }
      throw err;
    }
    // a mount made between the listing and the lock would hold the lock; one without a journal
    // cannot name this directory: checked once more under the lock all the same
    if (liveMounts().some((m) => m.record?.stateDir && same(m.record.stateDir, s.dir))) {
      lock.release();
      out.refused.push({ ...s, why: 'mounted meanwhile' });
      continue;
    }
    fs.rmSync(s.dir, { recursive: true, force: true });
    out.removed.push(s);
  }
  return out;
}
