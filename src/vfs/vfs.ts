import { constants as C } from 'node:fs';
import { type AllocateMode, type Attr, isSpecial, typeOfMode, type Backend, type BackendFile, type Caller, checkPath, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, type FsStats, isWithin, type Mutation, parentOf, S_ISGID, SEEK_DATA, SEEK_HOLE, type TimeSpec, VfsError } from '../core/index.js';
import { DEFAULTS } from '../config/index.js';
import { OpenFile, OpenFileTable, isFuseHiddenName } from './open-files.js';
import { MutationPipeline } from './pipeline.js';

export interface VfsOptions {
  pipeline?: MutationPipeline;
  /** chown new nodes to the caller when the binding tells us who called (daemon must be root) */
  ownNewNodesByCaller?: boolean;
  /**
   * The binding's libfuse may hide (rename to .fuse_hidden*) a file the core has already
   * released: then that rename is a real unlink. Off, such a rename of a file that is not open
   * is an ordinary rename. See Binding.hidesReleasedFiles.
   */
  hiddenRenameOfReleasedIsUnlink?: boolean;
}

interface Handle {
  of: OpenFile;
  write: boolean;
  /** O_APPEND: every write goes to the end of the file as the store has it (see write) */
  append?: boolean;
}

const NO_CALLER: Caller = Object.freeze({});
const DAEMON_UID = process.geteuid?.();
const DAEMON_GID = process.getegid?.();

/**
 * The last byte any store can hold: past 2^53 - 1 a JS number is no longer exact, and Node's fs
 * reads and writes at the descriptor's own position when given an inexact one (a pwrite at 2^62
 * landed at offset 0). The kernel passes offsets up to 2^63 - 1 (the FUSE superblock's limit);
 * ext4 stops at 16 TiB and GCS at 5 TiB, so such offsets are past every store's end: EFBIG, as
 * the kernel answers past s_maxbytes, and a read there finds nothing.
 */
function fitsFile(end: number, what: string): void {
  if (!(end <= Number.MAX_SAFE_INTEGER)) throw new VfsError('EFBIG', `${what}: ends past the largest file size (byte ${end})`);
}

/** The fallocate modes the core serves; the others (zero, collapse, insert range) are EOPNOTSUPP. */
function allocateMode(mode: number): AllocateMode {
  if (mode === 0) return 'allocate';
  if (mode === FALLOC_FL_KEEP_SIZE) return 'keep-size';
  if (mode === (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)) return 'punch-hole';
  throw new VfsError('EOPNOTSUPP', `fallocate mode 0x${mode.toString(16)} is not supported`);
}

function decodeFlags(flags: number): { write: boolean; truncate: boolean; exclusive: boolean; append: boolean } {
  const acc = flags & 3; // O_ACCMODE
  return {
    write: acc === C.O_WRONLY || acc === C.O_RDWR,
    truncate: (flags & C.O_TRUNC) !== 0,
    exclusive: (flags & C.O_EXCL) !== 0,
    append: (flags & C.O_APPEND) !== 0,
  };
}

/**
 * Copy n bytes between two backend files: the store's own copy where it can (same store and
 * file system), else through a bounded buffer. Resolves the bytes copied (short at the end).
 */
async function copyRange(from: BackendFile, offIn: number, to: BackendFile, offOut: number, n: number): Promise<number> {
  if (from.copyRangeTo) {
    try {
      return await from.copyRangeTo(to, offIn, offOut, n);
    } catch (err) {
      if (!(err instanceof VfsError && (err.code === 'EXDEV' || err.code === 'EOPNOTSUPP' || err.code === 'ENOSYS'))) throw err;
    }
  }
  const buf = Buffer.allocUnsafe(Math.min(n, DEFAULTS.copyBufferBytes));
  let done = 0;
  while (done < n) {
    const got = await from.read(buf, Math.min(buf.length, n - done), offIn + done);
    if (got <= 0) break;
    let put = 0;
    while (put < got) {
      const k = await to.write(put === 0 ? buf : buf.subarray(put), got - put, offOut + done + put);
      if (k <= 0) throw new VfsError('EIO', 'copy_file_range: short write');
      put += k;
    }
    done += got;
  }
  return done;
}

