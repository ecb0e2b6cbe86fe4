import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import {
  type Attr, type Backend, type BackendCapabilities, type BackendFile, type DirEntry, type FsStats, type MkdirHint, type OpenMode, type TimeSpec,
  isWithin, joinPath, parentOf, rebase, VfsError,
} from '../../core/index.js';
import { LocalBackend } from '../local.js';
import { ForwardingFile } from './forward.js';

/**
 * Staged mode (`mount --staged`): an overlay. The program sees its own changes, the base store
 * is only read. Changes live in the state directory: an upper LocalBackend (real files) and a
 * metadata log of what the upper tree cannot say by itself:
 * - `redirects`: view path -> base path it shows (a rename of a base node, file or directory,
 *   without copying it), or null (a whiteout: nothing of the base there, nor below). A path
 *   without an entry shows what its parent's base path + its name shows.
 * - `baseStates`: each base node as first touched (size, mtime, sha256), for apply's conflict check.
 * - `ops`: the namespace changes of base-derived nodes in order (mkdir, rmdir, unlink, rename),
 *   which apply replays so renames stay renames; file contents are written at the end.
 * Every mutation appends one line to the log and fsyncs it before it answers, so a daemon
 * killed mid-session resumes on remount with every change it acknowledged.
 */

export interface BaseState {
  type: string;
  size?: number;
  /** decimal nanoseconds */
  mtimeNs?: string;
  sha256?: string;
  /** the store's identity of the content read (GCS: object and generation); apply pins it */
  version?: string;
}

export type ReplayOp =
  | { op: 'mkdir'; path: string; mode: number }
  | { op: 'rmdir'; path: string }
  | { op: 'unlink'; path: string }
  | { op: 'rename'; from: string; to: string };

type Action =
  | ['clear', string]
  | ['set', string, string | null]
  | ['move', string, string]
  | ['copied', string, string]
  | ['base', string, BaseState]
  | ['op', ReplayOp];

/**
 * A Map keyed by view paths that knows, without a scan, whether it holds a key below a path:
 * every rename moves what is at and under its source, and git renames each of its thousands of
 * objects into place, so a scan of every key per rename made a commit quadratic (a 3,000-file
 * git add+commit took 26 s staged against 4 s live).
 */
export class PathMap<V> extends Map<string, V> {
  // keys strictly below each ancestor path; absent when none
  private below: Map<string, number> | undefined;

  override set(k: string, v: V): this {
    if (!super.has(k)) this.count(k, 1);
    return super.set(k, v);
  }

  override delete(k: string): boolean {
    const had = super.delete(k);
    if (had) this.count(k, -1);
    return had;
  }

  override clear(): void {
    super.clear();
    this.below?.clear();
  }

  /** The keys at `p` and below it. */
  within(p: string): string[] {
    const out = super.has(p) ? [p] : [];
    if ((this.below?.get(p) ?? 0) > 0) for (const k of this.keys()) if (k !== p && isWithin(k, p)) out.push(k);
    return out;
  }

  private count(k: string, d: number): void {
    const below = (this.below ??= new Map());
    for (let q = k; q !== '/'; ) {
      q = parentOf(q);
      const n = (below.get(q) ?? 0) + d;
      if (n > 0) below.set(q, n);
      else below.delete(q);
    }
  }
}

/** The overlay's bookkeeping, as the metadata log rebuilds it (apply and discard read it unmounted). */
export class StagedState {
  readonly redirects = new PathMap<string | null>();
  /** view path of a copied-up node -> its base path */
  readonly copied = new PathMap<string>();
  readonly baseStates = new Map<string, BaseState>();
  readonly ops: ReplayOp[] = [];

