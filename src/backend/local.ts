import fs from 'node:fs';
import nodePath from 'node:path';
import { type AllocateMode, type Attr, type Backend, type BackendCapabilities, type BackendFile, checkPath, type DirEntry, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, fromNodeError, type FsStats, isWithin, type Logger, mayHaveLostBytes, nameFromBytes, type NodeType, type OpenMode, osPath, rebase, S_ISGID, SEEK_DATA, SEEK_HOLE, type TimeSpec, UTIME_OMIT, VfsError } from '../core/index.js';
import { DEFAULTS } from '../config/index.js';
import { loadBeneath, type Beneath } from './beneath.js';
import { fdLimit } from './fd-limit.js';
import { fdOps, type FdOps } from './fd-ops.js';
import { FdPool, type Pooled, poolSize, type PoolSize } from './fd-pool.js';
import { nodeOps, type NodeOps, utimePart } from './node-ops.js';
import { checkXattrRead, checkXattrWrite, listableXattr } from './xattr-names.js';

const { O_RDONLY, O_RDWR, O_CREAT, O_EXCL, O_TRUNC, O_NOFOLLOW, O_DIRECTORY } = fs.constants;
/** a descriptor of the node itself, for calls that name it by /proc/self/fd (fs.constants lacks it) */
const O_PATH = 0o10000000;
/** the kernel's limit on a path it is given, its NUL included */
const PATH_MAX = 4096;

/*
 * Why synchronous fs calls: measured on this machine, the libuv thread-pool hop of fs.promises
 * costs as much per request as the FUSE binding itself, and every FUSE request already arrives
 * on its own libfuse thread. The calls below are single syscalls on a local disk; bench
 * results are in the closing notes of issue 2.
 */

export function attrFromStats(st: fs.BigIntStats): Attr {
  return {
    type: typeOf(st),
    mode: Number(st.mode),
    size: Number(st.size),
    nlink: Number(st.nlink),
    uid: Number(st.uid),
    gid: Number(st.gid),
    ino: Number(st.ino),
    blocks: Number(st.blocks),
    atimeNs: st.atimeNs,
    mtimeNs: st.mtimeNs,
    ctimeNs: st.ctimeNs,
    ...(st.isFIFO() || st.isSocket() || st.isCharacterDevice() || st.isBlockDevice() ? { rdev: Number(st.rdev) } : {}),
  };
}

function typeOf(st: fs.BigIntStats | fs.Dirent | fs.Dirent<Buffer>): NodeType {
  if (st.isDirectory()) return 'dir';
  if (st.isSymbolicLink()) return 'symlink';
  if (st.isFIFO()) return 'fifo';
  if (st.isSocket()) return 'socket';
  if (st.isCharacterDevice()) return 'chardev';
  if (st.isBlockDevice()) return 'blockdev';
  return 'file';
}

function nsToSeconds(ns: bigint): number | string {
  // utimes takes seconds as a double: sub-microsecond precision is lost, see README limits.
  // libuv truncates the double (toward zero) to whole microseconds, and µs/1e6 is often a hair
  // short of the exact value (x.000001 -> x.00000099999), which lost a microsecond on half of
  // all times. Aim at the middle of the microsecond so truncation lands on it.
  const us = ns / 1000n; // toward zero, like libuv
  const sec = (Number(us) + (us < 0n ? -0.5 : 0.5)) / 1e6;
  // Node turns a negative number into "now"; a numeric string is taken as is (pre-1970 times).
  return sec < 0 ? String(sec) : sec;
}

/**
 * The daemon's own umask, read once. The kernel has already applied the caller's umask to
 * every creation mode it sends (libfuse does not ask for FUSE_CAP_DONT_MASK), so the store must
 * not apply another: a create whose mode has bits this mask would drop sets them explicitly
 * (fchmod/chmod after making the node). The daemon keeps its umask for its own files (journal,
 * staging), which must never come out world-writable.
 */
function daemonUmask(): number {
  try {
    const m = /^Umask:\s*([0-7]+)/m.exec(fs.readFileSync('/proc/self/status', 'utf8'));
    if (m) return parseInt(m[1] as string, 8);
  } catch {
    /* no /proc: ask the process */
  }
  return process.umask();
}
const DAEMON_UMASK = daemonUmask();

/** the path through which the kernel reaches what descriptor `fd` holds (an O_PATH one included) */
function procFd(fd: number): string {
  return `/proc/self/fd/${fd}`;
}

/** Wrap a sync fs call, converting Node errors to VfsErrors that keep their errno. */
function sys<T>(what: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw fromNodeError(err, what);
  }
}

function needNodeOps(what: string): NodeOps {
  const ops = nodeOps();
  if (ops === null) throw new VfsError('EOPNOTSUPP', `${what}: native/ledgerfs_local is not built (node scripts/build-native.mjs)`);
  return ops;
}

/** listxattr's NUL-separated names, as a program may see them (xattr-names.ts) */
function listedXattrs(raw: Buffer): string[] {
  const names: string[] = [];
  for (let at = 0; at < raw.length; ) {
    const end = raw.indexOf(0, at);
    const n = nameFromBytes(raw.subarray(at, end < 0 ? raw.length : end));
    if (n !== '' && listableXattr(n)) names.push(n);
    at = end < 0 ? raw.length : end + 1;
  }
  return names;
}

