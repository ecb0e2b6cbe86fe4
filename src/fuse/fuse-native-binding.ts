import { createRequire } from 'node:module';
import path from 'node:path';
import { type Attr, type Caller, errnoOf, type FsStats, kernelErrno, type TimeSpec } from '../core/index.js';
import { timeArg, type Binding, type FsOps, type MountedFs, type MountOptions } from './binding.js';
import { mountAt } from './mounts.js';

const require = createRequire(import.meta.url);

/* Raw callback shapes of (patched) fuse-native; see native/FUSE_NATIVE_PATCH.md. */
type Cb = (code: number, ...rest: unknown[]) => void;
interface FuseNativeInstance {
  mount(cb: (err: Error | null) => void): void;
  unmount(cb: (err: Error | null) => void): void;
}
type FuseNativeCtor = new (mnt: string, ops: Record<string, unknown>, opts: Record<string, unknown>) => FuseNativeInstance;


/** fuse-native never tells JavaScript who called. */
const UNKNOWN: Caller = Object.freeze({});

function stat(a: Attr) {
  return {
    mode: a.mode, uid: a.uid, gid: a.gid, size: a.size, ino: a.ino,
    // fuse-native encodes `stat.nlink || 1`, turning the 0 of a file unlinked while open into 1
    // (fstat after ftruncate/write showed nlink 1). A numeric string is truthy and still lands
    // as 0 in the Uint32Array. Harmless once fuse-native uses `?? 1`.
    nlink: a.nlink === 0 ? '0' : a.nlink,
    blocks: a.blocks, blksize: 4096, dev: 0, rdev: a.rdev ?? 0,
    atimeNs: a.atimeNs, mtimeNs: a.mtimeNs, ctimeNs: a.ctimeNs,
    // Unpatched fuse-native reads milliseconds from atime/mtime/ctime and, without them,
    // reports the current time for every file.
    atime: Number(a.atimeNs / 1_000_000n), mtime: Number(a.mtimeNs / 1_000_000n), ctime: Number(a.ctimeNs / 1_000_000n),
  };
}

function statfs(s: FsStats) {
  return {
    bsize: s.bsize, frsize: s.bsize, blocks: s.blocks, bfree: s.bfree, bavail: s.bavail,
    files: s.files, ffree: s.ffree, favail: s.ffree, fsid: 0, flag: 0, namemax: s.namemax,
  };
}


/*
 * Reply helpers. A request must always be answered exactly once, whatever the op does: a
 * synchronous throw is caught here too, because an exception escaping into fuse-native kills
 * the daemon and leaves a dead mount behind. One closure per request; no timers.
 */
function start<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return fn();
  } catch (err) {
    return Promise.reject(err);
  }
}
function done(fn: () => Promise<unknown>, cb: Cb): void {
  start(fn).then(() => cb(0), (e) => cb(kernelErrno(e)));
}
function value<T>(fn: () => Promise<T>, cb: Cb, map?: (v: T) => unknown): void {
  start(fn).then((v) => cb(0, map ? map(v) : v), (e) => cb(kernelErrno(e)));
}
function count(fn: () => Promise<number>, cb: Cb): void {
  start(fn).then((n) => cb(n), (e) => cb(kernelErrno(e)));
}

