import fs from 'node:fs';
import path from 'node:path';
import { dropStaged, hashOf, type PendingChange, pendingChanges, readStagedState, type ReplayOp, walkUpper, type StagedBackend, type StagedLayout, stagedLayout, StagedState } from '../backend/index.js';
import { type Backend, isWithin, joinPath, type Logger, parentOf, replaceFileSync, VfsError } from '../core/index.js';
import { ControlRefusal, JournalService, liveDaemon, newSessionId, type StagedControl } from '../journal/index.js';
import { UsageTable } from '../policy/index.js';
import type { Vfs } from '../vfs/index.js';
import { UserError } from './errors.js';
import { type OpenedWorkspace, workspaceOverStore } from './workspace.js';

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
  /**
   * changed beside the mount after the check, while the apply ran: the store refused the
   * change (GCS: a pinned generation, ifGenerationMatch), nothing was overwritten; also in `skipped`
   */
  late: StagedConflict[];
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

/** Refuses a session without an overlay in this state directory. */
export function stagedExists(stateDir: string, session: string): StagedLayout {
  const layout = stagedLayout(stateDir, session);
  if (!fs.existsSync(layout.log) && !fs.existsSync(layout.upper)) {
    throw new UserError(`session ${session} has no staged changes in ${stateDir} (never staged, or already applied or discarded); 'ledgerfs log --state ${stateDir}' lists the sessions`);
  }
  return layout;
}

/**
 * A staged session's overlay, for apply or discard without a mount; refused while a mount is
 * up (its daemon holds the journal: the CLI asks that daemon instead when it serves the session).
 */