/**
 * A file open in the local store. Its descriptor is held in the store's pool (fd-pool.ts): when
 * the pool is full the least recently used one is closed, and reopened here, by the path the
 * store keeps current through its renames, on next use. What is written is in the file (page
 * cache) before a descriptor is closed, so that changes nothing a program sees: fsync flushes
 * the inode whatever descriptor it is called on. A file whose name went away while open
 * (unlink, rename over it) is pinned: it keeps its descriptor until closed.
 */
class LocalFile implements BackendFile, Pooled {
  /** copies off the JS thread that use this fd: close waits for them (the fd number could be
   * reused by the next open meanwhile) */
  private readonly copies = new Set<Promise<number>>();
  ref = true;
  busy = 0;
  pinned = false;
  slot = -1;
  /** another open file at the same path (the store's byPath chain) */
  nextAtPath: LocalFile | null = null;
  /** its name went away through the store (unlinked, renamed over): no longer in byPath */
  gone = false;
  /** closed by its holder: never reopened */
  closed = false;
  /** the node's identity, taken when its descriptor was given up: a reopen must find the same
   * (the birth time tells a new file from an old one that left its inode number free) */
  dev = 0;
  ino = 0;
  born = 0n;
  /** close(2) of a descriptor the pool gave up failed: reported by the next sync or close */
  lateError: VfsError | null = null;

  constructor(
    private readonly store: LocalBackend,
    public fd: number,
    readonly writable: boolean,
    /** backend path, kept current by the store's renames */
    public path: string,
  ) {}

  /** the descriptor, reopened if the pool gave it up */
  private live(): number {
    const fd = this.fd;
    if (fd >= 0) {
      this.ref = true;
      return fd;
    }
    return this.store.reopen(this);
  }

  letGo(): boolean {
    const fd = this.fd;
    let st: fs.BigIntStats;
    try {
      st = fs.fstatSync(fd, { bigint: true });
    } catch {
      return false;
    }
    if (st.nlink === 0n) return false; // unlinked beside the mount: only this descriptor reaches it
    this.dev = Number(st.dev);
    this.ino = Number(st.ino);
    this.born = st.birthtimeNs;
    this.fd = -1;
    try {
      fs.closeSync(fd);
    } catch (err) {
      this.lateError = fromNodeError(err, `close ${this.path}`);
    }
    return true;
  }

  async read(buf: Buffer, length: number, position: number): Promise<number> {
    const fd = this.live();
    return sys(`read ${this.path}`, () => fs.readSync(fd, buf, 0, length, position));
  }

  async write(buf: Buffer, length: number, position: number): Promise<number> {
    if (!this.writable) throw new VfsError('EBADF', `${this.path} is open read-only in the backend`);
    const fd = this.live();
    return sys(`write ${this.path}`, () => fs.writeSync(fd, buf, 0, length, position));
  }

  async truncate(size: number): Promise<void> {
    const fd = this.live();
    sys(`truncate ${this.path}`, () => fs.ftruncateSync(fd, size));
  }

  async stat(): Promise<Attr> {
    return this.store.fstatFd(this.live(), this.path);
  }

  /*
   * Attribute changes through the open file: what the kernel sends by node for a file unlinked
   * while open (fchmod, fchown, futimens, f*xattr), which has no path left to go by.
   */

  async chmod(mode: number): Promise<Attr> {
    return this.changeOwn(`chmod ${this.path}`, (fd) => this.store.chmodFd(fd, this.path, mode));
  }

  async chown(uid: number, gid: number): Promise<Attr> {
    return this.changeOwn(`chown ${this.path}`, (fd) => fs.fchownSync(fd, uid, gid));
  }

  async utimens(times: TimeSpec): Promise<Attr | void> {
    const set = this.store.utimensFd(times);
    if (set === 'nothing') return;
    if (set === null) throw new VfsError('EOPNOTSUPP', `utimens ${this.path}: native/ledgerfs_local is not built`);
    return this.changeOwn(`utimens ${this.path}`, set);
  }

  async getxattr(name: string): Promise<Buffer> {
    checkXattrRead(name, this.path);
    return this.onOwn(`getxattr ${name} ${this.path}`, (ops, fd) => ops.getxattr(fd, name));
  }

  async listxattr(): Promise<string[]> {
    return listedXattrs(this.onOwn(`listxattr ${this.path}`, (ops, fd) => ops.listxattr(fd)));
  }

  async setxattr(name: string, value: Buffer, flags: number): Promise<void> {
    checkXattrWrite(name, this.path);
    this.onOwn(`setxattr ${name} ${this.path}`, (ops, fd) => ops.setxattr(fd, name, value, flags));
  }

  async removexattr(name: string): Promise<void> {
    checkXattrWrite(name, this.path);
    this.onOwn(`removexattr ${name} ${this.path}`, (ops, fd) => ops.removexattr(fd, name));
  }

  /** `change` on this file's descriptor, then its attributes (the store's changeNode, by descriptor) */
  private changeOwn(what: string, change: (fd: number) => void): Attr {
    const fd = this.live();
    sys(what, () => change(fd));
    return this.store.fstatFd(fd, this.path);
  }

  /** `fn` with the addon's node helpers on this file's descriptor (the store's onNode, by descriptor) */
  private onOwn<T>(what: string, fn: (ops: NodeOps, fd: number) => T): T {
    const ops = needNodeOps(what);
    const fd = this.live();
    return sys(what, () => fn(ops, fd));
  }

