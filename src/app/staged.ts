import fs from 'node:fs';
import path from 'node:path';
import { dropStaged, hashOf, type PendingChange, pendingChanges, readStagedState, type ReplayOp, type StagedLayout, stagedLayout, StagedState } from '../backend/index.js';
import { type Backend, isWithin, joinPath, type Logger, replaceFileSync, VfsError } from '../core/index.js';
import { JournalService, liveDaemon, newSessionId } from '../journal/index.js';
import type { Vfs } from '../vfs/index.js';
import { UserError } from './errors.js';
import type { OpenedWorkspace } from './workspace.js';

/**
 * `ledgerfs apply` and `discard`: a staged session's overlay (backend/layers/staged.ts) brought
 * to the real store as one journaled session, or dropped. Apply replays the namespace changes
 * of what the store had (renames stay renames: a directory moves in one rename), then writes
 * the files the program made or changed where it left them.
 */

export interface StagedConflict {
  /** path as the program saw it */
  path: string;
  reason: string;
}

export interface ApplyResult {
  session: string;
  dryRun: boolean;
  /** the apply's own journal session (rollback --session undoes it); null when nothing was written */
  applySession: string | null;
  changes: PendingChange[];
  conflicts: StagedConflict[];
  /** --skip-conflicts: what was left out (and why) */
  skipped: StagedConflict[];
  /** --force: conflicts overridden */
  forced: StagedConflict[];
  /** operations done on the store */
  applied: number;
  /** where the changes left out are kept (with --skip-conflicts), else undefined */
  keptIn?: string;
}

export interface ApplyOptions {
  /** only the changes at or below this view path; the rest stay staged */
  path?: string;
  dryRun: boolean;
  force: boolean;
  skipConflicts: boolean;
  actor: string;
}

/** A staged session's overlay, refused while its mount is up (its daemon holds the journal). */
export function stagedOf(stateDir: string, session: string): { layout: StagedLayout; state: StagedState } {
  const layout = stagedLayout(stateDir, session);
  if (!fs.existsSync(layout.log) && !fs.existsSync(layout.upper)) {
    throw new UserError(`session ${session} has no staged changes in ${stateDir} (never staged, or already applied or discarded); 'ledgerfs log --state ${stateDir}' lists the sessions`);
  }
  const live = liveDaemon(stateDir);
  if (live) {
    throw new UserError(
      `the workspace is mounted at ${live.mountpoint} (session ${live.session}); unmount it first (ledgerfs unmount ${live.mountpoint}): its staged changes must not move while they are applied or dropped (ledgerfs freeze only holds them read-only for review)`,
    );
  }
  return { layout, state: readStagedState(layout) };
}

/** The view path of a store path (a policy's roots map them; without one they are the same). */
export function viewPathOf(ws: OpenedWorkspace): (p: string) => string {
  const roots = ws.policy?.compiled.roots ?? [];
  return (p) => roots.find((r) => isWithin(p, r.source))?.toView(p) ?? p;
}

async function tryStat(b: Backend, p: string) {
  if (b.tryStat) return b.tryStat(p);
  return b.stat(p).catch((e: unknown) => (e instanceof VfsError ? null : Promise.reject(e)));
}