  apply(a: Action): void {
    switch (a[0]) {
      case 'clear':
        for (const m of [this.redirects, this.copied]) for (const k of m.within(a[1])) m.delete(k);
        break;
      case 'set':
        this.redirects.set(a[1], a[2]);
        break;
      case 'move':
        for (const m of [this.redirects, this.copied] as Array<PathMap<string | null>>) {
          const moved: Array<[string, string | null]> = [];
          for (const k of m.within(a[1])) moved.push([k, m.get(k) as string | null]);
          for (const [k, v] of moved) {
            m.delete(k);
            m.set(rebase(k, a[1], a[2]), v);
          }
        }
        break;
      case 'copied':
        this.copied.set(a[1], a[2]);
        break;
      case 'base':
        if (!this.baseStates.has(a[1])) this.baseStates.set(a[1], a[2]);
        break;
      case 'op':
        this.ops.push(a[1]);
        break;
    }
  }

  /** The base path a view path shows, or null (whiteout, or below one). */
  basePath(p: string): string | null {
    let q = p;
    for (;;) {
      const r = this.redirects.get(q);
      if (r !== undefined) return r === null ? null : rebase(p, q, r);
      if (q === '/') return p;
      q = parentOf(q);
    }
  }

  /** What the base path of `p` would be from its parent alone (no entry of its own). */
  identityBase(p: string): string | null {
    if (p === '/') return '/';
    const b = this.basePath(parentOf(p));
    return b === null ? null : joinPath(b, p.slice(p.lastIndexOf('/') + 1));
  }
}

export interface StagedLayout {
  dir: string;
  upper: string;
  log: string;
  tmp: string;
}

export function stagedLayout(stateDir: string, session: string): StagedLayout {
  const dir = path.join(stateDir, 'staged', session);
  return { dir, upper: path.join(dir, 'upper'), log: path.join(dir, 'meta.log'), tmp: path.join(dir, 'tmp') };
}

/** The sessions with a staged overlay in this state directory. */
export function stagedSessions(stateDir: string): string[] {
  try {
    return fs.readdirSync(path.join(stateDir, 'staged')).filter((n) => fs.existsSync(stagedLayout(stateDir, n).log)).sort();
  } catch {
    return [];
  }
}