  async sync(dataOnly: boolean): Promise<void> {
    const fd = this.live();
    sys(`fsync ${this.path}`, () => (dataOnly ? fs.fdatasyncSync(fd) : fs.fsyncSync(fd)));
    this.throwLate();
  }

  private throwLate(): void {
    const err = this.lateError;
    if (err) {
      this.lateError = null;
      throw err;
    }
  }

  async close(): Promise<void> {
    while (this.copies.size) await Promise.allSettled([...this.copies]);
    if (this.closed) return;
    this.closed = true;
    this.store.forget(this);
    const fd = this.fd;
    this.fd = -1;
    if (fd >= 0) sys(`close ${this.path}`, () => fs.closeSync(fd));
    this.throwLate();
  }

  // fallocate, copy_file_range and SEEK_DATA/SEEK_HOLE go to the backing fd itself, so what the
  // disk does (blocks, holes, reflinks) is what the program gets.

  async allocate(mode: AllocateMode, offset: number, length: number): Promise<void> {
    const ops = needFdOps(`fallocate ${this.path}`);
    const flags = mode === 'allocate' ? 0 : mode === 'keep-size' ? FALLOC_FL_KEEP_SIZE : FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
    const fd = this.live();
    sys(`fallocate ${this.path}`, () => ops.fallocate(fd, flags, offset, length));
  }

  async copyRangeTo(dst: BackendFile, srcPos: number, dstPos: number, length: number): Promise<number> {
    if (!(dst instanceof LocalFile)) throw new VfsError('EXDEV', `copy ${this.path}: the destination is not in the local store`);
    const what = `copy ${this.path} to ${dst.path}`;
    const ops = needFdOps(what);
    // both descriptors stay open (busy) while the thread pool copies between them
    const inFd = this.live();
    this.busy++;
    let copy: Promise<number>;
    try {
      const outFd = dst.live();
      dst.busy++;
      try {
        copy = sys(what, () => ops.copyFileRange(inFd, srcPos, outFd, dstPos, length));
      } catch (err) {
        dst.busy--;
        throw err;
      }
    } catch (err) {
      this.busy--;
      throw err;
    }
    this.copies.add(copy);
    dst.copies.add(copy);
    try {
      return await copy;
    } catch (err) {
      throw fromNodeError(err, what);
    } finally {
      this.copies.delete(copy);
      dst.copies.delete(copy);
      this.busy--;
      dst.busy--;
    }
  }

  async allocatedEnd(): Promise<number> {
    const fd = this.live();
    const st = sys(`fstat ${this.path}`, () => fs.fstatSync(fd));
    const ops = fdOps();
    if (ops) {
      try {
        return ops.allocatedEnd(fd, st.size);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EOPNOTSUPP') throw fromNodeError(err, `fiemap ${this.path}`);
      }
    }
    // no FIEMAP here (tmpfs): blocks beyond those the size needs are taken to lie past it
    return Math.max(st.size, st.blocks * 512);
  }

  async seekData(offset: number, what: 'data' | 'hole'): Promise<number> {
    const ops = needFdOps(`lseek ${this.path}`);
    const fd = this.live();
    return sys(`lseek ${this.path}`, () => ops.seek(fd, offset, what === 'data' ? SEEK_DATA : SEEK_HOLE));
  }
}
// Without the fd helpers a store file has no fallocate at all, so the core answers EOPNOTSUPP
// before the policy and the journal do any work for it.
if (!fdOps()) delete (LocalFile.prototype as { allocate?: unknown }).allocate;

function needFdOps(what: string): FdOps {
  const ops = fdOps();
  if (ops === null) throw new VfsError('EOPNOTSUPP', `${what}: native/ledgerfs_local is not built (node scripts/build-native.mjs)`);
  return ops;
}

export interface LocalBackendOptions {
  /** where a refusal for want of a descriptor is told (warn, rate-limited) */
  log?: Logger;
  /** the descriptor pool's size (default: from the open-file limit, see poolSize) */
  pool?: PoolSize;
}

function isFdShortage(err: unknown): 'EMFILE' | 'ENFILE' | null {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return code === 'EMFILE' || code === 'ENFILE' ? code : null;
}

/**
 * The embedded default backend: a directory on the local file system. It never leaves its root:
 * paths are normalized (no '..'), the final component is never followed (O_NOFOLLOW, l*-calls),
 * and the parent of every path must resolve, symlink-free, to the same place under the root.
 * Open files hold their descriptors in a bounded pool (see LocalFile, DEFAULTS.local): a
 * request that cannot get one fails with EMFILE or ENFILE, to its caller only.
 */
export class LocalBackend implements Backend {
  readonly kind = 'local';
  readonly capabilities: BackendCapabilities = { xattrs: nodeOps() !== null, hardLinks: true, symlinks: true, owners: true, posixNewNodes: true, dirTimes: true };
  readonly location: string;
  private readonly root: string;
  /** openat2 beneath `rootFd` when the addon is built; else realpath checks by path */
  private readonly beneath: Beneath | null;
  private rootFd = -1;
  private readonly pool: FdPool;
  /** open files by backend path (a chain when several are open on one path), kept through renames */
  private readonly byPath = new Map<string, LocalFile>();
  private readonly log: Logger | undefined;
  private shortages = 0;
  private shortageLoggedAt = -Infinity;