/**
 * The filesystem core: FUSE-agnostic, path-based, testable without a mount. Every mutation goes
 * through the pipeline (policy, then journal) before it reaches the backend; reads go straight
 * to the backend. File handles are small integers owned here.
 */
export class Vfs {
  readonly backend: Backend;
  readonly pipeline: MutationPipeline;
  private readonly openFiles = new OpenFileTable();
  private readonly handles = new Map<number, Handle>();
  /** The path an open handle is on (null: not open, or its file was deleted while open). */
  pathOf(fh: number): string | null {
    return this.handles.get(fh)?.of.path ?? null;
  }

  /** handles programs hold open now (metrics) */
  get openHandles(): number {
    return this.handles.size;
  }
  private nextHandle = 1;
  private readonly ownByCaller: boolean;
  private readonly hiddenReleasedIsUnlink: boolean;

  constructor(backend: Backend, opts: VfsOptions = {}) {
    this.backend = backend;
    this.pipeline = opts.pipeline ?? new MutationPipeline();
    this.ownByCaller = opts.ownNewNodesByCaller ?? false;
    this.hiddenReleasedIsUnlink = opts.hiddenRenameOfReleasedIsUnlink ?? false;
  }

  private mutate<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    return this.pipeline.run(m, apply);
  }

  /**
   * The node's attributes as a stage read them once `m` was applied (the journal's outcome), for
   * the reply: undefined when no stage read them, or when `path` is a hidden alias (getattr
   * answers those from the open file).
   */
  private after(m: Mutation): Attr | undefined {
    return m.after !== undefined && !this.openFiles.hidden(m.path) ? m.after : undefined;
  }

  private handle(fh: number): Handle {
    const h = this.handles.get(fh);
    if (!h) throw new VfsError('EBADF', `no open handle ${fh}`);
    return h;
  }

  private newHandle(of: OpenFile, write: boolean, append = false): number {
    // Handles stay below 2^31: fuse-native carries them as 32-bit integers.
    let fh = this.nextHandle;
    while (this.handles.has(fh)) fh = fh >= 0x7fffffff ? 1 : fh + 1;
    this.nextHandle = fh >= 0x7fffffff ? 1 : fh + 1;
    this.handles.set(fh, append && write ? { of, write, append } : { of, write });
    of.handles++;
    return fh;
  }

  private async giveToCaller(path: string, caller: Caller, dirMode?: number): Promise<void> {
    if (!this.ownByCaller || caller.uid === undefined || !this.backend.capabilities.owners) return;
    // A node a POSIX store made for a caller with the daemon's own ids is already right (owner,
    // group from a setgid parent): no stat and chown per create for the common case of a mount
    // used by the user who runs it.
    const posix = this.backend.capabilities.posixNewNodes;
    if (posix && caller.uid === DAEMON_UID && caller.gid === DAEMON_GID) return;
    let gid = caller.gid ?? 0;
    const parent = await this.backend.stat(parentOf(path));
    const setgid = (parent.mode & S_ISGID) !== 0;
    // a store that already gave the node the caller's ids (GCS: the daemon's, in the create
    // request's metadata) needs no chown, unless a setgid parent wants its group
    const own = this.backend.capabilities.newNodeOwner;
    if (!posix && !setgid && own && own.uid === caller.uid && own.gid === gid) return;
    if (setgid) gid = parent.gid;
    await this.backend.chown(path, caller.uid, gid);
    // a directory made in a setgid directory is setgid too (what the file system would do)
    if (setgid && dirMode !== undefined && !posix) await this.backend.chmod(path, dirMode | S_ISGID);
  }

  // ---- metadata ------------------------------------------------------------------------------

  getattr(path: string): Promise<Attr> {
    const hidden = this.openFiles.hidden(path);
    if (hidden) return hidden.file.stat();
    return this.backend.stat(checkPath(path));
  }

  /** getattr, but null where getattr rejects with ENOENT, when the store can tell without an exception */
  lookup(path: string): Promise<Attr | null> {
    const b = this.backend;
    if (!b.statOrNull || this.openFiles.hidden(path)) return this.getattr(path);
    return b.statOrNull(checkPath(path));
  }

  fgetattr(fh: number): Promise<Attr> {
    return this.handle(fh).of.file.stat();
  }

  async readdir(path: string): Promise<string[]> {
    const ents = await this.backend.readdir(checkPath(path));
    return ents.map((e) => e.name);
  }

  readlink(path: string): Promise<string> {
    return this.backend.readlink(checkPath(path));
  }

  statfs(path: string): Promise<FsStats> {
    return this.backend.statfs(checkPath(path));
  }

  /** Existence check; permission bits are enforced by the kernel (default_permissions). */
  async access(path: string): Promise<void> {
    await this.backend.stat(checkPath(path));
  }

  // ---- open files ----------------------------------------------------------------------------

  async open(path: string, flags: number, caller: Caller = NO_CALLER): Promise<number> {
    checkPath(path);
    const f = decodeFlags(flags);
    const hidden = this.openFiles.hidden(path);
    if (hidden && (!f.write || hidden.file.writable)) return this.newHandle(hidden, f.write, f.append);
    if (f.write && !this.pipeline.empty) await this.pipeline.openingForWrite(path, caller);
    let of = await this.openState(path, f.write);
    // The shared state may have lost its last handle while this open waited (a release in the
    // same batch of requests): its backend file is closed, so take a fresh one.
    while (of.released) of = await this.openState(path, f.write);
    const fh = this.newHandle(of, f.write, f.append);
    if (f.truncate && f.write) {
      try {
        await this.ftruncate(fh, 0, caller);
      } catch (err) {
        await this.release(fh);
        throw err;
      }
    }
    return fh;
  }

  /** `made.attr`: set to the new file's attributes when a stage read them after the create (see `after`) */
  async create(path: string, mode: number, flags: number, caller: Caller = NO_CALLER, made?: { attr?: Attr }): Promise<number> {
    checkPath(path);
    const f = decodeFlags(flags);
    const existing = this.openFiles.get(path);
    if (existing) {
      if (f.exclusive) throw new VfsError('EEXIST', `${path} exists`);
      // replace the access mode (O_WRONLY|O_RDWR would be O_ACCMODE, i.e. not writable)
      return this.open(path, (flags & ~3) | C.O_RDWR, caller);
    }
    const m: Mutation = { op: 'create', path, mode, truncate: f.truncate, exclusive: f.exclusive, caller };
    const file = await this.mutate(m, async () => {
      const file = await this.backend.open(path, { write: true, create: true, exclusive: f.exclusive, truncate: f.truncate }, mode & 0o7777);
      await this.giveToCaller(path, caller);
      return file;
    });
    const raced = this.openFiles.get(path);
    if (raced) {
      // Another O_CREAT of the same path finished first: share its state (one backend file
      // per path, so a store that stages writes per handle never splits them over two).
      await file.close();
      return this.open(path, (flags & ~(3 | C.O_TRUNC)) | C.O_RDWR, caller);
    }
    // new or emptied: size 0; an existing file opened by a racing O_CREAT: unknown
    const of = new OpenFile(path, file, f.truncate || f.exclusive ? 0 : undefined);
    this.openFiles.add(of);
    if (made) made.attr = this.after(m);
    return this.newHandle(of, true, f.append);
  }

  /** Find or make the shared state of `path`, with a backend file that can write if asked. */
  private async openState(path: string, write: boolean): Promise<OpenFile> {
    const existing = this.openFiles.get(path);
    if (existing && (!write || existing.file.writable)) return existing;
    // Only a write needs the stat (EISDIR; the size for the mutation path). A read goes
    // straight to open: one backend call less, and files synthesized per stat (/.ledgerfs)
    // keep serving what the kernel's last getattr saw.
    let size: number | undefined;
    if (write) {
      const st = await this.backend.stat(path);
      if (st.type === 'dir') throw new VfsError('EISDIR', `${path} is a directory`);
      if (st.nlink === 1) size = st.size;
    }
    const file = await this.backend.open(path, { write });
    const again = this.openFiles.get(path);
    if (again) {
      if (again.file.writable || !write) {
        await file.close();
        return again;
      }
      // Upgrade: the shared state now writes through a read-write backend file.
      const old = again.file;
      again.file = file;
      again.size ??= size;
      await old.close();
      return again;
    }
    const of = new OpenFile(path, file, size);
    this.openFiles.add(of);
    return of;
  }

  read(fh: number, buf: Buffer, length: number, position: number): Promise<number> {
    const file = this.handle(fh).of.file;
    if (position + length > Number.MAX_SAFE_INTEGER) {
      if (position >= Number.MAX_SAFE_INTEGER) return Promise.resolve(0); // past every end (see fitsFile)
      length = Number.MAX_SAFE_INTEGER - position;
    }
    return file.read(buf, length, position);
  }

  async write(fh: number, buf: Buffer, length: number, position: number, caller: Caller = NO_CALLER): Promise<number> {
    const h = this.handle(fh);
    if (!h.write) throw new VfsError('EBADF', 'handle not open for writing');
    const of = h.of;
    // O_APPEND: the end of the file as the store has it now, not the kernel's offset, which is
    // its cached size. Without writeback caching the kernel does not ask for the size before an
    // append, and another host may have made the file longer since this one last looked (the
    // open fetched that version): a write at the old end overwrote the other host's bytes, with
    // no conflict, its upload being based on that version. (pwrite on an O_APPEND descriptor
    // appends too, as on Linux.)
    if (h.append) position = (await of.file.stat()).size;
    fitsFile(position + length, 'write');
    if (this.pipeline.empty) {
      of.dirty = true;
      return of.file.write(buf, length, position);
    }
    const m: Mutation = {
      op: 'write', path: of.path ?? '', offset: position, length, size: position + length,
      firstInSession: !of.dirty, file: of, caller, data: buf,
    };
    return this.mutate(m, async () => {
      of.dirty = true;
      return of.file.write(buf, length, position);
    });
  }

  async ftruncate(fh: number, size: number, caller: Caller = NO_CALLER): Promise<void> {
    const h = this.handle(fh);
    fitsFile(size, 'truncate');
    const of = h.of;
    if (!of.file.writable) {
      // ftruncate on a read-only handle: the kernel allows it when the caller may write (O_TRUNC
      // with O_RDONLY is undefined but Linux truncates); fall back to the path.
      if (of.path === null) throw new VfsError('EBADF', 'handle not open for writing');
      return this.truncate(of.path, size, caller);
    }
    await this.mutate({ op: 'truncate', path: of.path ?? '', size, firstInSession: !of.dirty, file: of, caller }, async () => {
      of.dirty = true;
      await of.file.truncate(size);
    });
  }

  async truncate(path: string, size: number, caller: Caller = NO_CALLER): Promise<void> {
    checkPath(path);
    fitsFile(size, 'truncate');
    const of = this.openFiles.get(path);
    if (of && of.file.writable) {
      await this.mutate({ op: 'truncate', path, size, firstInSession: !of.dirty, file: of, caller }, async () => {
        of.dirty = true;
        await of.file.truncate(size);
      });
      return;
    }
    await this.mutate({ op: 'truncate', path, size, file: of, caller }, () => this.backend.truncate(path, size));
  }

  /**
   * fallocate(2) through an open handle, in every mode a write to the policy (a size it grows,
   * or blocks KEEP_SIZE reserves past the end, are charged and judged like a write's growth; see
   * PolicyStage) and to the journal (a write session; a punched range is kept as the session's
   * before-image first), then the backend's own fallocate. A store without one
   * answers EOPNOTSUPP, never a faked success: glibc's posix_fallocate then writes the range.
   */
  async fallocate(fh: number, mode: number, offset: number, length: number, caller: Caller = NO_CALLER): Promise<void> {
    const h = this.handle(fh);
    if (!h.write) throw new VfsError('EBADF', 'handle not open for writing');
    if (offset < 0 || length <= 0) throw new VfsError('EINVAL', `fallocate of ${length} bytes at ${offset}`);
    fitsFile(offset + length, 'fallocate');
    const kind = allocateMode(mode);
    const of = h.of;
    const file = of.file;
    const allocate = file.allocate;
    if (!allocate) throw new VfsError('EOPNOTSUPP', `the ${this.backend.kind} backend cannot fallocate`);
    const m: Mutation = {
      op: 'write', path: of.path ?? '', offset, length, size: offset + length,
      firstInSession: !of.dirty, file: of, caller, allocate: kind,
    };
    await this.mutate(m, async () => {
      of.dirty = true; // every mode changes the file (KEEP_SIZE: its blocks and mtime): a write session
      await allocate.call(file, kind, offset, length);
    });
  }

  /**
   * copy_file_range(2) between two open handles: a write of the destination range to the policy
   * and the journal (which keeps the destination's before-image before anything is copied),
   * then the store's own copy when it has one for these two files, else read + write here.
   * The kernel sends it only when both files are on this mount (else EXDEV and the caller
   * copies itself); it has already refused flags, overlaps within one file and read-only
   * destinations, checked again here for callers of the core.
   */
  async copyFileRange(
    fhIn: number, offIn: number, fhOut: number, offOut: number, length: number, flags: number, caller: Caller = NO_CALLER,
  ): Promise<number> {
    const src = this.handle(fhIn).of;
    const h = this.handle(fhOut);
    if (!h.write) throw new VfsError('EBADF', 'copy_file_range: destination handle not open for writing');
    if (flags !== 0) throw new VfsError('EINVAL', `copy_file_range flags ${flags}`);
    if (offIn < 0 || offOut < 0 || length < 0) throw new VfsError('EINVAL', 'copy_file_range: negative offset or length');
    const dst = h.of;
    // Only what the source holds (the write below is judged and journaled by that length),
    // and at most one bounded piece per request: callers ask again for the rest.
    const size = (await src.file.stat()).size;
    const n = Math.min(length, Math.max(0, size - offIn), DEFAULTS.copyRangeMaxBytes);
    if (n === 0) return 0;
    fitsFile(offOut + n, 'copy_file_range');
    if (src === dst && offIn < offOut + n && offOut < offIn + n) {
      throw new VfsError('EINVAL', 'copy_file_range: overlapping ranges of one file');
    }
    const m: Mutation = {
      op: 'write', path: dst.path ?? '', offset: offOut, length: n, size: offOut + n,
      firstInSession: !dst.dirty, file: dst, caller,
    };
    return this.mutate(m, async () => {
      dst.dirty = true;
      return copyRange(src.file, offIn, dst.file, offOut, n);
    });
  }

  /**
   * lseek(2) SEEK_DATA / SEEK_HOLE (the kernel does the other whences itself): the store's
   * answer where it knows its holes, else the whole file is data, with ENXIO at or past the end
   * as lseek(2) says.
   */
  async lseek(fh: number, offset: number, whence: number): Promise<number> {
    const file = this.handle(fh).of.file;
    if (whence !== SEEK_DATA && whence !== SEEK_HOLE) throw new VfsError('EINVAL', `lseek whence ${whence}`);
    if (offset < 0 || offset >= Number.MAX_SAFE_INTEGER) throw new VfsError('ENXIO', `lseek to ${offset}`);
    const what = whence === SEEK_DATA ? 'data' : 'hole';
    if (file.seekData) {
      try {
        return await file.seekData(offset, what);
      } catch (err) {
        if (!(err instanceof VfsError && err.code === 'EOPNOTSUPP')) throw err;
      }
    }
    const size = (await file.stat()).size;
    if (offset >= size) throw new VfsError('ENXIO', `lseek to ${offset}: past the end (${size} bytes)`);
    return what === 'data' ? offset : size;
  }

  /**
   * Whether close(2) of this handle must wait for flush(): only a writer on a store that uploads
   * at close (close = in the store). Otherwise the kernel may skip the flush, and release ends
   * the write session; release comes right after the last close, without the program waiting.
   */
  closeNeedsFlush(fh: number): boolean {
    const h = this.handles.get(fh);
    // (an unknown handle: the kernel's default, a flush at every close)
    return h === undefined || (h.write && h.of.file.flush !== undefined);
  }

  async flush(fh: number, caller: Caller = NO_CALLER): Promise<void> {
    const of = this.handle(fh).of;
    // A store that uploads at close does it here, where close(2) still waits for the outcome.
    if (of.file.flush && of.file.writable) await of.file.flush();
    // close(2) waits for this flush; the release comes later, after close has returned. Ending
    // the write session here makes every close a session boundary, so a program that closes and
    // reopens a file starts a new session, and the journal can roll back to the point between.
    // (Where the kernel sends no flush, closeNeedsFlush, the last close's release does it: it
    // reaches the core before the reopen does, which leaves the boundary in place.)
    if (of.dirty) {
      of.dirty = false;
      await this.pipeline.endWriteSession(of.path, caller, 'close', of);
    }
  }

  async fsync(fh: number, dataOnly: boolean, caller: Caller = NO_CALLER): Promise<void> {
    const of = this.handle(fh).of;
    // The data and the journal records that can undo it must both be durable when the fsync
    // returns; neither needs the other durable first (the records reached the journal file
    // before the data reached the store, and the kernel may write either back any time), so
    // the two syncs overlap: a database's commit waits for one round of the disk, not two.
    const journal = async () => {
      if (of.dirty) {
        await this.pipeline.endWriteSession(of.path, caller, 'fsync', of);
        of.dirty = false;
      } else if (!this.pipeline.empty) {
        // the journal records of this file (its create, say) must be durable before we ack
        await this.pipeline.durable();
      }
    };
    const [data, records] = await Promise.allSettled([of.file.sync(dataOnly), journal()]);
    if (data.status === 'rejected') throw data.reason;
    if (records.status === 'rejected') throw records.reason;
  }

  async release(fh: number, caller: Caller = NO_CALLER): Promise<void> {
    const h = this.handle(fh);
    this.handles.delete(fh);
    const of = h.of;
    of.handles--;
    if (of.handles > 0) return;
    of.released = true;
    this.openFiles.remove(of);
    try {
      if (of.dirty) {
        of.dirty = false;
        await this.pipeline.endWriteSession(of.path, caller, 'close', of);
      }
      if (!this.pipeline.empty) await this.pipeline.released(of);
    } finally {
      await of.file.close();
    }
  }

  // ---- namespace mutations -------------------------------------------------------------------

  /** Resolves to the new directory's attributes when a stage read them (see `after`). */
  async mkdir(path: string, mode: number, caller: Caller = NO_CALLER): Promise<Attr | undefined> {
    checkPath(path);
    const m: Mutation = { op: 'mkdir', path, mode, caller };
    await this.mutate(m, async () => {
      await this.backend.mkdir(path, mode & 0o7777);
      await this.giveToCaller(path, caller, mode & 0o7777);
    });
    return this.after(m);
  }

  async rmdir(path: string, caller: Caller = NO_CALLER): Promise<void> {
    checkPath(path);
    await this.mutate({ op: 'rmdir', path, caller }, () => this.backend.rmdir(path));
  }

  async unlink(path: string, caller: Caller = NO_CALLER): Promise<void> {
    checkPath(path);
    // libfuse drops the hidden name of a file unlinked while open: the backend node is gone already
    if (this.openFiles.unhide(path)) return;
    await this.mutate({ op: 'unlink', path, file: this.openFiles.get(path), caller }, async () => {
      await this.backend.unlink(path);
      this.openFiles.detach(path);
    });
  }

  async rename(from: string, to: string, caller: Caller = NO_CALLER): Promise<void> {
    checkPath(from);
    checkPath(to);
    if (from === to) return;
    if (isWithin(to, from)) throw new VfsError('EINVAL', `cannot move ${from} into itself (${to})`);
    const file = this.openFiles.get(from);
    if (isFuseHiddenName(to) && (file || this.hiddenReleasedIsUnlink)) {
      // libfuse hides a file unlinked (or renamed over) while open by renaming it; unlink it for
      // real instead and keep the hidden name as an alias of the open state, so fstat still works
      // (with hard_remove libfuse has no path for it and answers ENOENT to fstat). libfuse 3
      // answers a release before it drops its own open count, so it may hide a file the core has
      // already released: then there is nothing to alias and the unlink stays real.
      await this.mutate({ op: 'unlink', path: from, file, caller }, async () => {
        await this.backend.unlink(from);
        if (file) this.openFiles.hide(from, to);
        else this.openFiles.markGone(to);
      });
      return;
    }
    const moved = { file: this.openFiles.get(from), targetFile: this.openFiles.get(to) };
    await this.mutate({ op: 'rename', path: from, target: to, ...moved, caller }, async () => {
      await this.backend.rename(from, to);
      this.openFiles.detach(to);
      this.openFiles.move(from, to);
    });
  }

  /** Resolves to the link's attributes when a stage read them (see `after`). */
  async symlink(target: string, path: string, caller: Caller = NO_CALLER): Promise<Attr | undefined> {
    checkPath(path);
    const m: Mutation = { op: 'symlink', path, target, caller };
    await this.mutate(m, async () => {
      await this.backend.symlink(target, path);
      await this.giveToCaller(path, caller);
    });
    return this.after(m);
  }

  /**
   * mknod(2): a regular file (what the kernel sends for mknod of S_IFREG) is an exclusive
   * create; a FIFO, socket or device node is a mutation of its own, judged by the policy
   * (device nodes need its permission) and journaled like a create. A store that cannot keep
   * them answers EPERM, as a file system without them does.
   */
  async mknod(path: string, mode: number, rdev: number, caller: Caller = NO_CALLER): Promise<Attr | undefined> {
    checkPath(path);
    const type = typeOfMode(mode);
    if (type === 'file') {
      const fh = await this.create(path, mode & 0o7777, C.O_WRONLY | C.O_CREAT | C.O_EXCL, caller);
      await this.release(fh, caller);
      return undefined;
    }
    if (!isSpecial(type)) throw new VfsError('EINVAL', `mknod ${path}: mode 0${mode.toString(8)} is not a special file`);
    const b = this.backend;
    const mknod = b.mknod;
    if (!mknod) throw new VfsError('EPERM', `the ${b.kind} backend cannot keep ${type === 'fifo' ? 'FIFOs' : type === 'socket' ? 'sockets' : 'device nodes'}`);
    const dev = type === 'chardev' || type === 'blockdev' ? rdev : 0;
    const m: Mutation = { op: 'mknod', path, mode, rdev: dev, caller };
    await this.mutate(m, async () => {
      await mknod.call(b, path, mode, dev);
      await this.giveToCaller(path, caller);
    });
    return this.after(m);
  }

  async link(existing: string, newPath: string, caller: Caller = NO_CALLER): Promise<void> {
    checkPath(existing);
    checkPath(newPath);
    if (!this.backend.capabilities.hardLinks) throw new VfsError('EPERM', `${this.backend.kind} backend has no hard links`);
    await this.mutate({ op: 'link', path: existing, target: newPath, file: this.openFiles.get(existing), caller }, () => this.backend.link(existing, newPath));
  }

  /** chmod, chown and utimens resolve to the node's new attributes when a stage read them (see `after`). */
  async chmod(path: string, mode: number, caller: Caller = NO_CALLER): Promise<Attr | undefined> {
    checkPath(path);
    const m: Mutation = { op: 'chmod', path, mode, caller };
    await this.mutate(m, () => this.backend.chmod(path, mode));
    return this.after(m);
  }

  async chown(path: string, uid: number, gid: number, caller: Caller = NO_CALLER): Promise<Attr | undefined> {
    checkPath(path);
    // (uid_t)-1 / (gid_t)-1 mean "leave unchanged"
    const cur = uid === 0xffffffff || gid === 0xffffffff || uid === -1 || gid === -1 ? await this.backend.stat(path) : undefined;
    const u = cur && (uid === 0xffffffff || uid === -1) ? cur.uid : uid;
    const g = cur && (gid === 0xffffffff || gid === -1) ? cur.gid : gid;
    const m: Mutation = { op: 'chown', path, uid: u, gid: g, caller };
    await this.mutate(m, () => this.backend.chown(path, u, g));
    return this.after(m);
  }

  async utimens(path: string, times: TimeSpec, caller: Caller = NO_CALLER): Promise<Attr | undefined> {
    checkPath(path);
    const m: Mutation = { op: 'utimens', path, caller };
    await this.mutate(m, () => this.backend.utimens(path, times));
    return this.after(m);
  }

  // ---- extended attributes -------------------------------------------------------------------

  private xattrs() {
    const b = this.backend;
    if (!b.capabilities.xattrs || !b.getxattr || !b.setxattr || !b.listxattr || !b.removexattr) {
      throw new VfsError('ENOTSUP', `the ${b.kind} backend does not store extended attributes`);
    }
    return b as Required<Pick<Backend, 'getxattr' | 'setxattr' | 'listxattr' | 'removexattr'>>;
  }

  getxattr(path: string, name: string): Promise<Buffer> {
    return this.xattrs().getxattr(checkPath(path), name);
  }

  listxattr(path: string): Promise<string[]> {
    return this.xattrs().listxattr(checkPath(path));
  }

  async setxattr(path: string, name: string, value: Buffer, flags: number, caller: Caller = NO_CALLER): Promise<void> {
    const x = this.xattrs();
    checkPath(path);
    await this.mutate({ op: 'setxattr', path, xattr: name, caller }, () => x.setxattr(path, name, value, flags));
  }

  async removexattr(path: string, name: string, caller: Caller = NO_CALLER): Promise<void> {
    const x = this.xattrs();
    checkPath(path);
    await this.mutate({ op: 'removexattr', path, xattr: name, caller }, () => x.removexattr(path, name));
  }

  /*
   * fchmod, fchown, futimens and the f*xattr calls on a file unlinked while open: the binding
   * sends them here when the node has no path left. They go through the open file and, like its
   * writes, are neither journaled nor judged by the policy: the view no longer shows the file.
   */

  fchmod(fh: number, mode: number): Promise<Attr | void> {
    return this.throughHandle(fh, 'chmod', (f) => f.chmod?.(mode));
  }

  fchown(fh: number, uid: number, gid: number): Promise<Attr | void> {
    return this.throughHandle(fh, 'chown', (f) => f.chown?.(uid, gid));
  }

  futimens(fh: number, times: TimeSpec): Promise<Attr | void> {
    return this.throughHandle(fh, 'utimens', (f) => f.utimens?.(times));
  }

  fgetxattr(fh: number, name: string): Promise<Buffer> {
    return this.throughHandle(fh, 'getxattr', (f) => f.getxattr?.(name));
  }

  flistxattr(fh: number): Promise<string[]> {
    return this.throughHandle(fh, 'listxattr', (f) => f.listxattr?.());
  }

  fsetxattr(fh: number, name: string, value: Buffer, flags: number): Promise<void> {
    return this.throughHandle(fh, 'setxattr', (f) => f.setxattr?.(name, value, flags));
  }

  fremovexattr(fh: number, name: string): Promise<void> {
    return this.throughHandle(fh, 'removexattr', (f) => f.removexattr?.(name));
  }

  private throughHandle<T>(fh: number, op: string, fn: (f: BackendFile) => Promise<T> | undefined): Promise<T> {
    const r = fn(this.handle(fh).of.file);
    if (r === undefined) return Promise.reject(new VfsError('ENOENT', `${op} of a file unlinked while open: the ${this.backend.kind} backend cannot change it through its open file`));
    return r;
  }

  /** Close every handle (unmount). */
  async closeAll(): Promise<void> {
    for (const fh of [...this.handles.keys()]) await this.release(fh).catch(() => undefined);
    await this.backend.close();
  }

  get openHandleCount(): number {
    return this.handles.size;
  }
}
