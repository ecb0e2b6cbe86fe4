import { type Attr, type Caller, joinPath, type Logger, parentOf, VfsError } from '../core/index.js';
import type { Vfs } from '../vfs/index.js';
import type { FsOps } from './binding.js';
import { FailureLog } from './failure-log.js';

/** Request counters by op, for `--log-level debug` summaries and the bench. */
export class OpCounters {
  readonly calls = new Map<string, number>();
  readonly errors = new Map<string, number>();
  bump(op: string): void {
    this.calls.set(op, (this.calls.get(op) ?? 0) + 1);
  }
  fail(op: string): void {
    this.errors.set(op, (this.errors.get(op) ?? 0) + 1);
  }
  snapshot(): Record<string, { calls: number; errors: number }> {
    const out: Record<string, { calls: number; errors: number }> = {};
    for (const [op, n] of this.calls) out[op] = { calls: n, errors: this.errors.get(op) ?? 0 };
    return out;
  }
}

/** What one op's requests report when they end (made once per op at mount: nothing per request). */
export interface OpMeter {
  /** `startMs`: RequestMeters.now() when the request arrived; `result`: what the core answered
   * (a read's or write's byte count) */
  ok(startMs: number, result: unknown): void;
  failed(startMs: number, err: unknown): void;
}

/** Request metrics (`--metrics`): the adapter asks for one meter per op up front. */
export interface RequestMeters {
  now(): number;
  forOp(op: string): OpMeter;
}

const noClock = () => 0;

const staleIfGone = (err: unknown): never => {
  if (err instanceof VfsError && err.code === 'ENOENT') throw new VfsError('ESTALE', `${err.reason} (looked up again by the kernel)`);
  throw err;
};

interface Slot {
  readonly op: string;
  readonly meter: OpMeter | undefined;
}

/**
 * The adapter maps binding requests onto the core: arguments in, results out, failures logged.
 * Expected answers (ENOENT to a lookup, EACCES to a refused write) are logged only at debug;
 * unexpected ones once at warn/error through a rate limit (FailureLog).
 */