  /** `beneath`: the openat2 helper; null keeps the realpath checks (what a machine without the addon runs) */
  constructor(rootDir: string, beneath: Beneath | null = loadBeneath(), opts: LocalBackendOptions = {}) {
    let real: string;
    try {
      real = fs.realpathSync.native(rootDir);
    } catch (err) {
      throw new Error(`backend directory ${rootDir} is not usable: ${(err as Error).message}`);
    }
    if (!fs.statSync(real).isDirectory()) throw new Error(`backend path ${rootDir} is not a directory`);
    this.root = real;
    this.location = real;
    this.beneath = beneath;
    if (this.beneath) this.rootFd = fs.openSync(real, O_RDONLY | O_DIRECTORY);
    const size = opts.pool ?? poolSize(fdLimit()?.soft ?? null);
    this.pool = new FdPool(size.capacity, size.pinCap);
    this.log = opts.log;
  }

  /** Descriptors the pool holds now, and how many of them are pinned (for tests and logs). */
  get descriptors(): { held: number; pinned: number; capacity: number } {
    return { held: this.pool.size, pinned: this.pool.pinned, capacity: this.pool.capacity };
  }

  /**
   * A request gets no descriptor: the error for its caller, and a warning for the operator at
   * most every DEFAULTS.local.fdExhaustedLogIntervalMs (with the count since the last one).
   */
  private shortage(code: 'EMFILE' | 'ENFILE', what: string, why: string): VfsError {
    this.shortages++;
    const now = Date.now();
    if (now - this.shortageLoggedAt >= DEFAULTS.local.fdExhaustedLogIntervalMs) {
      this.log?.warn(
        { code, request: what, refused: this.shortages, held: this.pool.size, pinned: this.pool.pinned, capacity: this.pool.capacity },
        `local store: out of file descriptors (${why}); requests that need one fail with ${code} until programs close files`,
      );
      this.shortageLoggedAt = now;
      this.shortages = 0;
    }
    return new VfsError(code, `${what}: ${why}`);
  }

  /**
   * Run a call that opens descriptors; when the system says there are none left, give up one
   * of the pool's and try again, as long as the pool has one to give.
   */
  private withFds<T>(what: string, fn: () => T): T {
    for (;;) {
      try {
        return fn();
      } catch (err) {
        const code = isFdShortage(err);
        if (code === null) throw err;
        if (!this.pool.evictOne()) throw this.shortage(code, what, code === 'ENFILE' ? 'the system-wide file table is full' : 'the daemon is at its open-file limit');
      }
    }
  }

  /** A free slot in the pool for one more open file, or EMFILE. */
  private slot(what: string): void {
    if (!this.pool.makeRoom()) {
      throw this.shortage('EMFILE', what, `all ${this.pool.capacity} backing descriptors are in use by files that must stay open (${this.pool.pinned} unlinked while open)`);
    }
  }

  /** The pool gave up `f`'s descriptor: open its node again, the same one, or fail. */
  reopen(f: LocalFile): number {
    if (f.closed) throw new VfsError('EBADF', `${f.path} is closed`);
    const what = `reopen ${f.path}`;
    this.slot(what);
    let fd: number;
    try {
      fd = this.openNode(f.path, f.writable ? O_RDWR : O_RDONLY);
    } catch (err) {
      if (err instanceof VfsError && (err.code === 'EMFILE' || err.code === 'ENFILE')) throw err;
      throw new VfsError('ESTALE', `${what}: it was moved or removed beside the mount while the daemon had closed its descriptor (${(err as Error).message})`);
    }
    const st = fs.fstatSync(fd, { bigint: true });
    if (Number(st.ino) !== f.ino || Number(st.dev) !== f.dev || st.birthtimeNs !== f.born) {
      fs.closeSync(fd);
      throw new VfsError('ESTALE', `${what}: another file is at its path now (replaced beside the mount while the daemon had closed its descriptor)`);
    }
    f.fd = fd;
    this.pool.add(f);
    return fd;
  }

  /** `f` was closed: out of the pool and the path index. */
  forget(f: LocalFile): void {
    this.pool.remove(f);
    if (!f.gone) this.unindex(f);
  }

  private index(f: LocalFile): void {
    f.nextAtPath = this.byPath.get(f.path) ?? null;
    this.byPath.set(f.path, f);
  }

  private unindex(f: LocalFile): void {
    const head = this.byPath.get(f.path);
    if (head === f) {
      if (f.nextAtPath) this.byPath.set(f.path, f.nextAtPath);
      else this.byPath.delete(f.path);
    } else {
      let p: LocalFile | null = head ?? null;
      while (p && p.nextAtPath !== f) p = p.nextAtPath;
      if (p) p.nextAtPath = f.nextAtPath;
    }
    f.nextAtPath = null;
  }