function toNativeOps(ops: FsOps): Record<string, unknown> {
  const c = UNKNOWN;
  const table: Record<string, unknown> = {
    getattr: (path: string, cb: Cb) => value(() => ops.getattr(c, path), cb, stat),
    fgetattr: (path: string | undefined, fh: number, cb: Cb) => value(() => ops.fgetattr(c, path ?? null, fh), cb, stat),
    access: (path: string, mode: number, cb: Cb) => done(() => ops.access(c, path, mode), cb),
    statfs: (path: string, cb: Cb) => value(() => ops.statfs(c, path), cb, statfs),
    // With stats (use_ino), libfuse 2 gives each entry its d_ino; an entry without attributes
    // (vanished meanwhile) gets an empty stat, since the stats must match the names one to one.
    readdir: (path: string, cb: Cb) => {
      const plus = ops.readdirPlus;
      if (!plus) return value(() => ops.readdir(c, path), cb);
      start(() => plus(c, path)).then(
        (entries) => cb(0, entries.map((e) => e.name), entries.map((e) => (e.attr ? stat(e.attr) : undefined))),
        (e) => cb(kernelErrno(e)),
      );
    },
    readlink: (path: string, cb: Cb) => value(() => ops.readlink(c, path), cb),
    open: (path: string, flags: number, cb: Cb) => value(() => ops.open(c, path, flags), cb),
    create: (path: string, mode: number, flags: number | Cb, cb?: Cb) => {
      // Unpatched fuse-native calls create(path, mode, cb) without flags.
      if (typeof flags === 'function') return value(() => ops.create(c, path, mode, 0o101 /* O_WRONLY|O_CREAT */), flags);
      value(() => ops.create(c, path, mode, flags), cb as Cb);
    },
    read: (_p: string, fh: number, buf: Buffer, len: number, pos: number, cb: Cb) => count(() => ops.read(c, fh, buf, len, pos), cb),
    write: (_p: string, fh: number, buf: Buffer, len: number, pos: number, cb: Cb) => count(() => ops.write(c, fh, buf, len, pos), cb),
    flush: (_p: string, fh: number, cb: Cb) => done(() => ops.flush(c, fh), cb),
    fsync: (_p: string, datasync: number, fh: number, cb: Cb) => done(() => ops.fsync(c, fh, !!datasync), cb),
    release: (_p: string, fh: number, cb: Cb) => done(() => ops.release(c, fh), cb),
    opendir: (_p: string, _flags: number, cb: Cb) => cb(0, 0),
    releasedir: (_p: string, _fh: number, cb: Cb) => cb(0),
    truncate: (path: string, size: number, cb: Cb) => done(() => ops.truncate(c, path, size), cb),
    ftruncate: (_p: string, fh: number, size: number, cb: Cb) => done(() => ops.ftruncate(c, fh, size), cb),
    mkdir: (path: string, mode: number, cb: Cb) => done(() => ops.mkdir(c, path, mode), cb),
    rmdir: (path: string, cb: Cb) => done(() => ops.rmdir(c, path), cb),
    unlink: (path: string, cb: Cb) => done(() => ops.unlink(c, path), cb),
    rename: (from: string, to: string, cb: Cb) => done(() => ops.rename(c, from, to), cb),
    symlink: (target: string, path: string, cb: Cb) => done(() => ops.symlink(c, target, path), cb),
    mknod: (path: string, mode: number, dev: number, cb: Cb) => done(() => ops.mknod(c, path, mode, dev), cb),
    link: (existing: string, newPath: string, cb: Cb) => done(() => ops.link(c, existing, newPath), cb),
    chmod: (path: string, mode: number, cb: Cb) => done(() => ops.chmod(c, path, mode), cb),
    chown: (path: string, uid: number, gid: number, cb: Cb) => done(() => ops.chown(c, path, uid, gid), cb),
    utimens: (path: string, aSec: number, aNsec: number, mSec: number | Cb, mNsec?: number, cb?: Cb) => {
      // Unpatched fuse-native calls utimens(path, atimeMs, mtimeMs, cb); taking that for the
      // patched shape threw here (BigInt of a function), which killed the daemon.
      if (typeof mSec === 'function') {
        const ms = (v: number) => BigInt(Math.trunc(v)) * 1_000_000n;
        return done(() => ops.utimens(c, path, { atimeNs: ms(aSec), mtimeNs: ms(aNsec) }), mSec);
      }
      const times: TimeSpec = { atimeNs: timeArg(aSec, aNsec), mtimeNs: timeArg(mSec, mNsec as number) };
      done(() => ops.utimens(c, path, times), cb as Cb);
    },
  };
  if (ops.xattr) {
    const x = ops.xattr;
    // asked before every write; never reported (backend/xattr-names.ts): answered without the core
    table.getxattr = (path: string, name: string, _pos: number, cb: Cb) =>
      name === 'security.capability' ? cb(-errnoOf('ENODATA')) : value(() => x.get(c, path, name), cb);
    table.setxattr = (path: string, name: string, val: Buffer, _pos: number, flags: number, cb: Cb) =>
      done(() => x.set(c, path, name, Buffer.from(val), flags), cb);
    table.listxattr = (path: string, cb: Cb) => value(() => x.list(c, path), cb);
    table.removexattr = (path: string, name: string, cb: Cb) => done(() => x.remove(c, path, name), cb);
  }
  return table;
}