export function vfsOps(vfs: Vfs, log: Logger, counters = new OpCounters(), meters?: RequestMeters, failures = new FailureLog(log)): FsOps {
  const debug = log.isLevelEnabled('debug');
  const now = meters ? meters.now.bind(meters) : noClock;
  const slots = new Map<string, Slot>();
  const s = (op: string): Slot => {
    let slot = slots.get(op);
    if (!slot) slots.set(op, (slot = { op, meter: meters?.forOp(op) }));
    return slot;
  };
  const failed = (slot: Slot, c: Caller, path: string | null, t0: number, err: unknown, fh: number | undefined): never => {
    slot.meter?.failed(t0, err);
    if (debug) {
      counters.fail(slot.op);
      if (!(err instanceof VfsError && err.code === 'ENOENT')) {
        log.debug({ op: slot.op, path, err: err instanceof VfsError ? err.reason : String(err) }, 'request failed');
      }
    }
    // a handle's path is looked up only now, when a failure needs naming
    failures.report(slot.op, path ?? (fh !== undefined ? vfs.pathOf(fh) : null), c, err);
    throw err;
  };
  // `t0` is an argument so that it is read before the core's call in the same expression runs
  const t = <T>(slot: Slot, c: Caller, path: string | null, t0: number, p: Promise<T>, fh?: number): Promise<T> => {
    if (debug) counters.bump(slot.op);
    const meter = slot.meter;
    if (meter === undefined) return p.catch((err: unknown) => failed(slot, c, path, t0, err, fh));
    return p.then((v) => (meter.ok(t0, v), v), (err: unknown) => failed(slot, c, path, t0, err, fh));
  };

  const S = {
    access: s('access'),
    chmod: s('chmod'),
    chown: s('chown'),
    copy_file_range: s('copy_file_range'),
    create: s('create'),
    fallocate: s('fallocate'),
    fgetattr: s('fgetattr'),
    flush: s('flush'),
    fsync: s('fsync'),
    ftruncate: s('ftruncate'),
    getattr: s('getattr'),
    getxattr: s('getxattr'),
    link: s('link'),
    listxattr: s('listxattr'),
    mknod: s('mknod'),
    lseek: s('lseek'),
    mkdir: s('mkdir'),
    open: s('open'),
    read: s('read'),
    readdir: s('readdir'),
    readdirplus: s('readdirplus'),
    readlink: s('readlink'),
    release: s('release'),
    removexattr: s('removexattr'),
    rename: s('rename'),
    rmdir: s('rmdir'),
    setxattr: s('setxattr'),
    statfs: s('statfs'),
    symlink: s('symlink'),
    truncate: s('truncate'),
    unlink: s('unlink'),
    utimens: s('utimens'),
    write: s('write'),
  };

  /** a LOOKUP's miss, counted and metered as the getattr answered ENOENT it stands for */
  const NO_ENTRY = new VfsError('ENOENT', 'no such file or directory');
  const lookup = (c: Caller, path: string, t0: number, p: Promise<Attr | null>): Promise<Attr | null> => {
    if (debug) counters.bump(S.getattr.op);
    const meter = S.getattr.meter;
    return p.then(
      (a) => {
        if (a !== null) meter?.ok(t0, a);
        else {
          meter?.failed(t0, NO_ENTRY);
          if (debug) counters.fail(S.getattr.op);
        }
        return a;
      },
      (err: unknown) => failed(S.getattr, c, path, t0, err, undefined),
    );
  };

  const ops: FsOps = {
    getattr: (c, path) => t(S.getattr, c, path, now(), vfs.getattr(path)),
    lookup: (c, path) => lookup(c, path, now(), vfs.lookup(path)),
    fgetattr: (c, path, fh) => t(S.fgetattr, c, path, now(), vfs.fgetattr(fh)),
    access: (c, path) => t(S.access, c, path, now(), vfs.access(path)),
    statfs: (c, path) => t(S.statfs, c, path, now(), vfs.statfs(path)),
    readdir: (c, path) => t(S.readdir, c, path, now(), vfs.readdir(path).then((names) => ['.', '..', ...names])),
    // An entry that vanished (or cannot be stat'ed) between the listing and its getattr goes out
    // without attributes: the kernel then looks it up itself, as after a plain readdir. '.' and
    // '..' get theirs too, so every entry's d_ino is the inode stat shows.
    readdirPlus: (c, path) => t(S.readdirplus, c, path, now(), vfs.readdir(path).then((names) => {
      const attrOf = (name: string, p: string) => vfs.getattr(p).then((attr) => ({ name, attr }), () => ({ name, attr: null }));
      return Promise.all([attrOf('.', path), attrOf('..', parentOf(path)), ...names.map((name) => attrOf(name, joinPath(path, name)))]);
    })),
    readlink: (c, path) => t(S.readlink, c, path, now(), vfs.readlink(path)),
    // The kernel opens a name it holds a dentry for (and strips O_CREAT from the request): when
    // the file is gone from the store (another host removed it), ESTALE makes it look the name up
    // again and retry, so an open(O_CREAT) creates the file instead of failing with ENOENT.
    open: (c, path, flags) => t(S.open, c, path, now(), vfs.open(path, flags, c).catch(staleIfGone)),
    create: (c, path, mode, flags, made) => t(S.create, c, path, now(), vfs.create(path, mode, flags, c, made)),
    read: (c, fh, buf, len, pos) => t(S.read, c, null, now(), vfs.read(fh, buf, len, pos), fh),
    write: (c, fh, buf, len, pos) => t(S.write, c, null, now(), vfs.write(fh, buf, len, pos, c), fh),
    flush: (c, fh) => t(S.flush, c, null, now(), vfs.flush(fh, c), fh),
    closeNeedsFlush: (fh) => vfs.closeNeedsFlush(fh),
    fsync: (c, fh, dataOnly) => t(S.fsync, c, null, now(), vfs.fsync(fh, dataOnly, c), fh),
    // the path before release forgets the handle (an upload failing at close is named by it)
    release: (c, fh) => t(S.release, c, vfs.pathOf(fh), now(), vfs.release(fh, c)),
    truncate: (c, path, size) => t(S.truncate, c, path, now(), vfs.truncate(path, size, c)),
    ftruncate: (c, fh, size) => t(S.ftruncate, c, null, now(), vfs.ftruncate(fh, size, c), fh),
    fallocate: (c, fh, mode, off, len) => t(S.fallocate, c, null, now(), vfs.fallocate(fh, mode, off, len, c), fh),
    copyFileRange: (c, fhIn, offIn, fhOut, offOut, len, flags) => t(S.copy_file_range, c, null, now(), vfs.copyFileRange(fhIn, offIn, fhOut, offOut, len, flags, c), fhOut),
    lseek: (c, fh, off, whence) => t(S.lseek, c, null, now(), vfs.lseek(fh, off, whence), fh),
    mkdir: (c, path, mode) => t(S.mkdir, c, path, now(), vfs.mkdir(path, mode, c)),
    rmdir: (c, path) => t(S.rmdir, c, path, now(), vfs.rmdir(path, c)),
    unlink: (c, path) => t(S.unlink, c, path, now(), vfs.unlink(path, c)),
    rename: (c, from, to) => t(S.rename, c, from, now(), vfs.rename(from, to, c)),
    symlink: (c, target, path) => t(S.symlink, c, path, now(), vfs.symlink(target, path, c)),
    mknod: (c, path, mode, rdev) => t(S.mknod, c, path, now(), vfs.mknod(path, mode, rdev, c)),
    link: (c, existing, newPath) => t(S.link, c, newPath, now(), vfs.link(existing, newPath, c)),
    chmod: (c, path, mode) => t(S.chmod, c, path, now(), vfs.chmod(path, mode, c)),
    chown: (c, path, uid, gid) => t(S.chown, c, path, now(), vfs.chown(path, uid, gid, c)),
    utimens: (c, path, times) => t(S.utimens, c, path, now(), vfs.utimens(path, times, c)),
    fchmod: (c, fh, mode) => t(S.chmod, c, null, now(), vfs.fchmod(fh, mode), fh),
    fchown: (c, fh, uid, gid) => t(S.chown, c, null, now(), vfs.fchown(fh, uid, gid), fh),
    futimens: (c, fh, times) => t(S.utimens, c, null, now(), vfs.futimens(fh, times), fh),
  };
  // a store with hard links has real inode numbers (GCS derives them from paths)
  if (vfs.backend.capabilities.hardLinks) ops.inodesNameNodes = true;
  if (vfs.backend.capabilities.xattrs) {
    ops.xattr = {
      get: (c, path, name) => t(S.getxattr, c, path, now(), vfs.getxattr(path, name)),
      set: (c, path, name, value, flags) => t(S.setxattr, c, path, now(), vfs.setxattr(path, name, value, flags, c)),
      list: (c, path) => t(S.listxattr, c, path, now(), vfs.listxattr(path)),
      remove: (c, path, name) => t(S.removexattr, c, path, now(), vfs.removexattr(path, name, c)),
      fget: (c, fh, name) => t(S.getxattr, c, null, now(), vfs.fgetxattr(fh, name), fh),
      fset: (c, fh, name, value, flags) => t(S.setxattr, c, null, now(), vfs.fsetxattr(fh, name, value, flags), fh),
      flist: (c, fh) => t(S.listxattr, c, null, now(), vfs.flistxattr(fh), fh),
      fremove: (c, fh, name) => t(S.removexattr, c, null, now(), vfs.fremovexattr(fh, name), fh),
    };
  }
  return ops;
}