  /**
   * The open files at `path` are about to lose that name (unlink, or a rename over it): pin
   * each, so it keeps a descriptor (reopened now if the pool had given it up). Returns them
   * (for `lost` once the name is gone), and those this call pinned (to unpin if the change
   * fails); refuses with EMFILE, pinning nothing, past the pinned share of the pool.
   */
  private pinAt(path: string, what: string): { files: LocalFile[]; pinned: LocalFile[] } {
    const files: LocalFile[] = [];
    for (let f: LocalFile | null = this.byPath.get(path) ?? null; f; f = f.nextAtPath) files.push(f);
    const pinned: LocalFile[] = [];
    try {
      for (const f of files) {
        if (f.pinned) continue;
        if (f.fd < 0) this.reopen(f);
        if (!this.pool.pin(f)) {
          throw this.shortage('EMFILE', what, `${this.pool.pinned} files unlinked while open already hold ${Math.round(DEFAULTS.local.pinnedShare * 100)}% of the daemon's ${this.pool.capacity} backing descriptors; close some first`);
        }
        pinned.push(f);
      }
    } catch (err) {
      for (const f of pinned) this.pool.unpin(f);
      throw err;
    }
    return { files, pinned };
  }

  /** The name of these (pinned) files is gone: they leave the path index. */
  private lost(files: LocalFile[]): void {
    for (const f of files) {
      this.unindex(f);
      f.gone = true;
    }
  }

  /** `from` (a file, or a directory with files open below it) is now `to`. */
  private moved(from: string, to: string): void {
    if (this.byPath.size === 0) return;
    const hit: LocalFile[] = [];
    for (const [p, head] of this.byPath) {
      if (isWithin(p, from)) for (let f: LocalFile | null = head; f; f = f.nextAtPath) hit.push(f);
    }
    for (const f of hit) this.unindex(f);
    for (const f of hit) {
      f.path = rebase(f.path, from, to);
      this.index(f);
    }
  }

  /** An error of the parent of `path` (it did not resolve beneath the root without symlinks). */
  private parentError(path: string, code: string): VfsError {
    // ELOOP: a symlink somewhere; EXDEV: resolution tried to leave the root
    if (code === 'ELOOP' || code === 'EXDEV') {
      return new VfsError('EACCES', `${path}: a parent directory is a symlink inside the backend; refusing to follow it`);
    }
    return fromNodeError({ code, message: `parent: ${code}` }, `resolve ${path}`);
  }

  /** The node's failure as a Node-style error (the callers' catch blocks map its code); no
   * stack: a miss is the common answer, and fromNodeError keeps only code and message. */
  private nativeFailure(path: string, r: number): VfsError | { code: string; message: string } {
    const f = (this.beneath as Beneath).failure(r);
    if (f.parent) return this.parentError(path, f.code);
    return { code: f.code, message: `${f.code}: ${path}` };
  }

  /** (parent without its leading '/', last component) of a checked path; ('', '.') for '/' */
  private static split(path: string): [string, string] {
    if (path === '/') return ['', '.'];
    const i = path.lastIndexOf('/');
    return [path.slice(1, i), path.slice(i + 1)];
  }

  /**
   * fstat of a descriptor of one of its files (create, every session's end and fgetattr ask):
   * through the addon when it has fstat, which fills the record lstat uses instead of building
   * a BigIntStats; else fs.fstatSync. Throws like fstat.
   */
  fstatFd(fd: number, path: string): Attr {
    const r = this.beneath ? this.beneath.fstat(fd) : null;
    if (r === null) return attrFromStats(sys(`fstat ${path}`, () => fs.fstatSync(fd, { bigint: true })));
    if (typeof r !== 'number') return r;
    throw fromNodeError(this.nativeFailure(path, r), `fstat ${path}`);
  }

  /** lstat through the verified parent; throws like lstat */
  private lstatNode(path: string): Attr | undefined {
    checkPath(path);
    if (!this.beneath) {
      const st = sys(`stat ${path}`, () => fs.lstatSync(osPath(this.host(path)), { bigint: true, throwIfNoEntry: false }));
      return st === undefined ? undefined : attrFromStats(st);
    }
    const [parent, name] = LocalBackend.split(path);
    const b = this.beneath;
    const r = b.lstat(this.rootFd, parent, name);
    if (typeof r !== 'number') return r;
    const err = fromNodeError(this.nativeFailure(path, r), `stat ${path}`);
    if (isFdShortage(err) === null) throw err;
    // the lookup itself needs a descriptor for a moment: find one and ask again
    return this.withFds(`stat ${path}`, () => {
      const again = b.lstat(this.rootFd, parent, name);
      if (typeof again !== 'number') return again;
      throw fromNodeError(this.nativeFailure(path, again), `stat ${path}`);
    });
  }

  /** open(2) of the node without following it; throws a VfsError for the parent, else like openSync */
  private openNode(path: string, flags: number, mode?: number): number {
    if (!this.beneath) return this.withFds(`open ${path}`, () => fs.openSync(osPath(this.host(path)), flags | O_NOFOLLOW, mode));
    checkPath(path);
    const [parent, name] = LocalBackend.split(path);
    const b = this.beneath;
    return this.withFds(`open ${path}`, () => {
      const fd = b.open(this.rootFd, parent, name, flags, mode ?? 0o666);
      if (fd < 0) throw this.nativeFailure(path, fd);
      return fd;
    });
  }

