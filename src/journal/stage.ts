import crypto from 'node:crypto';
import { type Attr, type Backend, type BackendFile, type Caller, callerProcess, isWithin, type Logger, parentOf, type Mutation, type MutationStage, type OpenFileState, VfsError } from '../core/index.js';
import { DEFAULTS } from '../config/index.js';
import { beforeImageError, type BlobStore } from './blobs.js';
import { hashOpenFile, stateFromAttr, stateOf } from './node-state.js';
import { dataRuns, keepBytes, keepData, nextData } from './ranges.js';
import type { ConflictRecord, DoneRecord, JournalOp, NodeState, OpArgs, OpRecord, State } from './record.js';
import type { JournalWriter } from './writer.js';

/** Ops that change a node's metadata and leave its name (and a symlink's text) as it was. */
const META_OPS: ReadonlySet<string> = new Set<JournalOp>(['chmod', 'chown', 'utimens', 'setxattr', 'removexattr']);

/** Directories remembered as recorded (see `dirsSeen`); past this the set starts again (a second record of a directory is harmless). */
const DIRS_SEEN_MAX = 100_000;

/** Who a mutation is recorded for when a rollback makes it (set per caller object). */
export interface RecordContext {
  session: string;
  actor: string;
  undoes?: number;
}

/** A write session in progress: one file, from its first change to close/fsync (or a split). */
interface WriteSession {
  seq: number;
  path: string;
  /** the file's size when the session began: the bytes a before-image must keep */
  oldSize: number;
  /** the before-image is kept (or there was nothing to keep) */
  captured: boolean;
  /**
   * files over journal.extentBytes: the extents (index = offset / extentBytes) whose old bytes
   * are kept (or were a hole); the whole-file `captured` is not used. null: kept whole.
   */
  kept: Set<number> | null;
  /**
   * the session reached an fsync (its `end` record says what the file was then) and nothing
   * changed since: it goes on, keeping what it kept, when its file changes again
   */
  synced: boolean;
  /** the fsync's end record has the content hash (a small file: the session's end need not read it again) */
  syncedHash: boolean;
  /** whom it is recorded for (a rollback's writes never continue a program's session) */
  ctx: RecordContext | undefined;
  /** the begin record or a capture is being written; later requests wait for it */
  busy: Promise<void> | null;
  /** the open file written through (its fstat is cheaper than a stat by path) */
  file: OpenFileState | undefined;
  /** requests of the session being applied now; its end waits for them */
  applying: number;
  idle: (() => void)[];
  /**
   * sha256 of the bytes the session wrote, while it has written [0, shaTo) in order and done
   * nothing else; null once it did (its end then reads the file back to hash it)
   */
  sha?: crypto.Hash | null;
  shaTo?: number;
}

/** A namespace mutation between its split of write sessions and its outcome. */
interface NamespaceChange {
  paths: string[];
  /** renames and rmdirs reach everything below their paths */
  subtree: boolean;
  done: Promise<void>;
}

export interface JournalStageOptions {
  /** what the Vfs sits on (the policy view or the store): paths are view paths */
  backend: Backend;
  writer: JournalWriter;
  blobs: BlobStore;
  session: string;
  actor: string;
  log: Logger;
}

/** The paths a record names, `paths[0]` being the node created, changed or removed. */
export function recordPaths(m: Mutation): string[] {
  if (m.op === 'rename') return [m.path, m.target as string];
  if (m.op === 'link') return [m.target as string, m.path];
  return [m.path];
}

function isSessionOp(m: Mutation): boolean {
  // writes, and truncates through an open file (the Vfs sets firstInSession for those)
  return m.op === 'write' || (m.op === 'truncate' && m.firstInSession !== undefined);
}

function isBackendFile(v: unknown): v is BackendFile {
  const f = v as Partial<BackendFile> | null;
  return typeof f === 'object' && f !== null && typeof f.stat === 'function' && typeof f.write === 'function';
}

/** the attributes a chmod, chown or utimens resolved with (Backend: "with the node's new attributes") */
function isAttr(v: unknown): v is Attr {
  const a = v as Partial<Attr> | null;
  return typeof a === 'object' && a !== null && typeof a.type === 'string' && typeof a.mtimeNs === 'bigint' && typeof a.ino === 'number';
}