/** Rebuild a session's state from its log (a torn last line, from a crash mid-append, is ignored). */
export function readStagedState(layout: StagedLayout): StagedState {
  const s = new StagedState();
  let text = '';
  try {
    text = fs.readFileSync(layout.log, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  for (const line of text.split('\n')) {
    if (!line) continue;
    let rec: { a: Action[] };
    try {
      rec = JSON.parse(line) as { a: Action[] };
    } catch {
      break; // the torn tail of a crash: that mutation was never acknowledged
    }
    for (const a of rec.a) s.apply(a);
  }
  return s;
}

/** Drop a session's overlay (after apply, or on discard). */
export function dropStaged(layout: StagedLayout): void {
  fs.rmSync(layout.dir, { recursive: true, force: true });
}

/** Read file `p` of `store` from start to end, handing each piece to `onPiece` with its offset; resolves the version read (BackendFile.version). */
async function readThrough(store: Backend, p: string, onPiece: (piece: Buffer, pos: number) => void): Promise<string | undefined> {
  const f = await store.open(p, { write: false });
  const version = f.version;
  try {
    const buf = Buffer.allocUnsafe(1 << 20);
    for (let pos = 0; ; ) {
      const n = await f.read(buf, buf.length, pos);
      if (n <= 0) break;
      onPiece(buf.subarray(0, n), pos);
      pos += n;
    }
  } finally {
    await f.close();
  }
  return version;
}

export async function hashOf(store: Backend, p: string): Promise<string> {
  return (await hashAndVersionOf(store, p)).sha256;
}

async function hashAndVersionOf(store: Backend, p: string): Promise<{ sha256: string; version: string | undefined }> {
  const h = crypto.createHash('sha256');
  const version = await readThrough(store, p, (piece) => h.update(piece));
  return { sha256: h.digest('hex'), version };
}

export async function baseStateOf(store: Backend, p: string, a: Attr): Promise<BaseState> {
  if (a.type !== 'file') return { type: a.type };
  const { sha256, version } = await hashAndVersionOf(store, p);
  return { type: 'file', size: a.size, mtimeNs: a.mtimeNs.toString(), sha256, ...(version !== undefined ? { version } : {}) };
}

export type PendingChange = { kind: 'A' | 'M' | 'D'; path: string } | { kind: 'R'; path: string; from: string };

export class StagedBackend implements Backend {
  readonly kind: string;
  readonly location: string;
  readonly capabilities: BackendCapabilities;
  state: StagedState;
  private upper: LocalBackend;
  private logFd: number;
  /** upper stores replaced by reopen(): files a program still has open read through them */
  private readonly retired: LocalBackend[] = [];
  private readonly inos = new PathMap<number>().set('/', 1);
  private nextIno = 2;
  private readonly copyUps = new Map<string, Promise<void>>();
  /** `ledgerfs freeze`: every change answers EROFS while the session is reviewed */
  frozen = false;

  constructor(readonly base: Backend, readonly layout: StagedLayout) {
    fs.mkdirSync(layout.upper, { recursive: true });
    fs.mkdirSync(layout.tmp, { recursive: true });
    this.state = readStagedState(layout);
    this.logFd = fs.openSync(layout.log, 'a');
    this.upper = new LocalBackend(layout.upper);
    this.kind = base.kind;
    this.location = base.location;
    this.capabilities = { ...base.capabilities, hardLinks: false, xattrs: false, posixNewNodes: true };
  }

  /**
   * Take up the overlay as the state directory holds it now: after an apply or discard run by
   * this daemon (a frozen mount), which dropped, cut or set aside the session's overlay. The
   * upper tree may be a new directory, so a new upper store; the old one stays open for the
   * files programs still hold (it closes with this backend).
   */
  reopen(): void {
    fs.mkdirSync(this.layout.upper, { recursive: true });
    fs.mkdirSync(this.layout.tmp, { recursive: true });
    fs.closeSync(this.logFd);
    this.logFd = fs.openSync(this.layout.log, 'a');
    this.state = readStagedState(this.layout);
    this.retired.push(this.upper);
    this.upper = new LocalBackend(this.layout.upper);
  }

  /** Append one mutation's bookkeeping and make it durable before the mutation answers. */
  private record(actions: Action[], sync = true): void {
    if (actions.length === 0) return;
    fs.writeSync(this.logFd, JSON.stringify({ a: actions }) + '\n');
    if (sync) fs.fsyncSync(this.logFd);
    for (const a of actions) this.state.apply(a);
  }

  private guard(): void {
    if (this.frozen) throw new VfsError('EROFS', 'the staged session is frozen for review (ledgerfs freeze)');
  }

  private ino(p: string, a: Attr): Attr {
    let n = this.inos.get(p);
    if (n === undefined) this.inos.set(p, (n = this.nextIno++));
    return { ...a, ino: n };
  }

  private moveInos(from: string, to: string): void {
    for (const k of this.inos.within(to)) if (k !== '/') this.inos.delete(k);
    const moved: Array<[string, number]> = [];
    for (const k of this.inos.within(from)) if (k !== '/') moved.push([k, this.inos.get(k) as number]);
    for (const [k, v] of moved) {
      this.inos.delete(k);
      this.inos.set(rebase(k, from, to), v);
    }
  }

  private async baseAttr(p: string): Promise<{ b: string; a: Attr } | null> {
    const b = this.state.basePath(p);
    if (b === null) return null;
    const a = this.base.tryStat ? await this.base.tryStat(b) : await this.base.stat(b).catch((e: unknown) => (e instanceof VfsError && (e.code === 'ENOENT' || e.code === 'ENOTDIR') ? null : Promise.reject(e)));
    return a ? { b, a } : null;
  }

  private upperAttr(p: string): Promise<Attr | null> {
    return this.upper.tryStat(p);
  }

  async tryStat(p: string): Promise<Attr | null> {
    const u = await this.upperAttr(p);
    if (u) return this.ino(p, u);
    const b = await this.baseAttr(p);
    return b ? this.ino(p, b.a) : null;
  }

  async stat(p: string): Promise<Attr> {
    const a = await this.tryStat(p);
    if (!a) throw new VfsError('ENOENT', `${p}: no such file or directory`);
    return a;
  }

  async readdir(p: string): Promise<DirEntry[]> {
    const u = await this.upperAttr(p);
    const b = u && u.type !== 'dir' ? null : await this.baseAttr(p);
    if (!u && !b) throw new VfsError('ENOENT', `${p}: no such directory`);
    if ((u ?? b?.a)?.type !== 'dir') throw new VfsError('ENOTDIR', `${p}: not a directory`);
    const out = new Map<string, DirEntry>();
    if (b && b.a.type === 'dir') {
      for (const e of await this.base.readdir(b.b)) {
        if (this.state.basePath(joinPath(p, e.name)) === joinPath(b.b, e.name)) out.set(e.name, e);
      }
    }
    for (const [k, v] of this.state.redirects) {
      if (v === null || k === '/' || parentOf(k) !== p) continue;
      const a = await this.baseAttr(k);
      if (a) out.set(k.slice(k.lastIndexOf('/') + 1), { name: k.slice(k.lastIndexOf('/') + 1), type: a.a.type });
    }
    if (u) for (const e of await this.upper.readdir(p)) out.set(e.name, e);
    return [...out.values()];
  }

  async readlink(p: string): Promise<string> {
    if (await this.upperAttr(p)) return this.upper.readlink(p);
    const b = await this.baseAttr(p);
    if (!b) throw new VfsError('ENOENT', `${p}: no such file`);
    return this.base.readlink(b.b);
  }

  /** The directory `d` of the view, made in the upper tree (with its base mode) if it is not there. */
  private async upperDir(d: string): Promise<void> {
    if (d === '/' || (await this.upperAttr(d))) return;
    await this.upperDir(parentOf(d));
    const b = await this.baseAttr(d);
    if (!b) throw new VfsError('ENOENT', `${d}: no such directory`);
    if (b.a.type !== 'dir') throw new VfsError('ENOTDIR', `${d}: not a directory`);
    try {
      await this.upper.mkdir(d, b.a.mode & 0o7777);
    } catch (err) {
      if (!(err instanceof VfsError && err.code === 'EEXIST')) throw err;
      return;
    }
    // a directory of the base, only brought up to hold changes: no change of its own
    this.record([['copied', d, b.b]]);
  }

  /** Bring a base node into the upper tree before it changes (once, however many ask at once). */
  private copyUp(p: string): Promise<void> {
    const running = this.copyUps.get(p);
    if (running) return running;
    const job = this.doCopyUp(p).finally(() => this.copyUps.delete(p));
    this.copyUps.set(p, job);
    return job;
  }

  private async doCopyUp(p: string): Promise<void> {
    if (await this.upperAttr(p)) return;
    const b = await this.baseAttr(p);
    if (!b) throw new VfsError('ENOENT', `${p}: no such file or directory`);
    if (b.a.type === 'dir') return this.upperDir(p);
    await this.upperDir(parentOf(p));
    const host = path.join(this.layout.upper, p);
    let sha256: string | undefined;
    let version: string | undefined;
    if (b.a.type === 'file') {
      // into a temporary file first: a crash never leaves a half-copied upper file
      const tmp = path.join(this.layout.tmp, `copy-${process.pid}-${crypto.randomBytes(6).toString('hex')}`);
      const fd = fs.openSync(tmp, 'w', b.a.mode & 0o7777);
      const h = crypto.createHash('sha256');
      try {
        version = await readThrough(this.base, b.b, (piece, pos) => {
          h.update(piece);
          fs.writeSync(fd, piece, 0, piece.length, pos);
        });
        fs.fchmodSync(fd, b.a.mode & 0o7777);
        fs.fsyncSync(fd);
      } finally {
        fs.closeSync(fd);
      }
      sha256 = h.digest('hex');
      fs.renameSync(tmp, host);
    } else if (b.a.type === 'symlink') {
      fs.symlinkSync(await this.base.readlink(b.b), host);
    } else {
      throw new VfsError('EPERM', `${p}: a special file cannot be changed in a staged session`);
    }
    if (b.a.type !== 'symlink') await this.upper.utimens(p, { atimeNs: b.a.atimeNs, mtimeNs: b.a.mtimeNs });
    const state: BaseState = b.a.type === 'file' ? { type: 'file', size: b.a.size, mtimeNs: b.a.mtimeNs.toString(), ...(sha256 ? { sha256 } : {}), ...(version !== undefined ? { version } : {}) } : { type: b.a.type };
    this.record([['copied', p, b.b], ['base', b.b, state]]);
  }

  /** A base node about to be removed or renamed: its state as first seen, for apply. */
  private async noteBase(b: { b: string; a: Attr }): Promise<Action[]> {
    if (this.state.baseStates.has(b.b)) return [];
    return [['base', b.b, await baseStateOf(this.base, b.b, b.a)]];
  }

  async open(p: string, mode: OpenMode, createMode?: number): Promise<BackendFile> {
    const wants = mode.write || mode.truncate === true;
    if (!wants && !mode.create) {
      if (await this.upperAttr(p)) return this.upper.open(p, mode);
      const b = await this.baseAttr(p);
      if (!b) throw new VfsError('ENOENT', `${p}: no such file`);
      return this.base.open(b.b, { write: false });
    }
    this.guard();
    const exists = await this.tryStat(p);
    if (exists) {
      if (mode.create && mode.exclusive) throw new VfsError('EEXIST', `${p}: exists`);
      if (exists.type === 'dir') throw new VfsError('EISDIR', `${p}: is a directory`);
      await this.copyUp(p);
      const { knownAbsent: _k, ...m } = mode;
      return new FreezableFile(await this.upper.open(p, m, createMode), () => this.guard());
    }
    if (!mode.create) throw new VfsError('ENOENT', `${p}: no such file`);
    await this.upperDir(parentOf(p));
    const { knownAbsent: _k, ...m } = mode;
    return new FreezableFile(await this.upper.open(p, m, createMode), () => this.guard());
  }

  async mkdir(p: string, mode: number, _hint?: MkdirHint): Promise<Attr | void> {
    this.guard();
    if (await this.tryStat(p)) throw new VfsError('EEXIST', `${p}: exists`);
    await this.upperDir(parentOf(p));
    await this.upper.mkdir(p, mode);
    // not synced on its own (a tar -x makes many): the next synced line carries it, and a
    // directory whose line is lost is still in the upper tree, which apply makes anyway
    this.record([['op', { op: 'mkdir', path: p, mode }]], false);
  }

  async rmdir(p: string): Promise<void> {
    this.guard();
    const a = await this.tryStat(p);
    if (!a) throw new VfsError('ENOENT', `${p}: no such directory`);
    if (a.type !== 'dir') throw new VfsError('ENOTDIR', `${p}: not a directory`);
    if (p === '/') throw new VfsError('EBUSY', 'the root cannot be removed');
    if ((await this.readdir(p)).length > 0) throw new VfsError('ENOTEMPTY', `${p}: directory not empty`);
    const b = await this.baseAttr(p);
    const actions: Action[] = b ? await this.noteBase(b) : [];
    const hid = this.state.redirects.get(p) === null;
    if (await this.upperAttr(p)) await this.upper.rmdir(p);
    actions.push(['clear', p]);
    // the whiteout stays: a base node it hid (e.g. one renamed away) must not come back
    if (b || hid) actions.push(['set', p, null]);
    actions.push(['op', { op: 'rmdir', path: p }]);
    this.record(actions);
    this.inos.delete(p);
  }

  async unlink(p: string): Promise<void> {
    this.guard();
    const a = await this.tryStat(p);
    if (!a) throw new VfsError('ENOENT', `${p}: no such file`);
    if (a.type === 'dir') throw new VfsError('EISDIR', `${p}: is a directory`);
    const b = await this.baseAttr(p);
    const actions: Action[] = b ? await this.noteBase(b) : [];
    const hid = this.state.redirects.get(p) === null;
    if (await this.upperAttr(p)) await this.upper.unlink(p);
    actions.push(['clear', p]);
    if (b || hid) actions.push(['set', p, null]);
    if (b) actions.push(['op', { op: 'unlink', path: p }]);
    this.record(actions);
    this.inos.delete(p);
  }

  async rename(from: string, to: string): Promise<void> {
    this.guard();
    const src = await this.tryStat(from);
    if (!src) throw new VfsError('ENOENT', `${from}: no such file or directory`);
    if (from === to) return;
    const dst = await this.tryStat(to);
    if (!dst) {
      const parent = await this.tryStat(parentOf(to));
      if (!parent) throw new VfsError('ENOENT', `${parentOf(to)}: no such directory`);
      if (parent.type !== 'dir') throw new VfsError('ENOTDIR', `${parentOf(to)}: not a directory`);
    }
    if (isWithin(to, from)) throw new VfsError('EINVAL', `${to} lies inside ${from}`);
    // onto its own ancestor: as Linux answers it
    if (isWithin(from, to)) throw new VfsError('ENOTEMPTY', `${to}: directory not empty`);
    if (dst) {
      if (src.type === 'dir' && dst.type !== 'dir') throw new VfsError('ENOTDIR', `${to}: not a directory`);
      if (src.type !== 'dir' && dst.type === 'dir') throw new VfsError('EISDIR', `${to}: is a directory`);
      if (dst.type === 'dir' && (await this.readdir(to)).length > 0) throw new VfsError('ENOTEMPTY', `${to}: directory not empty`);
    }
    const bFrom = await this.baseAttr(from);
    const bTo = dst ? await this.baseAttr(to) : null;
    const actions: Action[] = [...(bFrom ? await this.noteBase(bFrom) : []), ...(bTo ? await this.noteBase(bTo) : [])];
    const fromUpper = await this.upperAttr(from);
    if (fromUpper) {
      await this.upperDir(parentOf(to));
      await this.upper.rename(from, to);
    } else {
      const toUpper = dst ? await this.upperAttr(to) : null;
      if (toUpper) await (toUpper.type === 'dir' ? this.upper.rmdir(to) : this.upper.unlink(to));
    }
    // apply replays renames of what the base has (and of directories: their mkdir is replayed)
    const replayed = bFrom !== null || src.type === 'dir';
    if (bTo && !replayed) actions.push(['op', dst?.type === 'dir' ? { op: 'rmdir', path: to } : { op: 'unlink', path: to }]);
    const hid = this.state.redirects.get(from) === null;
    actions.push(['clear', to], ['move', from, to], ['set', to, bFrom ? bFrom.b : null]);
    if (bFrom || hid) actions.push(['set', from, null]);
    if (replayed) actions.push(['op', { op: 'rename', from, to }]);
    this.record(actions);
    this.moveInos(from, to);
  }

  async symlink(target: string, p: string): Promise<void> {
    this.guard();
    if (await this.tryStat(p)) throw new VfsError('EEXIST', `${p}: exists`);
    await this.upperDir(parentOf(p));
    await this.upper.symlink(target, p);
  }

  async mknod(p: string, mode: number, rdev: number): Promise<void> {
    this.guard();
    if (await this.tryStat(p)) throw new VfsError('EEXIST', `${p}: exists`);
    await this.upperDir(parentOf(p));
    if (!this.upper.mknod) throw new VfsError('EPERM', 'special files cannot be made here');
    await this.upper.mknod(p, mode, rdev);
  }

  link(_existing: string, _newPath: string): Promise<void> {
    return Promise.reject(new VfsError('EPERM', 'a staged session has no hard links'));
  }

  async chmod(p: string, mode: number): Promise<void> {
    this.guard();
    await this.copyUp(p);
    await this.upper.chmod(p, mode);
  }

  async chown(p: string, uid: number, gid: number): Promise<void> {
    this.guard();
    await this.copyUp(p);
    await this.upper.chown(p, uid, gid);
  }

  async utimens(p: string, times: TimeSpec): Promise<void> {
    this.guard();
    await this.copyUp(p);
    await this.upper.utimens(p, times);
  }

  async truncate(p: string, size: number): Promise<void> {
    this.guard();
    await this.copyUp(p);
    await this.upper.truncate(p, size);
  }

  async statfs(p: string): Promise<FsStats> {
    return this.base.statfs(this.state.basePath(p) ?? '/').catch(() => this.base.statfs('/'));
  }

  /** What the program changed, as A/M/D/R lines (paths of this store); synchronous, for /.ledgerfs/session. */
  pending(): PendingChange[] {
    return pendingChanges(this.state, this.layout);
  }

  async close(): Promise<void> {
    fs.closeSync(this.logFd);
    await this.upper.close();
    for (const u of this.retired) await u.close();
    await this.base.close();
  }
}

export function pendingLine(c: PendingChange): string {
  return c.kind === 'R' ? `R ${c.from} -> ${c.path}` : `${c.kind} ${c.path}`;
}

/** The pending changes of a staged session, from its state and its upper tree. */
export function pendingChanges(s: StagedState, layout: StagedLayout): PendingChange[] {
  const out: PendingChange[] = [];
  const movedFrom = new Set<string>();
  for (const [k, v] of s.redirects) if (v !== null && v !== s.identityBase(k)) movedFrom.add(v);
  const removed = (k: string): boolean => {
    const o = s.identityBase(k);
    return o !== null && !movedFrom.has(o) && s.baseStates.has(o);
  };
  for (const [k, v] of [...s.redirects].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (v !== null) {
      if (v !== s.identityBase(k)) out.push({ kind: 'R', from: v, path: k });
      continue;
    }
    if (!removed(k)) continue;
    // only the topmost of what was removed
    if ([...s.redirects].some(([k2, v2]) => v2 === null && k2 !== k && isWithin(k, k2) && removed(k2))) continue;
    out.push({ kind: 'D', path: k });
  }
  walkUpper(layout, (p, dir) => {
    if (!dir) out.push({ kind: s.copied.has(p) ? 'M' : 'A', path: p });
    else if (!s.copied.has(p)) out.push({ kind: 'A', path: p + '/' });
  });
  return out;
}

/** Every node of a staged session's upper tree by view path, a directory before what is in it, names in order. */
export function walkUpper(layout: StagedLayout, visit: (path: string, dir: boolean) => void): void {
  const walk = (d: string): void => {
    let entries: fs.Dirent[];
    try {
      entries = fs.readdirSync(path.join(layout.upper, d), { withFileTypes: true });
    } catch {
      return; // no upper tree (yet)
    }
    for (const e of entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
      const p = joinPath(d, e.name);
      visit(p, e.isDirectory());
      if (e.isDirectory()) walk(p);
    }
  };
  walk('/');
}

/**
 * A staged file open for writing: `ledgerfs freeze` stops its changes too (EROFS), not only new
 * opens, so a program holding a descriptor from before the freeze cannot change what is being
 * reviewed. The upper store's own copy between its files is kept for the source side; a frozen
 * or wrapped destination goes through the guarded write.
 */
class FreezableFile extends ForwardingFile {
  readonly allocate?: BackendFile['allocate'];
  readonly copyRangeTo?: BackendFile['copyRangeTo'];
  readonly seekData?: BackendFile['seekData'];
  readonly allocatedEnd?: BackendFile['allocatedEnd'];
  readonly readParts?: BackendFile['readParts'];

  constructor(f: BackendFile, private readonly guard: () => void) {
    super(f);
    const { allocate, copyRangeTo, seekData, allocatedEnd, readParts } = f;
    if (allocate) {
      this.allocate = async (mode, offset, length) => {
        guard();
        return allocate.call(f, mode, offset, length);
      };
    }
    if (copyRangeTo) {
      this.copyRangeTo = async (dst, srcPos, dstPos, length) => {
        if (dst instanceof FreezableFile) dst.guard();
        return copyRangeTo.call(f, dst instanceof FreezableFile ? dst.f : dst, srcPos, dstPos, length);
      };
    }
    if (seekData) this.seekData = (offset, what) => seekData.call(f, offset, what);
    if (allocatedEnd) this.allocatedEnd = () => allocatedEnd.call(f);
    if (readParts) this.readParts = (position, length, onData) => readParts.call(f, position, length, onData);
  }

  override async write(buf: Buffer, length: number, position: number): Promise<number> {
    this.guard();
    return super.write(buf, length, position);
  }

  override async truncate(size: number): Promise<void> {
    this.guard();
    return super.truncate(size);
  }
}