  /**
   * Host path for a backend path. The parent directory must be reachable without symlinks:
   * realpath(parent) has to equal the lexical parent, otherwise something inside the backend
   * (a symlink swapped in out-of-band) would lead the daemon outside its root.
   */
  private host(path: string): string {
    checkPath(path);
    if (path === '/') return this.root;
    const full = this.root + path;
    if (this.beneath) {
      const [parent] = LocalBackend.split(path);
      const r = parent ? this.beneath.check(this.rootFd, parent) : 0;
      if (r < 0) throw this.nativeFailure(path, r);
      return full;
    }
    const parent = nodePath.dirname(full);
    if (parent !== this.root) {
      let real: string;
      try {
        real = nameFromBytes(fs.realpathSync.native(osPath(parent), 'buffer'));
      } catch (err) {
        throw fromNodeError(err, `resolve ${path}`);
      }
      if (real !== parent) {
        throw new VfsError('EACCES', `${path}: a parent directory is a symlink inside the backend; refusing to follow it`);
      }
    }
    return full;
  }

  /**
   * `use` with a host path for `path`. A path relative to the mount may be PATH_MAX long, and the
   * root's prefix makes the host path longer than the kernel takes: then the parent is opened
   * beneath the root (openat2 takes the relative path) and `use` gets /proc/self/fd/N/NAME, which
   * the kernel resolves through that descriptor, so only the last name is looked up by path.
   * `use` gets a Buffer when the path holds bytes that are not UTF-8 (core/names.ts).
   */
  private withHost<T>(path: string, use: (p: string | Buffer) => T): T {
    const full = this.host(path);
    if (!this.beneath || Buffer.byteLength(full) < PATH_MAX) return use(osPath(full));
    const [parent, name] = LocalBackend.split(path);
    const [grand, parentName] = LocalBackend.split(`/${parent}`);
    const fd = this.beneath.open(this.rootFd, grand, parentName, O_PATH | O_DIRECTORY, 0);
    if (fd < 0) throw fromNodeError(this.nativeFailure(path, fd), `resolve ${path}`);
    try {
      return use(osPath(`/proc/self/fd/${fd}/${name}`));
    } finally {
      fs.closeSync(fd);
    }
  }

  async stat(path: string): Promise<Attr> {
    // a miss is the common answer (the kernel looks up every name before creating it): no
    // Node exception for it, whose message and stack cost more than the lstat
    const st = this.lstatNode(path);
    if (st === undefined) throw new VfsError('ENOENT', `stat ${path}: no such file or directory`);
    return st;
  }

  async statOrNull(path: string): Promise<Attr | null> {
    return this.lstatNode(path) ?? null;
  }

  async tryStat(path: string): Promise<Attr | null> {
    // Absence needs no parent check: if nothing is there by the lexical path, a parent swapped
    // for a symlink could only hide a node from us, never expose one (and any change there is
    // refused by host() anyway). The journal asks this before every create. With openat2 a miss
    // is one call already and a hit would pay the quick lstat on top.
    if (path !== '/' && !this.beneath) {
      let quick: fs.Stats | undefined | null = null;
      try {
        quick = fs.lstatSync(osPath(this.root + checkPath(path)), { throwIfNoEntry: false });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOTDIR') return null;
      }
      if (quick === undefined) return null;
    }
    try {
      return this.lstatNode(path) ?? null;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR') return null;
      throw err;
    }
  }

  async readdir(path: string): Promise<DirEntry[]> {
    // Open the directory itself without following a final symlink (readdirSync(p) would list
    // the target of `ln -s /etc evil`), then list it through the descriptor.
    let fd: number;
    try {
      fd = this.openNode(path, O_RDONLY | O_DIRECTORY);
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      if (e.code === 'ELOOP') throw new VfsError('ENOTDIR', `${path} is a symlink; not following it`);
      throw fromNodeError(err, `readdir ${path}`);
    }
    try {
      const dir = procFd(fd);
      const ents = sys(`readdir ${path}`, () => this.withFds(`readdir ${path}`, () => fs.readdirSync(dir, { withFileTypes: true })));
      // Node decodes names as UTF-8 and writes U+FFFD for what is not: then list the bytes
      if (!ents.some((d) => mayHaveLostBytes(d.name))) return ents.map((d) => ({ name: d.name, type: typeOf(d) }));
      const raw = sys(`readdir ${path}`, () => this.withFds(`readdir ${path}`, () => fs.readdirSync(dir, { withFileTypes: true, encoding: 'buffer' })));
      return raw.map((d) => ({ name: nameFromBytes(d.name), type: typeOf(d) }));
    } finally {
      fs.closeSync(fd);
    }
  }

  async readlink(path: string): Promise<string> {
    return this.withHost(path, (p) =>
      sys(`readlink ${path}`, () => {
        const target = fs.readlinkSync(p);
        return mayHaveLostBytes(target) ? nameFromBytes(fs.readlinkSync(p, { encoding: 'buffer' })) : target;
      }),
    );
  }

  async open(path: string, mode: OpenMode, createMode = 0o644): Promise<BackendFile> {
    let flags = mode.write ? O_RDWR : O_RDONLY;
    if (mode.create) flags |= O_CREAT;
    if (mode.exclusive) flags |= O_EXCL;
    if (mode.truncate) flags |= O_TRUNC;
    try {
      this.slot(`open ${path}`);
      const fd = mode.create && (createMode & DAEMON_UMASK) !== 0 ? this.createExact(path, flags, createMode) : this.openNode(path, flags, createMode);
      const f = new LocalFile(this, fd, mode.write, path);
      this.pool.add(f);
      this.index(f);
      return f;
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      if (e.code === 'ELOOP') throw new VfsError('ELOOP', `${path} is a symlink; not following it`);
      throw fromNodeError(err, `open ${path}`);
    }
  }