function errnoOf(err: unknown): string {
  return err instanceof VfsError ? err.code : ((err as NodeJS.ErrnoException)?.code ?? 'EIO');
}

/**
 * The journal's mutation stage (after policy). For every mutation it writes the intent (before-
 * states, before-image of content the mutation destroys) to the journal file *before* calling
 * `apply`, and the outcome (after-states) after. Writes and truncates through an open file form
 * a write session: one record when it begins, a before-image taken at most once (lazily, by the
 * first request that overwrites or cuts bytes that existed when it began: appends need none),
 * and an end record with the after-state. Later requests of a session cost a map lookup.
 * A file over journal.extentBytes is kept by extents instead: the first request that changes
 * an aligned extent keeps that extent's old bytes (a hole: nothing but a record). An fsync
 * records the after-state but does not end what the session kept: a database that commits
 * with an fsync after every transaction keeps each page's extent once, not the file per commit.
 */
export class JournalStage implements MutationStage {
  readonly name = 'journal';
  private readonly sessions = new Map<string, WriteSession>();
  /**
   * Namespace mutations in progress. A write session cannot begin at a path one of them names
   * (or that a rename or rmdir of a parent reaches) until it is applied: begun in between, the
   * session would miss the split and be journaled under a name the rename then changed (its end
   * recorded "nothing there", and rollback stopped on it as a conflict: issue 13.7).
   */
  private readonly changing = new Set<NamespaceChange>();
  /**
   * The file the last create made, with its outcome record while that still waits in the
   * writer's buffer. If the first write to it comes before anything else reaches the journal
   * (create, write, close: what most programs do), the session continues the create record:
   * its outcome is taken back and the session's end record says what the create left, which
   * saves a record, a write(2) and a stat per small file. A crash mid-session leaves the create
   * without an outcome, which recovery resolves from the file as found.
   */
  private lastCreate: { file: BackendFile; seq: number; path: string; done: DoneRecord } | null = null;
  private readonly contexts = new WeakMap<Caller, RecordContext>();
  /**
   * session + directory path whose mtime before its first entry change in that session an op
   * record holds (OpRecord.dirs): one stat per directory a session changes, not per change
   */
  private readonly dirsSeen = new Set<string>();
  /** the seq of the write session that ended last at a path (DEFAULTS.journal.endedSessionsKept): a conflict
   * found at the last close of a file whose session a chmod or utimens split belongs to it */
  private readonly endedAt = new Map<string, number>();
  private readonly backend: Backend;
  private readonly writer: JournalWriter;
  private readonly blobs: BlobStore;
  readonly session: string;
  readonly actor: string;
  private readonly log: Logger;

  constructor(o: JournalStageOptions) {
    this.backend = o.backend;
    this.writer = o.writer;
    this.blobs = o.blobs;
    this.session = o.session;
    this.actor = o.actor;
    this.log = o.log;
  }

  /** Record mutations made with `caller` under another session/actor (rollback). */
  tag(caller: Caller, ctx: RecordContext): void {
    this.contexts.set(caller, ctx);
  }

  /** End the write session at `path`, if any (a forced rollback is about to rewrite the file). */
  async endSessionAt(path: string): Promise<void> {
    const s = this.sessions.get(path);
    if (s) await this.finishSession(s, 'split');
  }

  /** Paths with a write session in progress (open and written since its last fsync, not yet closed). */
  openWritePaths(): string[] {
    const out: string[] = [];
    for (const [p, s] of this.sessions) if (!s.synced) out.push(p);
    return out;
  }