export function fuseNativeOptions(o: MountOptions): Record<string, unknown> {
  return {
    timeout: false,
    debug: o.debug,
    allowOther: o.allowOther,
    // Kernel checks permission bits, as on a local disk; we only add policy on top.
    defaultPermissions: true,
    // what /proc/mounts and df show: the source, and the type fuse.ledgerfs (as native-ll's
    // mount_args_init); a comma would end the option, so it becomes '_' there too
    fsname: o.fsName.replace(/[,\\]/g, '_'),
    subtype: 'ledgerfs',
    // Ops on an open file whose node has no path get path === null instead of ENOENT.
    nullPathOk: true,
    attrTimeout: String(o.attrTimeoutSec),
    entryTimeout: String(o.entryTimeoutSec),
    extraOptions: [
      'big_writes',
      `max_write=${o.maxWriteBytes}`,
      `negative_timeout=${o.negativeTimeoutSec}`,
      // Report the backend's inode numbers (libfuse 2 otherwise shows its own node ids: hard
      // links get different st_ino, and numbers change when the kernel forgets a node).
      'use_ino',
      // No hard_remove: with it libfuse 2 has no path for a file unlinked while open and answers
      // ENOENT to fstat (the kernel sends GETATTR without a file handle). Without it libfuse
      // renames such a file to .fuse_hidden*; the core turns that rename into a real unlink and
      // keeps the hidden name as an alias of the open state, so the backend never sees it.
      // (Kept in sync with the Vfs: see isFuseHiddenName in vfs/open-files.ts.)
    ],
  };
}

/** fuse-native's own cleanup after unmount (uv_unref of its async handle); false if unavailable. */
function releaseNativeLoopHandle(fuse: FuseNativeInstance, mountpoint: string): boolean {
  try {
    const fuseRequire = createRequire(require.resolve('fuse-native'));
    const native = (fuseRequire('node-gyp-build') as (dir: string) => Record<string, unknown>)(path.dirname(require.resolve('fuse-native')));
    const thread = (fuse as unknown as { _thread?: Buffer })._thread;
    if (typeof native.fuse_native_unmount !== 'function' || !thread) return false;
    (native.fuse_native_unmount as (mnt: string, thread: Buffer) => void)(mountpoint, thread);
    return true;
  } catch {
    return false;
  }
}

export class FuseNativeBinding implements Binding {
  readonly name = 'fuse-native';
  readonly knowsCaller = false;
  readonly hidesReleasedFiles = false;

  async mount(mountpoint: string, ops: FsOps, options: MountOptions): Promise<MountedFs> {
    const Fuse = require('fuse-native') as FuseNativeCtor;
    const fuse = new Fuse(mountpoint, toNativeOps(ops), fuseNativeOptions(options));
    await new Promise<void>((resolve, reject) => fuse.mount((err) => (err ? reject(err) : resolve())));
    let mounted = true;
    return {
      mountpoint,
      unmount: () =>
        new Promise<void>((resolve, reject) => {
          if (!mounted) return resolve();
          fuse.unmount((err) => {
            if (err) {
              // fuse-native releases its event-loop handle only when its own `fusermount -uz`
              // succeeds; after an unmount from outside (ledgerfs unmount, fusermount -u) that
              // fails, and the daemon logged "unmounted" but never exited. Release it here.
              if (!mountAt(mountpoint) && releaseNativeLoopHandle(fuse, mountpoint)) {
                mounted = false;
                return resolve();
              }
              return reject(err);
            }
            mounted = false;
            resolve();
          });
        }),
    };
  }
}