export function stagedOf(stateDir: string, session: string): { layout: StagedLayout; state: StagedState } {
  const layout = stagedExists(stateDir, session);
  const live = liveDaemon(stateDir);
  if (live) {
    throw new UserError(
      `the workspace is mounted at ${live.mountpoint} (session ${live.session}); apply or discard of session ${session} needs it unmounted (ledgerfs unmount ${live.mountpoint}), or the mount of that session frozen (ledgerfs freeze)`,
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
        const origin = state.copied.get(p);
        if (e.isDirectory() && origin !== undefined && !out.has(origin)) {
          // a base directory brought up only to hold what the program made in it: it must still
          // be there (the apply would make it again where someone removed or replaced it)
          const now = await tryStat(store, origin);
          if (now?.type !== 'dir') {
            out.set(origin, { path: view(origin), reason: now ? `now a ${now.type}, a dir when the session first read it` : 'removed since the session first read it (it was a dir)' });
            continue;
          }
        }
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

/** Runs the apply's changes as a journaled session of their own (`session`), through `fn`'s Vfs. */
type ApplyJournal = (session: string, fn: (vfs: Vfs) => Promise<void>) => Promise<void>;

/** `ledgerfs apply` of an unmounted staged session: the workspace's journal opened for the apply. */
export async function applyStaged(ws: OpenedWorkspace, stateDir: string, session: string, o: ApplyOptions, log: Logger): Promise<ApplyResult> {
  const { layout, state } = stagedOf(stateDir, session);
  return applyOverlay(ws, stateDir, session, layout, state, o, async (applySession, fn) => {
    const svc = await JournalService.open({
      stateDir, backend: ws.backend, source: ws.store.location, session: applySession, actor: o.actor, role: 'apply', log, remote: ws.journalRemote,
    });
    try {
      await fn(svc.attachDirect(ws.stages));
    } finally {
      await svc.close();
    }
  });
}

async function applyOverlay(
  ws: OpenedWorkspace, stateDir: string, session: string, layout: StagedLayout, whole: StagedState, o: ApplyOptions, journal: ApplyJournal,
  onProgress?: (done: number, total: number) => void,
): Promise<ApplyResult> {
  const view = viewPathOf(ws);
  const prefix = o.path === undefined ? undefined : storePathOf(ws, o.path);
  const { state, rest } = prefix === undefined ? { state: whole, rest: undefined } : splitAt(whole, prefix, o.path as string);
  const inPrefix = (p: string) => prefix === undefined || isWithin(p, prefix);
  const changes = pendingChanges(state, layout)
    .filter((c) => inPrefix(c.path))
    .map((c) => changeInView(c, view));
  const conflictMap = await findConflicts(state, layout, ws.store, view, prefix);
  const conflicts = [...conflictMap.values()];
  const result: ApplyResult = { session, dryRun: o.dryRun, applySession: null, changes, conflicts, skipped: [], forced: [], late: [], applied: 0 };
  if (o.dryRun) return result;
  if (conflicts.length > 0 && !o.force && !o.skipConflicts) return result;
  if (o.force) {
    result.forced = conflicts;
    conflictMap.clear();
  }
  const applySession = newSessionId('apply-');
  result.applySession = applySession;
  const total = state.ops.length + countEntries(layout.upper);
  // what was checked is what gets changed: a change beside the mount after the check fails the write
  const unpin = ws.store.expectVersions?.(pinsOf(state, layout, new Set(conflicts.map((c) => c.path)), view, prefix));
  try {
    await journal(applySession, (vfs) => replay(vfs, state, layout, conflictMap, view, result, prefix, onProgress ? () => onProgress(result.applied, Math.max(total, result.applied)) : undefined));
  } finally {
    unpin?.();
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

/**
 * What apply pins on the store (Backend.expectVersions, store paths): each base file the session
 * read, at the version it read, and each file the program made where the base had nothing, as
 * absent. Conflicts found by the check are left out (skipped, or applied over with --force).
 */
function pinsOf(state: StagedState, layout: StagedLayout, conflicted: Set<string>, view: (p: string) => string, prefix?: string): Map<string, string | null> {
  const pins = new Map<string, string | null>();
  const wanted = (p: string) => !conflicted.has(view(p)) && (prefix === undefined || isWithin(p, prefix));
  for (const [p, was] of state.baseStates) if (was.version !== undefined && wanted(p)) pins.set(p, was.version);
  // (a node under one the session read from the base is checked through that one)
  const covered = (p: string) => {
    for (let a: string = p; ; a = parentOf(a)) {
      if (state.baseStates.has(a)) return true;
      if (a === '/') return false;
    }
  };
  walkUpper(layout, (p, dir) => {
    if (!dir && !state.copied.has(p) && !covered(p) && wanted(p)) pins.set(p, null);
  });
  return pins;
}

/** Nodes of the upper tree (what the content pass may write), for progress. */
function countEntries(dir: string): number {
  let n = 0;
  try {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) n += 1 + (e.isDirectory() ? countEntries(path.join(dir, e.name)) : 0);
  } catch {
    /* no upper tree */
  }
  return n;
}

async function replay(
  vfs: Vfs, state: StagedState, layout: StagedLayout, conflicts: Map<string, StagedConflict>, view: (p: string) => string, r: ApplyResult, prefix?: string, progressed?: () => void,
): Promise<void> {
  // follows the store as the replay changes it: which base node each path now holds
  const sim = new StagedState();
  const skip = (what: string, c: StagedConflict) => r.skipped.push({ path: what, reason: `${c.reason} (${c.path})` });
  const run = async (what: string, origin: string | null, fn: () => Promise<unknown>): Promise<boolean> => {
    const c = touchesConflict(origin, conflicts);
    if (c) {
      skip(what, c);
      return false;
    }
    try {
      await fn();
      r.applied++;
      progressed?.();
      return true;
    } catch (err) {
      if (err instanceof VfsError && err.code === 'ESTALE') {
        // changed beside the mount after the check: the store refused to write over it
        const c: StagedConflict = { path: what, reason: `changed beside the mount while the apply ran; not overwritten (${err.reason})` };
        r.late.push(c);
        r.skipped.push(c);
        conflicts.set(origin ?? what, c); // what depends on it is left out too
        return false;
      }
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
          // the mtime the program saw (its writes', or what it set: tar -x, cp -p, touch -d), not the apply's
          const mtimeNs = fs.lstatSync(host, { bigint: true }).mtimeNs;
          if (now.mtimeNs !== mtimeNs || !same) await vfs.utimens(v, { mtimeNs });
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

/** What the daemon of a staged mount hands its review commands. */
export interface LiveStaged {
  /** the mount's workspace: its store is `staged` */
  ws: OpenedWorkspace;
  staged: StagedBackend;
  service: JournalService;
  mountpoint: string;
  /** paths a program has open and is writing (the mount journal's write sessions) */
  openWritePaths(): string[];
  /** the kernel forgets what it cached of these view paths (and their directories' entries) */
  invalidate(viewPaths: string[]): Promise<void>;
  log: Logger;
}

/** Options of `apply` as the CLI sends them to the daemon (ApplyOptions, checked there). */
export type LiveApplyOptions = ApplyOptions & { session: string };

/**
 * `freeze`, `apply` and `discard` of a mounted staged session, run by its daemon (which holds
 * the journal): apply and discard only while the mount is frozen, so the program cannot change
 * the overlay meanwhile. The mount stays frozen after them (until `freeze --off`) and shows the
 * workspace as it now is: what the program saw after an apply, the workspace untouched after a
 * discard; the kernel is told to forget what it cached of the changed paths.
 */
export function liveStagedControl(l: LiveStaged): StagedControl {
  const refuseUnlessQuiet = (what: string, session: string): void => {
    if (session !== l.service.session) {
      throw new UserError(`the workspace is mounted at ${l.mountpoint} with staged session ${l.service.session}, not ${session}; ${what} of another session needs the mount unmounted (ledgerfs unmount ${l.mountpoint})`);
    }
    if (!l.staged.frozen) {
      throw new UserError(`the staged session ${session} is still live at ${l.mountpoint}: freeze it first (ledgerfs freeze), so its program cannot change it while it is ${what === 'apply' ? 'applied' : 'dropped'}, or unmount it`);
    }
    const open = l.openWritePaths();
    if (open.length > 0) {
      throw new UserError(`a program at ${l.mountpoint} still has ${open.length} file(s) open for writing (${open.slice(0, 3).join(', ')}${open.length > 3 ? ', ...' : ''}); close them, then ${what} again`);
    }
  };
  /** the mount's view after its overlay changed: its usage recounted, the kernel told */
  const settle = async (changes: PendingChange[]) => {
    const policy = l.ws.policy;
    if (policy) policy.usage.takeFrom(await UsageTable.count(policy.compiled, l.staged));
    const paths = new Set<string>();
    for (const c of changes) {
      for (const p of c.kind === 'R' ? [c.from, c.path] : [c.path]) {
        const q = p.length > 1 && p.endsWith('/') ? p.slice(0, -1) : p;
        paths.add(q);
        paths.add(parentOf(q));
      }
    }
    await l.invalidate([...paths]);
  };
  const refusals = async <T>(fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof UserError) throw new ControlRefusal(err.message);
      throw err;
    }
  };
  return {
    freeze: (frozen) => (l.staged.frozen = frozen),
    apply: (raw, onProgress) =>
      refusals(async () => {
        const o = raw as LiveApplyOptions;
        refuseUnlessQuiet('apply', o.session);
        const layout = l.staged.layout;
        const target = await workspaceOverStore(l.ws, l.staged.base, l.log);
        l.log.info({ session: o.session, dryRun: o.dryRun, path: o.path }, 'apply of the frozen staged session requested');
        const r = await applyOverlay(target, l.service.stateDir, o.session, layout, readStagedState(layout), o, (applySession, fn) =>
          l.service.withSession({ session: applySession, actor: o.actor, backend: target.backend, stages: target.stages }, fn), onProgress);
        if (r.applySession !== null) {
          l.staged.reopen();
          await settle(r.changes);
        }
        l.log.info({ applied: r.applied, applySession: r.applySession, conflicts: r.conflicts.length, skipped: r.skipped.length }, 'apply of the frozen staged session finished');
        return r;
      }),
    discard: (raw) =>
      refusals(async () => {
        const o = raw as { session: string };
        refuseUnlessQuiet('discard', o.session);
        const view = viewPathOf(l.ws);
        const changes = l.staged.pending().map((c) => changeInView(c, view));
        dropStaged(l.staged.layout);
        l.staged.reopen();
        await settle(changes);
        l.log.info({ session: o.session, dropped: changes.length }, 'staged changes discarded');
        return { changes };
      }),
  };
}

/** `ledgerfs discard`: drop a staged session's overlay (the journal keeps its records, marked staged). */
/** A pending change with its paths as the program sees them (`view`: store path to view path). */
export function changeInView(c: PendingChange, view: (p: string) => string): PendingChange {
  return c.kind === 'R' ? { ...c, from: view(c.from), path: view(c.path) } : { ...c, path: view(c.path) };
}

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