/** Each base node the session touched, as it is now against how the session first saw it. */
async function findConflicts(state: StagedState, layout: StagedLayout, store: Backend, view: (p: string) => string, prefix?: string): Promise<Map<string, StagedConflict>> {
  const out = new Map<string, StagedConflict>();
  const outside = (p: string) => prefix !== undefined && !isWithin(p, prefix) && !isWithin(prefix, p);
  for (const [p, was] of state.baseStates) {
    const now = await tryStat(store, p);
    let reason: string | null = null;
    if (!now) reason = `removed since the session first read it (it was a ${was.type})`;
    else if (now.type !== was.type) reason = `now a ${now.type}, a ${was.type} when the session first read it`;
    else if (was.type === 'file') {
      if (now.size !== was.size) reason = `changed since the session first read it (${was.size} bytes then, ${now.size} now)`;
      else if (was.sha256 !== undefined && (await hashOf(store, p)) !== was.sha256) reason = 'changed since the session first read it (other content, same size)';
    }
    if (reason) out.set(p, { path: view(p), reason });
  }
  // what the program made where the base had nothing it touched: someone may have made it since
  const covered = (p: string) => [...state.baseStates.keys()].some((b) => isWithin(p, b));
  const walk = async (d: string): Promise<void> => {
    for (const e of fs.readdirSync(path.join(layout.upper, d), { withFileTypes: true })) {
      const p = joinPath(d, e.name);
      if (outside(p)) continue;
      if (state.copied.has(p) || (prefix !== undefined && !isWithin(p, prefix))) {
        if (e.isDirectory()) await walk(p);
        continue;
      }
      if (!covered(p) && (await tryStat(store, p))) {
        out.set(p, { path: view(p), reason: 'made beside the mount since the session began (the session made it too)' });
        continue;
      }
      if (e.isDirectory()) await walk(p);
    }
  };
  await walk('/');
  return out;
}

/** Where a store path came from in the base, as the replay moves things (a StagedState whose redirects follow the replay). */
function touchesConflict(origin: string | null, conflicts: Map<string, StagedConflict>): StagedConflict | undefined {
  if (origin === null) return undefined;
  for (const [p, c] of conflicts) if (isWithin(p, origin) || isWithin(origin, p)) return c;
  return undefined;
}

export async function applyStaged(ws: OpenedWorkspace, stateDir: string, session: string, o: ApplyOptions, log: Logger): Promise<ApplyResult> {
  const { layout, state: whole } = stagedOf(stateDir, session);
  const view = viewPathOf(ws);
  const prefix = o.path === undefined ? undefined : storePathOf(ws, o.path);
  const { state, rest } = prefix === undefined ? { state: whole, rest: undefined } : splitAt(whole, prefix, o.path as string);
  const inPrefix = (p: string) => prefix === undefined || isWithin(p, prefix);
  const changes = pendingChanges(state, layout)
    .filter((c) => inPrefix(c.path))
    .map((c) => (c.kind === 'R' ? { ...c, from: view(c.from), path: view(c.path) } : { ...c, path: view(c.path) }));
  const conflictMap = await findConflicts(state, layout, ws.store, view, prefix);
  const conflicts = [...conflictMap.values()];
  const result: ApplyResult = { session, dryRun: o.dryRun, applySession: null, changes, conflicts, skipped: [], forced: [], applied: 0 };
  if (o.dryRun) return result;
  if (conflicts.length > 0 && !o.force && !o.skipConflicts) return result;
  if (o.force) {
    result.forced = conflicts;
    conflictMap.clear();
  }
  const applySession = newSessionId('apply-');
  const svc = await JournalService.open({
    stateDir, backend: ws.backend, source: ws.store.location, session: applySession, actor: o.actor, role: 'apply', log, remote: ws.journalRemote,
  });
  result.applySession = applySession;
  try {
    const vfs = svc.attachDirect(ws.stages);
    await replay(vfs, state, layout, conflictMap, view, result, prefix);
  } finally {
    await svc.close();
  }
  if (rest && result.skipped.length === 0) keepRest(layout, rest, prefix as string);
  else if (result.skipped.length === 0) dropStaged(layout);
  else {
    // what was left out stays readable: the overlay, set aside (it no longer fits the store)
    const kept = path.join(stateDir, 'staged-kept', `${session}-${applySession}`);
    fs.mkdirSync(path.dirname(kept), { recursive: true });
    fs.renameSync(layout.dir, kept);
    result.keptIn = kept;
  }
  return result;
}

const WRITE_FLAGS = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC;