  run<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    // every fallocate is a write: KEEP_SIZE keeps size and bytes but changes blocks and mtime,
    // which rollback restores (a truncate to the old size frees the reserved blocks), and which
    // a later change would otherwise be judged against as someone else's
    return isSessionOp(m) ? this.sessionOp(m, apply) : this.namespaceOp(m, apply);
  }

  private opRecord(seq: number, m: Mutation, op: JournalOp, paths: string[], before: State[]): OpRecord {
    const ctx = this.contexts.get(m.caller);
    const rec: OpRecord = {
      kind: 'op', seq, time: Date.now(), session: ctx?.session ?? this.session, actor: ctx?.actor ?? this.actor, op, paths, before,
    };
    const who = callerProcess(m.caller.pid);
    if (who !== undefined) {
      rec.pid = who.pid;
      if (who.cmd !== undefined) rec.cmd = who.cmd;
    }
    if (ctx?.undoes !== undefined) rec.undoes = ctx.undoes;
    return rec;
  }

  // ---- everything but write sessions -----------------------------------------------------------

  private async namespaceOp<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    const paths = recordPaths(m);
    if (paths.some((p) => !p)) return apply(); // a node unlinked while open: not in the view
    // One at a time where names overlap (one at or below another): after-states are read by
    // path once the change is applied, and a rename of a parent in between moved them away (a
    // rename recorded as leaving nothing at its target, a false conflict at rollback: 13.7).
    for (let c = this.overlapping(paths); c; c = this.overlapping(paths)) await c;
    // (gated before the split: a session begun from here on waits)
    return this.gated(paths, m.op === 'rename' || m.op === 'rmdir', () => this.namespaceOpGated(m, paths, apply));
  }

  /** Run `fn` with `paths` marked as changing (see `changing`): what starts there meanwhile waits. */
  private async gated<T>(paths: string[], subtree: boolean, fn: () => Promise<T>): Promise<T> {
    let finished!: () => void;
    const change: NamespaceChange = { paths, subtree, done: new Promise<void>((r) => (finished = r)) };
    this.changing.add(change);
    try {
      return await fn();
    } finally {
      this.changing.delete(change);
      finished();
    }
  }

  private overlapping(paths: string[]): Promise<void> | null {
    for (const c of this.changing) {
      if (c.paths.some((q) => paths.some((p) => isWithin(p, q) || isWithin(q, p)))) return c.done;
    }
    return null;
  }

  /** A namespace mutation in progress that a write session at `path` must wait for. */
  private changeAt(path: string): Promise<void> | null {
    for (const c of this.changing) {
      if (c.paths.some((q) => path === q || (c.subtree && isWithin(path, q)))) return c.done;
    }
    return null;
  }

  private async namespaceOpGated<T>(m: Mutation, paths: string[], apply: () => Promise<T>): Promise<T> {
    this.lastCreate = null;
    await this.splitSessions(m, paths);
    const before = await this.beforeStates(m, paths);
    const args = await this.argsOf(m);
    const rec = this.opRecord(0, m, m.op as JournalOp, paths, before);
    if (args) rec.args = args;
    if (!META_OPS.has(m.op) && this.backend.capabilities.dirTimes) await this.recordDirTimes(rec);
    // numbered only now, with nothing awaited before its append: another request's record
    // numbered meanwhile would be written first, and the log's order is the sequence's
    const seq = this.writer.nextSeq();
    rec.seq = seq;
    rec.time = Date.now();
    this.writer.appendNow(rec);
    let result: T;
    try {
      result = await apply();
    } catch (err) {
      this.writer.appendSoon({ kind: 'failed', of: seq, time: Date.now(), errno: errnoOf(err) });
      throw err;
    }
    try {
      let after: State[];
      if (m.op === 'create' && isBackendFile(result)) {
        // create hands back the new file: fstat it rather than stat the path (no path walk)
        const attr = await result.stat();
        const st = stateFromAttr(attr);
        m.after = attr;
        after = [st];
        const done: DoneRecord = { kind: 'done', of: seq, time: Date.now(), after };
        this.writer.appendSoon(done);
        // an empty file: its first write session can continue this record (see lastCreate)
        if (st.size === 0) this.lastCreate = { file: result, seq, path: paths[0] as string, done };
        return result;
      }
      // an op that leaves the name in place cannot change a symlink's text: reuse the before's
      const keepsName = META_OPS.has(m.op);
      if (paths.length === 1) {
        // the node as the change left it: the request's reply can answer with these attributes
        const seen: { attr?: Attr } = {};
        // (chmod, chown and utimens answer with the attributes they left, where the store has them)
        const known = keepsName && isAttr(result) ? result : undefined;
        after = [await stateOf(this.backend, paths[0] as string, keepsName ? { sameTarget: before[0] ?? null, known } : {}, seen)];
        if (paths[0] === m.path) m.after = seen.attr;
      } else {
        after = await Promise.all(paths.map((p) => stateOf(this.backend, p)));
      }
      this.writer.appendSoon({ kind: 'done', of: seq, time: Date.now(), after });
    } catch (err) {
      // The change is made; without an outcome the next start resolves it from the backend.
      this.log.warn({ seq, op: m.op, path: m.path, err: (err as Error).message }, 'journal: could not record the outcome');
    }
    return result;
  }

  /**
   * The mtimes, before this op, of the directories whose entries it changes, where the op is the
   * session's first change of them. A rollback puts its own entries back through the directory,
   * which sets its mtime to the rollback's time; these are what it sets back at the end.
   */
  private async recordDirTimes(rec: OpRecord): Promise<void> {
    let dirs: { path: string; mtimeNs: string }[] | undefined;
    for (const p of rec.paths) {
      if (p === '/') continue;
      const dir = parentOf(p);
      const key = `${rec.session}\0${dir}`;
      if (this.dirsSeen.has(key)) continue;
      if (this.dirsSeen.size >= DIRS_SEEN_MAX) this.dirsSeen.clear();
      this.dirsSeen.add(key);
      const st = await stateOf(this.backend, dir);
      if (st?.type === 'dir') (dirs ??= []).push({ path: dir, mtimeNs: st.mtimeNs });
    }
    if (dirs) rec.dirs = dirs;
  }

  /** Before-states, with a before-image of the content this mutation destroys. */
  private async beforeStates(m: Mutation, paths: string[]): Promise<State[]> {
    // An O_EXCL create either finds nothing there or fails (EEXIST, journaled as failed): no
    // look at the name first. Most creates are these (tar, git, editors' temp files).
    if (m.op === 'create' && m.exclusive) return [null];
    const before = await Promise.all(paths.map((p) => stateOf(this.backend, p, { atime: m.op === 'utimens' })));
    const keep = async (i: number, size: number, cutFrom = 0) => {
      const s = before[i];
      if (s && s.type === 'file' && size > 0) await this.keepContent(s, paths[i] as string, cutFrom);
    };
    const b0 = before[0];
    switch (m.op) {
      case 'unlink':
        if (b0) await keep(0, b0.size);
        await this.keepXattrs(b0, paths[0] as string);
        break;
      case 'rmdir':
        await this.keepXattrs(b0, paths[0] as string);
        break;
      case 'create':
        // O_CREAT on an existing file (a race with the kernel's lookup): O_TRUNC empties it
        if (b0 && m.truncate) await keep(0, b0.size);
        break;
      case 'truncate':
        if (b0 && (m.size ?? 0) < b0.size) await keep(0, b0.size, m.size ?? 0);
        break;
      case 'rename': {
        const to = before[1];
        // renamed over: the replaced file's content goes (unless both names are one node)
        if (to && !(b0 && b0.ino === to.ino)) {
          await keep(1, to.size);
          await this.keepXattrs(to, paths[1] as string);
        }
        break;
      }
      default:
        break;
    }
    return before;
  }

  /**
   * Keep the `user.*` extended attributes of a node this op removes (the only ones a program
   * can set through the mount), so that a rollback brings them back with it. A store or node
   * that has none (a symlink, an object store without them) keeps nothing.
   */
  private async keepXattrs(s: State, path: string): Promise<void> {
    const b = this.backend;
    if (!s || s.type === 'symlink' || !b.capabilities.xattrs || !b.listxattr || !b.getxattr) return;
    let names: string[];
    try {
      names = await b.listxattr(path);
    } catch (err) {
      if (err instanceof VfsError && (err.code === 'EOPNOTSUPP' || err.code === 'ENOTSUP' || err.code === 'ENODATA')) return;
      throw err;
    }
    let kept: Record<string, string> | undefined;
    for (const name of names) {
      if (!name.startsWith('user.')) continue;
      try {
        (kept ??= {})[name] = (await b.getxattr(path, name)).toString('base64');
      } catch (err) {
        if (!(err instanceof VfsError && err.code === 'ENODATA')) throw err; // removed meanwhile
      }
    }
    if (kept) s.xattrs = kept;
  }

  /**
   * Keep the content of `s` from `cutFrom` on (what an unlink, a rename over it or a truncate
   * destroys): whole as one blob (small files, a store that keeps copies itself, a dense file
   * losing all of it: one reflinked copy), else its data extents.
   */
  private async keepContent(s: NodeState, path: string, cutFrom: number): Promise<void> {
    const extent = DEFAULTS.journal.extentBytes;
    if (s.size <= extent || this.backend.keepCopy) {
      s.blob = await this.blobs.capture(this.backend, path, s.size);
      return;
    }
    const file = await this.backend.open(path, { write: false });
    try {
      if (cutFrom === 0) {
        const data = (await dataRuns(file, 0, s.size)).reduce((n, [a, b]) => n + b - a, 0);
        if (data === s.size) {
          s.blob = await this.blobs.capture(this.backend, path, s.size);
          return;
        }
      }
      s.ranges = await keepData(this.blobs, file, cutFrom, s.size, extent, path);
      if (cutFrom > 0) s.rangesFrom = cutFrom;
    } catch (err) {
      if (err instanceof VfsError || (err as NodeJS.ErrnoException).code === 'ENOSPC') throw beforeImageError(err, path);
      throw err;
    } finally {
      await file.close();
    }
  }

  private async argsOf(m: Mutation): Promise<OpArgs | undefined> {
    switch (m.op) {
      case 'create':
      case 'mkdir':
      case 'chmod':
        return m.mode !== undefined ? { mode: m.mode } : undefined;
      case 'truncate':
        return { size: m.size ?? 0 };
      case 'chown':
        return { uid: m.uid ?? -1, gid: m.gid ?? -1 };
      case 'symlink':
        return { target: m.target ?? '' };
      case 'mknod':
        return { mode: m.mode ?? 0, ...(m.rdev ? { rdev: m.rdev } : {}) };
      case 'setxattr':
      case 'removexattr': {
        let old: string | null = null;
        try {
          old = (await this.backend.getxattr?.(m.path, m.xattr ?? ''))?.toString('base64') ?? null;
        } catch {
          old = null;
        }
        return { xattr: m.xattr ?? '', xattrBefore: old };
      }
      default:
        return undefined;
    }
  }

  /**
   * End write sessions a mutation touches (the path itself, or below a renamed or removed
   * directory) before recording it, so a session never interleaves with other records of its
   * file: `cp -p` sets times while the file is open, and its undo must find the session ended.
   */
  private async splitSessions(m: Mutation, paths: string[]): Promise<void> {
    if (this.sessions.size === 0) return;
    const hit: WriteSession[] = [];
    for (const [p, s] of this.sessions) {
      if (paths.some((q) => p === q || ((m.op === 'rename' || m.op === 'rmdir') && isWithin(p, q)))) hit.push(s);
    }
    for (const s of hit) await this.finishSession(s, 'split');
  }

  // ---- write sessions ----------------------------------------------------------------------------

  private async sessionOp<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    let s: WriteSession;
    // (no await between the last checks and `applying++`: a namespace change that starts later
    // sees the session and splits it, and the split waits for this request)
    for (;;) {
      let path = m.file ? m.file.path : m.path;
      for (let wait = path ? this.changeAt(path) : null; wait; wait = path ? this.changeAt(path) : null) {
        await wait;
        path = m.file ? m.file.path : m.path;
      }
      if (!path) return apply(); // unlinked while open: the view no longer has it
      s = this.sessions.get(path) ?? this.beginSession(path, m);
      while (s.busy) await s.busy; // a failed begin throws here, and the request fails unapplied
      // ended meanwhile (a chmod or rename split it): this request begins the next one
      if (this.sessions.get(path) !== s) continue;
      if (s.synced && (s.file !== m.file || s.ctx !== this.contexts.get(m.caller))) {
        // another open file, or a rollback, changes it after the fsync: a session of its own
        await this.finishSession(s, 'split');
        continue;
      }
      // the bytes that existed when the session began which this request destroys: fallocate's
      // 'allocate' and 'keep-size' keep every byte (they may only grow the file or its blocks,
      // undone by a truncate); appends past the old size destroy nothing
      const lo = m.allocate === 'allocate' || m.allocate === 'keep-size' ? s.oldSize : m.op === 'write' ? (m.offset ?? 0) : (m.size ?? 0);
      const hi = m.op === 'write' ? Math.min(s.oldSize, m.size ?? (m.offset ?? 0) + (m.length ?? 0)) : s.oldSize;
      if (lo < hi && (s.kept ? this.missingExtents(s, lo, hi) : !s.captured)) {
        const sess = s;
        sess.busy = (sess.kept ? this.captureExtents(sess, lo, hi) : this.capture(sess)).finally(() => (sess.busy = null));
        await sess.busy;
        continue; // (checked again: a split may have come meanwhile)
      }
      break;
    }
    if (s.synced) {
      // changed again after its fsync: the session is open again (recovery and rollback must
      // not take the fsync's after-state for the file's), before the change reaches the file
      s.synced = false;
      this.writer.appendNow({ kind: 'resume', of: s.seq, time: Date.now() });
    }
    // the session's end (a split) waits until this request is applied, so its after-state and
    // the request are in the same session
    s.applying++;
    try {
      const done = await apply();
      this.hashAsWritten(s, m, done);
      return done;
    } catch (err) {
      s.sha = null; // what reached the file is unknown
      throw err;
    } finally {
      if (--s.applying === 0) for (const wake of s.idle.splice(0)) wake();
    }
  }

  /**
   * Hash a file written in order from its start as its bytes pass (tar, cp, an editor's save),
   * so its end need not read it back: the hash is what the content of a file of `shaTo` bytes is.
   * Anything else (a truncate, a fallocate, a write elsewhere, two writes completing out of
   * order) gives up, and the end reads the file as before.
   */
  private hashAsWritten(s: WriteSession, m: Mutation, done: unknown): void {
    if (s.sha === null) return;
    if (m.op !== 'write' || m.allocate || !m.data || typeof done !== 'number' || m.offset !== (s.shaTo ?? 0)) {
      s.sha = null;
      return;
    }
    if ((s.shaTo ?? 0) + done > DEFAULTS.journal.contentHashMaxBytes) {
      s.sha = null; // a file this big gets no content hash (afterState): hashing it is lost work
      return;
    }
    s.sha ??= crypto.createHash('sha256');
    s.sha.update(done === m.data.length ? m.data : m.data.subarray(0, done));
    s.shaTo = (s.shaTo ?? 0) + done;
  }

  private beginSession(path: string, m: Mutation): WriteSession {
    const lc = this.lastCreate;
    this.lastCreate = null;
    if (lc && m.file && m.file.file === lc.file && lc.path === path && this.writer.retract(lc.done)) {
      const s: WriteSession = {
        seq: lc.seq, path, oldSize: 0, captured: true, kept: null, synced: false, syncedHash: false, ctx: this.contexts.get(m.caller), busy: null, file: m.file, applying: 0, idle: [],
      };
      this.sessions.set(path, s);
      return s;
    }
    const s: WriteSession = {
      seq: 0, path, oldSize: 0, captured: false, kept: null, synced: false, syncedHash: false, ctx: this.contexts.get(m.caller), busy: null, file: m.file, applying: 0, idle: [],
    };
    this.sessions.set(path, s);
    s.busy = (async () => {
      try {
        const before = await this.stateOfSession(s);
        s.oldSize = before && before.type === 'file' ? before.size : 0;
        s.captured = s.oldSize === 0;
        // (a store that keeps copies itself, GCS, keeps whole files server-side as before)
        if (s.oldSize > DEFAULTS.journal.extentBytes && !this.backend.keepCopy) s.kept = new Set();
        s.seq = this.writer.nextSeq();
        this.writer.appendNow(this.opRecord(s.seq, m, 'write', [path], [before]));
      } catch (err) {
        this.sessions.delete(path);
        throw err;
      } finally {
        s.busy = null;
      }
    })();
    // Waiters re-check the map; the request that began the session sees the error itself.
    s.busy.catch(() => undefined);
    return s;
  }

  /** Keep bytes [0, oldSize) before the first request that overwrites or cuts them. */
  private async capture(s: WriteSession): Promise<void> {
    const blob = await this.blobs.capture(this.backend, s.path, s.oldSize);
    this.writer.appendNow({ kind: 'capture', of: s.seq, time: Date.now(), blob, size: s.oldSize });
    s.captured = true;
  }

  /** Extents of [lo, hi) whose old bytes the session has not kept yet. */
  private missingExtents(s: WriteSession, lo: number, hi: number): boolean {
    const e = DEFAULTS.journal.extentBytes;
    const kept = s.kept as Set<number>;
    for (let i = Math.floor(lo / e), last = Math.floor((hi - 1) / e); i <= last; i++) if (!kept.has(i)) return true;
    return false;
  }

  /**
   * Keep the old bytes of every extent of [lo, hi) not kept yet, one `range` record each, before
   * the request changes them. Extents the session has not touched still hold their old bytes
   * (a truncate below them kept them all first). Runs of hole extents are one record, no blob.
   */
  private async captureExtents(s: WriteSession, lo: number, hi: number): Promise<void> {
    const e = DEFAULTS.journal.extentBytes;
    const kept = s.kept as Set<number>;
    if (lo === 0 && hi >= s.oldSize && kept.size === 0) {
      // every old byte goes at once (O_TRUNC, a truncate to 0): one copy of the file, reflinked
      // where the store can, as a file that small is kept, instead of an extent at a time
      await this.capture(s);
      s.kept = null;
      return;
    }
    const own = s.file && s.file.path === s.path ? s.file.file : null;
    const file = own ?? (await this.backend.open(s.path, { write: false }));
    let hole: [number, number] | null = null; // extents [first, end) of a hole run not recorded yet
    // where the next data is at or after the extent looked at; Infinity: none. One SEEK_DATA per
    // run, never a SEEK_HOLE: a SEEK_HOLE per extent of a dense file scanned tmpfs's page cache
    // to its end each time (an O_TRUNC rewrite of 512 MiB: 18 s). A data extent is kept whole,
    // holes and all.
    let next = -1;
    const hasData = async (offset: number, end: number): Promise<boolean> => {
      if (next < offset) next = await nextData(file, offset, Infinity);
      return next < end;
    };
    const flushHole = () => {
      if (!hole) return;
      const offset = hole[0] * e;
      this.writer.appendNow({ kind: 'range', of: s.seq, time: Date.now(), offset, length: Math.min(hole[1] * e, s.oldSize) - offset });
      for (let i = hole[0]; i < hole[1]; i++) kept.add(i);
      hole = null;
    };
    try {
      const last = Math.floor((hi - 1) / e);
      for (let i = Math.floor(lo / e); i <= last; i++) {
        if (kept.has(i)) {
          flushHole();
          continue;
        }
        const offset = i * e;
        const length = Math.min(offset + e, s.oldSize) - offset;
        // one SEEK_DATA answers for a whole run of hole extents
        if (!(await hasData(offset, offset + length))) {
          if (hole && hole[1] === i) hole[1] = i + 1;
          else {
            flushHole();
            hole = [i, i + 1];
          }
          continue;
        }
        flushHole();
        const blob = await keepBytes(this.blobs, file, offset, length, s.path);
        this.writer.appendNow({ kind: 'range', of: s.seq, time: Date.now(), offset, length, blob });
        kept.add(i);
      }
      flushHole();
    } catch (err) {
      flushHole(); // (what it found before failing is true)
      throw beforeImageError(err, s.path);
    } finally {
      if (!own) await file.close();
    }
  }

  private async finishSession(s: WriteSession, reason: 'close' | 'fsync' | 'split'): Promise<void> {
    while (s.busy) await s.busy.catch(() => undefined);
    if (this.sessions.get(s.path) !== s) return;
    this.sessions.delete(s.path); // no request joins it from here on
    // Until its end is recorded, the path is changing: the next session there, or a rename,
    // unlink or chmod of it, waits, so the after-state read below is this session's alone. A
    // close the kernel answers without asking us (FOPEN_NOFLUSH) ends the session at release,
    // which the program does not wait for: its next request may already be here.
    await this.gated([s.path], false, async () => {
      while (s.applying > 0) await new Promise<void>((r) => s.idle.push(r));
      this.endedAt.delete(s.path);
      this.endedAt.set(s.path, s.seq);
      if (this.endedAt.size > DEFAULTS.journal.endedSessionsKept) this.endedAt.delete(this.endedAt.keys().next().value as string);
      // its fsync's end record says what it left (nothing changed since), but without the content
      // hash, which is worth one read of the file at its end, not one per commit
      if (s.synced && (s.syncedHash || !this.hashable(s))) return;
      this.writer.appendSoon({ kind: 'end', of: s.seq, time: Date.now(), after: [await this.afterState(s, true)], reason });
    });
  }

  /**
   * An fsync: record what the file is now (rollback judges conflicts by it; recovery after a
   * crash need not guess), but keep the session and what it kept. New requests wait meanwhile,
   * so the after-state is the file's at the fsync.
   */
  private async checkpoint(s: WriteSession): Promise<void> {
    while (s.busy) await s.busy.catch(() => undefined);
    if (this.sessions.get(s.path) !== s || s.synced) return;
    s.busy = (async () => {
      while (s.applying > 0) await new Promise<void>((r) => s.idle.push(r));
      const after = await this.afterState(s, (s.file?.size ?? Infinity) <= DEFAULTS.journal.extentBytes);
      this.writer.appendSoon({ kind: 'end', of: s.seq, time: Date.now(), after: [after], reason: 'fsync' });
      s.synced = true;
      s.syncedHash = after?.sha256 !== undefined;
    })().finally(() => (s.busy = null));
    await s.busy;
  }

  /** whether the session's end can record a content hash (see afterState) */
  private hashable(s: WriteSession): boolean {
    return s.file?.path === s.path && (s.file.size === undefined || s.file.size <= DEFAULTS.journal.contentHashMaxBytes);
  }

  /**
   * The file's state at the session's end; `hash`: with the sha256 of files up to
   * contentHashMaxBytes. An fsync records it only for files up to one extent (a database's
   * every commit would re-read its file, or its WAL, whole); the session's last end does.
   */
  private async afterState(s: WriteSession, hash: boolean): Promise<State> {
    const after = await this.stateOfSession(s);
    if (hash && after?.type === 'file' && after.size <= DEFAULTS.journal.contentHashMaxBytes && s.file?.path === s.path) {
      if (s.sha && s.shaTo === after.size) {
        // (a copy: an fsync's end is not the session's, whose writes may go on)
        after.sha256 = s.sha.copy().digest('hex');
        return after;
      }
      // (through the open file: no path walk, and no download from a remote store)
      const sha = await hashOpenFile(s.file.file, after.size).catch(() => null);
      if (sha) after.sha256 = sha;
    }
    return after;
  }

  /** The file of a session as it is now: fstat through its open file while that is still at the path. */
  private async stateOfSession(s: WriteSession): Promise<State> {
    if (s.file && s.file.path === s.path) return stateFromAttr(await s.file.file.stat());
    return stateOf(this.backend, s.path);
  }

  async endWriteSession(path: string | null, _caller: Caller, reason: 'fsync' | 'close', file?: OpenFileState): Promise<void> {
    const s = path === null ? undefined : this.sessions.get(path);
    if (s) {
      s.file ??= file;
      if (reason === 'fsync') await this.checkpoint(s);
      else await this.finishSession(s, reason);
    }
    if (reason === 'fsync') await this.writer.sync();
  }

  /** The last handle of an open file closes: a session that reached its fsync ends with it. */
  async released(file: OpenFileState): Promise<void> {
    if (this.sessions.size === 0) return;
    for (const s of [...this.sessions.values()]) if (s.file === file) await this.finishSession(s, 'close');
  }

  /**
   * A local version the store could not upload (GCS: another writer changed the object; or the
   * upload failed at close(2), fsync or the last close) and kept aside: journaled, tied to the
   * write session that made it when there is one, so `ledgerfs log`/`show` say where the bytes are.
   */
  noteConflict(c: Omit<ConflictRecord, 'kind' | 'of'>): void {
    const of = this.sessions.get(c.path)?.seq || this.endedAt.get(c.path);
    this.writer.appendNow({ kind: 'conflict', ...(of ? { of } : {}), ...c });
  }

  durable(): Promise<void> {
    return this.writer.sync();
  }

  /** End every session (unmount: the Vfs closes its files first, so normally there are none). */
  async finishAll(): Promise<void> {
    for (const s of [...this.sessions.values()]) await this.finishSession(s, 'close');
  }
}