  /**
   * O_CREAT with a mode the daemon's umask would cut: the node gets exactly `createMode` when
   * this call makes it, and an existing file keeps its own. Whether we made it is known only
   * from O_EXCL, so a plain O_CREAT tries an exclusive create first, then opens what is there
   * (and tries again if that went away meanwhile).
   */
  private createExact(path: string, flags: number, createMode: number): number {
    for (;;) {
      try {
        const fd = this.openNode(path, flags | O_EXCL, createMode);
        try {
          fs.fchmodSync(fd, createMode & 0o7777);
        } catch (err) {
          fs.closeSync(fd);
          throw err;
        }
        return fd;
      } catch (err) {
        if ((flags & O_EXCL) !== 0 || (err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      try {
        return this.openNode(path, flags & ~O_CREAT);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    }
  }

  async mkdir(path: string, mode: number): Promise<void> {
    this.withHost(path, (p) => {
      sys(`mkdir ${path}`, () => fs.mkdirSync(p, { mode }));
      // mkdir(2) keeps only the permission and sticky bits of its mode; a setgid parent adds S_ISGID
      const want = mode & 0o1777;
      if ((want & DAEMON_UMASK) === 0) return;
      const inherited = sys(`stat ${path}`, () => fs.lstatSync(p)).mode & S_ISGID;
      sys(`chmod ${path}`, () => fs.chmodSync(p, want | inherited));
    });
  }

  async rmdir(path: string): Promise<void> {
    this.withHost(path, (p) => sys(`rmdir ${path}`, () => fs.rmdirSync(p)));
  }

  async unlink(path: string): Promise<void> {
    const open = this.byPath.has(path) ? this.pinAt(path, `unlink ${path}`) : null;
    try {
      this.withHost(path, (p) => sys(`unlink ${path}`, () => fs.unlinkSync(p)));
    } catch (err) {
      if (open) for (const f of open.pinned) this.pool.unpin(f);
      throw err;
    }
    if (open) this.lost(open.files);
  }

  async rename(from: string, to: string): Promise<void> {
    const replaced = this.byPath.has(to) ? this.pinAt(to, `rename ${from} -> ${to}`) : null;
    try {
      this.withHost(from, (a) => this.withHost(to, (b) => sys(`rename ${from} -> ${to}`, () => fs.renameSync(a, b))));
    } catch (err) {
      if (replaced) for (const f of replaced.pinned) this.pool.unpin(f);
      throw err;
    }
    if (replaced) this.lost(replaced.files);
    this.moved(from, to);
  }

  async symlink(target: string, path: string): Promise<void> {
    this.withHost(path, (p) => sys(`symlink ${path}`, () => fs.symlinkSync(osPath(target), p)));
  }

  /** FIFOs, sockets and device nodes (mknodat beneath the root; needs the local addon) */
  async mknod(path: string, mode: number, rdev: number): Promise<void> {
    if (!this.beneath) throw new VfsError('EPERM', `mknod ${path}: special files need the local addon (native/, not built here)`);
    checkPath(path);
    const [parent, name] = LocalBackend.split(path);
    const r = this.beneath.mknod(this.rootFd, parent, name, mode, rdev);
    if (r < 0) throw fromNodeError(this.nativeFailure(path, r), `mknod ${path}`);
    // the daemon's umask is not the caller's (see DAEMON_UMASK)
    if ((mode & 0o777 & DAEMON_UMASK) !== 0) {
      this.withHost(path, (p) => sys(`chmod ${path}`, () => fs.chmodSync(p, mode & 0o7777)));
    }
  }

  async link(existing: string, newPath: string): Promise<void> {
    this.withHost(existing, (a) => this.withHost(newPath, (b) => sys(`link ${existing} -> ${newPath}`, () => fs.linkSync(a, b))));
  }

  /*
   * chmod, chown and utimens act on an O_PATH descriptor of the node (resolved beneath the root
   * as open resolves it) and answer with its fstat: the journal's after-state and the request's
   * reply need no second path walk (tar as root makes three of these per file). The change goes
   * through /proc/self/fd/N, which the kernel resolves to the node itself, a symlink included.
   */

  async chmod(path: string, mode: number): Promise<Attr> {
    return this.changeNode(path, `chmod ${path}`, (fd) => this.chmodFd(fd, path, mode));
  }

  /** chmod of the node `fd` holds (an O_PATH descriptor, or an open file's own) */
  chmodFd(fd: number, path: string, mode: number): void {
    // Linux cannot chmod a symlink itself (through the descriptor it would, on ext4), and
    // following it could leave the root
    if (this.fstatFd(fd, path).type === 'symlink') throw new VfsError('EOPNOTSUPP', `${path} is a symlink; its mode cannot be changed`);
    fs.chmodSync(procFd(fd), mode & 0o7777);
  }

  async chown(path: string, uid: number, gid: number): Promise<Attr> {
    return this.changeNode(path, `chown ${path}`, (fd) => fs.chownSync(procFd(fd), uid, gid));
  }

  async utimens(path: string, times: TimeSpec): Promise<Attr | void> {
    const set = this.utimensFd(times);
    if (set) return set === 'nothing' ? undefined : this.changeNode(path, `utimens ${path}`, set);
    const p = osPath(this.host(path));
    if (times.atimeNs === undefined && times.mtimeNs === undefined) return;
    const cur = sys(`stat ${path}`, () => fs.lstatSync(p, { bigint: true }));
    const now = BigInt(Date.now()) * 1_000_000n;
    const pick = (t: bigint | 'now' | undefined, current: bigint) => (t === undefined ? current : t === 'now' ? now : t);
    const at = nsToSeconds(pick(times.atimeNs, cur.atimeNs));
    const mt = nsToSeconds(pick(times.mtimeNs, cur.mtimeNs));
    sys(`utimens ${path}`, () => fs.lutimesSync(p, at, mt));
  }

  /**
   * utimensat(2) on the node a descriptor holds: exact to the nanosecond at any time the backing
   * file system keeps (ext4: 1901-12-13 to 2446), and "now" is the kernel's clock. 'nothing':
   * both times omitted; null: the addon is not built (utimes by path then).
   */
  utimensFd(times: TimeSpec): ((fd: number) => void) | 'nothing' | null {
    const ops = nodeOps();
    if (!ops) return null;
    const [as, ans] = utimePart(times.atimeNs);
    const [ms, mns] = utimePart(times.mtimeNs);
    if (ans === UTIME_OMIT && mns === UTIME_OMIT) return 'nothing';
    return (fd) => ops.utimens(fd, as, ans, ms, mns);
  }

  /** `change` on an O_PATH descriptor of the node, then the node's attributes */
  private changeNode(path: string, what: string, change: (fd: number) => void): Attr {
    return this.withNode(path, what, (fd) => {
      change(fd);
      return this.fstatFd(fd, path);
    });
  }

  async truncate(path: string, size: number): Promise<void> {
    const fd = sys(`open ${path}`, () => this.openNode(path, O_RDWR));
    try {
      sys(`truncate ${path}`, () => fs.ftruncateSync(fd, size));
    } finally {
      fs.closeSync(fd);
    }
  }

  async copyOut(path: string, hostFile: string): Promise<void> {
    // FICLONE: a copy-on-write clone where the file system offers one (btrfs, XFS), else a
    // kernel-side copy; off the event loop, since a big file takes a while.
    const copy = async (p: string | Buffer) => {
      try {
        await fs.promises.copyFile(p, hostFile, fs.constants.COPYFILE_FICLONE | fs.constants.COPYFILE_EXCL);
      } catch (err) {
        throw fromNodeError(err, `copy ${path}`);
      }
    };
    const p = this.host(path);
    if (!this.beneath || Buffer.byteLength(p) < PATH_MAX) return copy(osPath(p));
    // a long path: through the file's own descriptor (see withHost), open until the copy ends
    const fd = sys(`open ${path}`, () => this.openNode(path, O_RDONLY));
    try {
      await copy(procFd(fd));
    } finally {
      fs.closeSync(fd);
    }
  }

  async statfs(path: string): Promise<FsStats> {
    const s = this.withHost(path, (p) => {
      // statfs follows a final symlink; do not report on whatever it points at
      if (sys(`stat ${path}`, () => fs.lstatSync(p)).isSymbolicLink()) throw new VfsError('ELOOP', `${path} is a symlink; not following it`);
      return sys(`statfs ${path}`, () => fs.statfsSync(p));
    });
    return { bsize: s.bsize, blocks: s.blocks, bfree: s.bfree, bavail: s.bavail, files: s.files, ffree: s.ffree, namemax: 255 };
  }

  // ---- extended attributes (native/ledgerfs_xattr.c; namespaces: xattr-names.ts) ----------

  /** `fn` with the addon's node helpers on an O_PATH descriptor of the node (see withNode) */
  private onNode<T>(path: string, what: string, fn: (ops: NodeOps, fd: number) => T): T {
    const ops = needNodeOps(what);
    return this.withNode(path, what, (fd) => fn(ops, fd));
  }

  /** `fn` on an O_PATH descriptor of the node itself, resolved as open resolves it */
  private withNode<T>(path: string, what: string, fn: (fd: number) => T): T {
    const fd = sys(what, () => this.openNode(path, O_PATH));
    try {
      return sys(what, () => fn(fd));
    } finally {
      fs.closeSync(fd);
    }
  }

  async getxattr(path: string, name: string): Promise<Buffer> {
    checkXattrRead(name, path);
    return this.onNode(path, `getxattr ${name} ${path}`, (ops, fd) => ops.getxattr(fd, name));
  }

  async listxattr(path: string): Promise<string[]> {
    return listedXattrs(this.onNode(path, `listxattr ${path}`, (ops, fd) => ops.listxattr(fd)));
  }

  async setxattr(path: string, name: string, value: Buffer, flags: number): Promise<void> {
    checkXattrWrite(name, path);
    this.onNode(path, `setxattr ${name} ${path}`, (ops, fd) => ops.setxattr(fd, name, value, flags));
  }

  async removexattr(path: string, name: string): Promise<void> {
    checkXattrWrite(name, path);
    this.onNode(path, `removexattr ${name} ${path}`, (ops, fd) => ops.removexattr(fd, name));
  }

  async close(): Promise<void> {
    const fd = this.rootFd;
    this.rootFd = -1;
    if (fd >= 0) fs.closeSync(fd);
  }
}