async function replay(vfs: Vfs, state: StagedState, layout: StagedLayout, conflicts: Map<string, StagedConflict>, view: (p: string) => string, r: ApplyResult, prefix?: string): Promise<void> {
  // follows the store as the replay changes it: which base node each path now holds
  const sim = new StagedState();
  const skip = (what: string, c: StagedConflict) => r.skipped.push({ path: what, reason: `${c.reason} (${c.path})` });
  const run = async (what: string, origin: string | null, fn: () => Promise<void>): Promise<boolean> => {
    const c = touchesConflict(origin, conflicts);
    if (c) {
      skip(what, c);
      return false;
    }
    try {
      await fn();
      r.applied++;
      return true;
    } catch (err) {
      if (conflicts.size > 0 && err instanceof VfsError) {
        // after something was left out, a change that needed it cannot be made either
        r.skipped.push({ path: what, reason: `${err.code}: depends on a change left out` });
        return false;
      }
      throw err;
    }
  };
  for (const op of state.ops as ReplayOp[]) {
    switch (op.op) {
      case 'mkdir':
        if (await run(view(op.path), op.path, () => vfs.mkdir(view(op.path), op.mode))) sim.apply(['set', op.path, null]);
        break;
      case 'rmdir':
        if (await run(view(op.path), sim.basePath(op.path), () => vfs.rmdir(view(op.path)))) sim.apply(['set', op.path, null]);
        break;
      case 'unlink':
        if (await run(view(op.path), sim.basePath(op.path), () => vfs.unlink(view(op.path)))) sim.apply(['set', op.path, null]);
        break;
      case 'rename': {
        const origin = sim.basePath(op.from);
        if (await run(`${view(op.from)} -> ${view(op.to)}`, origin, () => vfs.rename(view(op.from), view(op.to)))) {
          sim.apply(['clear', op.to]);
          sim.apply(['move', op.from, op.to]);
          sim.apply(['set', op.to, origin]);
          sim.apply(['set', op.from, null]);
        }
        break;
      }
    }
  }
  // then the content: every file of the upper tree where the program left it
  const walk = async (d: string): Promise<void> => {
    const entries = fs.readdirSync(path.join(layout.upper, d), { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1));
    for (const e of entries) {
      const p = joinPath(d, e.name);
      if (prefix !== undefined && !isWithin(p, prefix) && !isWithin(prefix, p)) continue;
      if (prefix !== undefined && !isWithin(p, prefix)) {
        if (e.isDirectory()) await walk(p); // on the way down to the prefix
        continue;
      }
      const host = path.join(layout.upper, p);
      const st = fs.lstatSync(host);
      const origin = state.copied.get(p) ?? null;
      const v = view(p);
      if (e.isDirectory()) {
        const now = await vfs.getattr(v).catch(() => null);
        if (!now) await run(v, p, () => vfs.mkdir(v, st.mode & 0o7777));
        else if ((now.mode & 0o7777) !== (st.mode & 0o7777)) await run(v, origin, () => vfs.chmod(v, st.mode & 0o7777));
        await walk(p);
      } else if (e.isSymbolicLink()) {
        await run(v, origin ?? p, async () => {
          if (await vfs.getattr(v).catch(() => null)) await vfs.unlink(v);
          await vfs.symlink(fs.readlinkSync(host), v);
        });
      } else if (e.isFile()) {
        const was = origin !== null ? state.baseStates.get(origin) : undefined;
        const same = was?.sha256 !== undefined && was.size === st.size && (await sha256File(host)) === was.sha256;
        await run(v, origin ?? p, async () => {
          if (!same) await copyIn(vfs, host, v, st.mode & 0o7777);
          const now = await vfs.getattr(v);
          if ((now.mode & 0o7777) !== (st.mode & 0o7777)) await vfs.chmod(v, st.mode & 0o7777);
        });
      }
    }
  };
  await walk('/');
}

async function sha256File(host: string): Promise<string> {
  const { createHash } = await import('node:crypto');
  return createHash('sha256').update(fs.readFileSync(host)).digest('hex');
}

async function copyIn(vfs: Vfs, host: string, v: string, mode: number): Promise<void> {
  const fh = await vfs.create(v, mode, WRITE_FLAGS);
  const fd = fs.openSync(host, 'r');
  try {
    const buf = Buffer.allocUnsafe(1 << 20);
    for (let pos = 0; ; ) {
      const n = fs.readSync(fd, buf, 0, buf.length, pos);
      if (n <= 0) break;
      for (let off = 0; off < n; ) off += await vfs.write(fh, buf.subarray(off, n), n - off, pos + off);
      pos += n;
    }
    await vfs.flush(fh);
  } finally {
    fs.closeSync(fd);
    await vfs.release(fh);
  }
}

/** `ledgerfs discard`: drop a staged session's overlay (the journal keeps its records, marked staged). */
export function discardStaged(stateDir: string, session: string): { changes: PendingChange[] } {
  const { layout, state } = stagedOf(stateDir, session);
  const changes = pendingChanges(state, layout);
  dropStaged(layout);
  return { changes };
}

/** The store path of a view path (through the policy's root that holds it). */
function storePathOf(ws: OpenedWorkspace, viewPath: string): string {
  const roots = ws.policy?.compiled.roots ?? [];
  const root = [...roots].sort((a, b) => b.path.length - a.path.length).find((r) => isWithin(viewPath, r.path));
  return root ? root.toBackend(viewPath) : viewPath;
}

/**
 * `apply --path`: the part of a session at or below `prefix`, and the rest. Refused (naming it)
 * when a change crosses the prefix (a rename into or out of it), or the prefix itself (or a
 * directory above it) was renamed: those cannot be applied in part.
 */
function splitAt(s: StagedState, prefix: string, shown: string): { state: StagedState; rest: StagedState } {
  const inside = (p: string) => isWithin(p, prefix);
  const cross = (a: string, b: string) => inside(a) !== inside(b);
  if (s.basePath(prefix) !== prefix) {
    throw new UserError(`--path ${shown}: the session renamed or removed it (or a directory above it); apply the whole session, or a prefix it left in place`);
  }
  for (const op of s.ops) {
    if (op.op === 'rename' && cross(op.from, op.to)) {
      throw new UserError(`--path ${shown}: the session renamed ${op.from} to ${op.to}, across it; apply a prefix holding both (or the whole session)`);
    }
  }
  for (const [k, v] of s.redirects) {
    if (v !== null && cross(k, v)) throw new UserError(`--path ${shown}: ${v} was moved to ${k}, across it; apply a prefix holding both (or the whole session)`);
  }
  const part = (keep: (p: string) => boolean): StagedState => {
    const out = new StagedState();
    for (const [k, v] of s.redirects) if (keep(k)) out.redirects.set(k, v);
    for (const [k, v] of s.copied) if (keep(k) || isWithin(prefix, k)) out.copied.set(k, v);
    for (const [k, v] of s.baseStates) if (keep(k)) out.baseStates.set(k, v);
    for (const op of s.ops) if (keep(op.op === 'rename' ? op.from : op.path)) out.ops.push(op);
    return out;
  };
  return { state: part(inside), rest: part((p) => !inside(p)) };
}

/** After `apply --path`: the overlay keeps only the rest (the store now is the view below the prefix). */
function keepRest(layout: StagedLayout, rest: StagedState, prefix: string): void {
  const actions: unknown[] = [];
  for (const [k, v] of rest.redirects) actions.push(['set', k, v]);
  for (const [k, v] of rest.copied) actions.push(['copied', k, v]);
  for (const [k, v] of rest.baseStates) actions.push(['base', k, v]);
  for (const op of rest.ops) actions.push(['op', op]);
  replaceFileSync(layout.log, JSON.stringify({ a: actions }) + '\n', `${layout.log}.new`);
  // below the prefix the store shows what the upper tree held
  if (prefix === '/') fs.rmSync(layout.upper, { recursive: true, force: true });
  else fs.rmSync(path.join(layout.upper, prefix), { recursive: true, force: true });
}
