import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { type Attr, type Caller, errnoOf, type FsStats, kernelErrno, type TimeSpec } from '../core/index.js';
import { timeArg, type Binding, type DirEntryAttr, type FsOps, type MountedFs, type MountOptions } from './binding.js';
import { mountAt, unmountPath } from './mounts.js';

/*
 * The project's own libfuse3 binding (native/ledgerfs_fuse3.c, see native/README.md). The addon
 * calls one handler per request with a numeric id; every op below is an async function that ends
 * in exactly one addon.reply(id, code, payload). No closure, timer or reference per request.
 */

/** Where node-gyp puts the addon (scripts/build-native.mjs); same from src/ and dist/. */
export const NATIVE_ADDON = path.resolve(import.meta.dirname, '../../native/build/Release/ledgerfs_fuse3.node');

interface Addon {
  mount(mountpoint: string, handler: Handler, options: Record<string, unknown>, xattrs: boolean): object;
  destroy(handle: object): void;
  unref(handle: object): void;
  reply(id: number, code: number, payload?: unknown, attrs?: ArrayBuffer): boolean;
  setScratch(buf: ArrayBuffer): void;
  libfuseVersion: string;
}
type Handler = (
  id: number, op: number, uid: number, gid: number, pid: number,
  path: string | null, path2: string | null, a: number, b: number, c: number, d: number, extra: Buffer | boolean | number | null,
) => void;

/** Load one of the libfuse3 addons and hand it its scratch area, or say why it cannot be used. */
export function loadAddon<A extends { setScratch(b: ArrayBuffer): void }>(file: string, label: string, scratchArea: ArrayBuffer): A | Error {
  try {
    const addon = createRequire(import.meta.url)(file) as A;
    addon.setScratch(scratchArea);
    return addon;
  } catch (err) {
    return new Error(`the ${label} libfuse3 binding is not built (${(err as Error).message.split('\n')[0]}); ` +
      'build it with: node scripts/build-native.mjs (needs apt-get install -y libfuse3-dev build-essential python3)');
  }
}

let loaded: Addon | Error | undefined;
/** The addon, or why it cannot be used (not built: the install said so). */
export function loadNativeAddon(): Addon | Error {
  return (loaded ??= loadAddon<Addon>(NATIVE_ADDON, 'native', scratch));
}

// Op codes: the order of `enum op` in ledgerfs_fuse3.c.
const enum Op {
  GETATTR, FGETATTR, ACCESS, STATFS, READDIR, READLINK,
  OPEN, CREATE, READ, WRITE, FLUSH, FSYNC, RELEASE,
  TRUNCATE, FTRUNCATE, MKDIR, RMDIR, UNLINK, RENAME,
  SYMLINK, LINK, CHMOD, CHOWN, UTIMENS,
  GETXATTR, SETXATTR, LISTXATTR, REMOVEXATTR,
  FALLOCATE, COPY_FILE_RANGE, LSEEK,
}
const CLOSED = -1;

const RENAME_NOREPLACE = 1;
const EIO = -errnoOf('EIO');
const EINVAL = -errnoOf('EINVAL');
const EEXIST = -errnoOf('EEXIST');
const ENOENT = -errnoOf('ENOENT');

/* Attribute replies go through one scratch area the addon reads during reply(): 16 doubles
 * (mode uid gid size ino nlink blocks blksize rdev | statfs: bsize frsize blocks bfree bavail
 * files ffree favail namemax), then atime/mtime/ctime as int64 ns. */
const scratch = new ArrayBuffer(16 * 8 + 3 * 8);
const f64 = new Float64Array(scratch, 0, 16);
const i64 = new BigInt64Array(scratch, 16 * 8, 3);

/** mode uid gid size ino nlink blocks blksize rdev at f[o..o+8], the 3 ns times at t[to..to+2] */
export function writeAttr(f: Float64Array, o: number, t: BigInt64Array, to: number, a: Attr): void {
  f[o] = a.mode; f[o + 1] = a.uid; f[o + 2] = a.gid; f[o + 3] = a.size; f[o + 4] = a.ino;
  f[o + 5] = a.nlink; f[o + 6] = a.blocks; f[o + 7] = 4096; f[o + 8] = 0;
  t[to] = a.atimeNs; t[to + 1] = a.mtimeNs; t[to + 2] = a.ctimeNs;
}
function putAttr(a: Attr): void {
  writeAttr(f64, 0, i64, 0, a);
}
/** statfs as the addons read it: bsize frsize blocks bfree bavail files ffree favail namemax */
export function writeStatfs(f: Float64Array, s: FsStats): void {
  f[0] = s.bsize; f[1] = s.bsize; f[2] = s.blocks; f[3] = s.bfree; f[4] = s.bavail;
  f[5] = s.files; f[6] = s.ffree; f[7] = s.ffree; f[8] = s.namemax;
}
/* Readdirplus attributes: one 96-byte record per entry (9 doubles as putAttr, then the 3 int64
 * ns times), mode 0 for "none"; one growing buffer, read by the addon during reply(). */
const PLUS_RECORD = 96;
let plusBuf = new ArrayBuffer(PLUS_RECORD * 256);
let plusF = new Float64Array(plusBuf);
let plusT = new BigInt64Array(plusBuf);
function packPlus(entries: DirEntryAttr[]): ArrayBuffer {
  if (plusBuf.byteLength < entries.length * PLUS_RECORD) {
    plusBuf = new ArrayBuffer(entries.length * PLUS_RECORD * 2);
    plusF = new Float64Array(plusBuf);
    plusT = new BigInt64Array(plusBuf);
  }
  const f = plusF;
  const t = plusT;
  for (let i = 0; i < entries.length; i++) {
    const a = entries[i]?.attr;
    const o = i * (PLUS_RECORD / 8);
    if (a) writeAttr(f, o, t, o + 9, a);
    else f[o] = 0;
  }
  return plusBuf;
}


function makeHandler(addon: Addon, ops: FsOps, onClosed: () => void): Handler {
  const reply = addon.reply;
  // Each function answers exactly once; a synchronous throw inside `ops` lands in its catch.
  async function getattr(id: number, c: Caller, p: string) {
    try { putAttr(await ops.getattr(c, p)); reply(id, 0); } catch (e) { reply(id, kernelErrno(e)); }
  }
  async function fgetattr(id: number, c: Caller, p: string | null, fh: number) {
    try { putAttr(await ops.fgetattr(c, p, fh)); reply(id, 0); } catch (e) { reply(id, kernelErrno(e)); }
  }
  async function statfs(id: number, c: Caller, p: string) {
    try { writeStatfs(f64, await ops.statfs(c, p)); reply(id, 0); } catch (e) { reply(id, kernelErrno(e)); }
  }
  async function readdirPlus(id: number, c: Caller, p: string) {
    try {
      const entries = await (ops.readdirPlus as NonNullable<FsOps['readdirPlus']>)(c, p);
      reply(id, 0, entries.map((e) => e.name), packPlus(entries));
    } catch (e) {
      reply(id, kernelErrno(e));
    }
  }
  async function value(id: number, p: Promise<unknown>) {
    try { reply(id, 0, await p); } catch (e) { reply(id, kernelErrno(e)); }
  }
  async function num(id: number, p: Promise<number>) {
    try { reply(id, await p); } catch (e) { reply(id, kernelErrno(e)); }
  }
  async function done(id: number, p: Promise<void>) {
    try { await p; reply(id, 0); } catch (e) { reply(id, kernelErrno(e)); }
  }
  async function rename(id: number, c: Caller, from: string, to: string, flags: number) {
    try { reply(id, await renameWithFlags(ops, c, from, to, flags)); } catch (e) { reply(id, kernelErrno(e)); }
  }
  const x = ops.xattr;

  return (id, op, uid, gid, pid, p, p2, a, b, c, d, extra) => {
    if (op === CLOSED) return onClosed();
    const who: Caller = { uid, gid, pid };
    const path = p as string;
    // `ops` may throw before returning a promise (e.g. an invalid path): answer that here.
    try {
      dispatch(id, op, who, path, p, p2, a, b, c, d, extra);
    } catch (e) {
      reply(id, kernelErrno(e));
    }
  };
  function dispatch(id: number, op: number, who: Caller, path: string, p: string | null, p2: string | null,
    a: number, b: number, c: number, d: number, extra: Buffer | boolean | number | null): void {
    switch (op) {
      case Op.GETATTR: return void getattr(id, who, path);
      case Op.FGETATTR: return void fgetattr(id, who, p, a);
      case Op.ACCESS: return void done(id, ops.access(who, path, a));
      case Op.STATFS: return void statfs(id, who, path);
      // extra: the kernel asked for READDIRPLUS
      case Op.READDIR: return void (extra === true && ops.readdirPlus ? readdirPlus(id, who, path) : value(id, ops.readdir(who, path)));
      case Op.READLINK: return void value(id, ops.readlink(who, path));
      case Op.OPEN: return void num(id, ops.open(who, path, a));
      case Op.CREATE: return void num(id, ops.create(who, path, a, b));
      case Op.READ: return void num(id, ops.read(who, a, extra as Buffer, b, c));
      case Op.WRITE: return void num(id, ops.write(who, a, extra as Buffer, b, c));
      case Op.FLUSH: return void done(id, ops.flush(who, a));
      case Op.FSYNC: return void done(id, ops.fsync(who, a, b !== 0));
      case Op.RELEASE: return void done(id, ops.release(who, a));
      case Op.TRUNCATE: return void done(id, ops.truncate(who, path, b));
      case Op.FTRUNCATE: return void done(id, ops.ftruncate(who, a, b));
      case Op.MKDIR: return void done(id, ops.mkdir(who, path, a));
      case Op.RMDIR: return void done(id, ops.rmdir(who, path));
      case Op.UNLINK: return void done(id, ops.unlink(who, path));
      case Op.RENAME: return void rename(id, who, path, p2 as string, a);
      case Op.SYMLINK: return void done(id, ops.symlink(who, path, p2 as string));
      case Op.LINK: return void done(id, ops.link(who, path, p2 as string));
      case Op.CHMOD: return void done(id, ops.chmod(who, path, a));
      case Op.CHOWN: return void done(id, ops.chown(who, path, a, b));
      case Op.UTIMENS: {
        const times: TimeSpec = { atimeNs: timeArg(a, b), mtimeNs: timeArg(c, d) };
        return void done(id, ops.utimens(who, path, times));
      }
      // a: fh, b: offset, c: length, d: mode
      case Op.FALLOCATE: return void done(id, ops.fallocate(who, a, d, b, c));
      // a/b: source fh and offset, c/d: destination fh and offset, extra: length
      case Op.COPY_FILE_RANGE: return void num(id, ops.copyFileRange(who, a, b, c, d, extra as number, 0));
      // a: fh, b: offset, c: whence
      case Op.LSEEK: return void num(id, ops.lseek(who, a, b, c));
      case Op.GETXATTR: return void (x ? value(id, x.get(who, path, p2 as string)) : reply(id, EIO));
      case Op.SETXATTR: return void (x ? done(id, x.set(who, path, p2 as string, extra as Buffer, a)) : reply(id, EIO));
      case Op.LISTXATTR: return void (x ? value(id, x.list(who, path)) : reply(id, EIO));
      case Op.REMOVEXATTR: return void (x ? done(id, x.remove(who, path, p2 as string)) : reply(id, EIO));
      default: reply(id, EIO);
    }
  }
}

/** renameat2 as far as the core can: 0, or the -errno to answer (rejects with the core's errors). */
export async function renameWithFlags(ops: FsOps, c: Caller, from: string, to: string, flags: number): Promise<number> {
  // RENAME_EXCHANGE (and anything unknown) is not something the core can do atomically.
  if (flags & ~RENAME_NOREPLACE) return EINVAL;
  if (flags & RENAME_NOREPLACE) {
    // Checked here, not atomically in the backend: the kernel serialises renames into one
    // directory (lock on the target dir), so only a change made beside the mount can race.
    const exists = await ops.getattr(c, to).then(() => true, (e) => {
      if (kernelErrno(e) === ENOENT) return false;
      throw e;
    });
    if (exists) return EEXIST;
  }
  await ops.rename(c, from, to);
  return 0;
}

/**
 * Let the kernel read ahead up to `bytes` per request (1 MiB: libfuse 3's max_pages). The FUSE
 * INIT reply caps the mount's readahead at the kernel's proposal (128 KiB) and only the bdi's
 * sysfs knob raises it afterwards (root only); measured here, uncached dd bs=1M 0.57 -> 1.7 GB/s.
 * Runs once INIT is done, i.e. after a first request answered - asynchronously, since this
 * process is the one answering. Best effort: without it reads stay at 128 KiB.
 */
async function raiseReadahead(mountpoint: string, bytes: number): Promise<void> {
  if (process.getuid?.() !== 0) return;
  const st = await fs.promises.stat(mountpoint);
  const dev = st.dev;
  const major = (dev >> 8) & 0xfff;
  const minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
  await fs.promises.writeFile(`/sys/class/bdi/${major}:${minor}/read_ahead_kb`, String(Math.max(128, Math.floor(bytes / 1024))));
}

/** What both libfuse3 addons (native, native-ll) offer for a session's life. */
export interface SessionAddon<H> {
  mount(mountpoint: string, handler: H, options: Record<string, unknown>, xattrs: boolean): object;
  destroy(handle: object): void;
  unref(handle: object): void;
}

/**
 * Mount through `addon` and keep the session until it ends: the addon reports the end through
 * the handler (`onClosed`), unmounted by us or from outside; then it is destroyed.
 */
export function serveSession<H>(addon: SessionAddon<H>, mountpoint: string, makeHandler: (onClosed: () => void) => H,
  options: MountOptions, xattrs: boolean): MountedFs {
  let closedResolve!: () => void;
  const loopEnded = new Promise<void>((r) => (closedResolve = r));
  let handle: object | undefined;
  let destroyed = false;
  const onClosed = () => {
    // The session ended (unmounted by us or from outside): free it and let the event loop go.
    if (handle && !destroyed) {
      destroyed = true;
      addon.destroy(handle);
    }
    closedResolve();
  };
  handle = addon.mount(mountpoint, makeHandler(onClosed), { ...options }, xattrs);
  void raiseReadahead(mountpoint, options.maxWriteBytes).catch(() => undefined);
  return {
    mountpoint,
    unmount: async () => {
      if (destroyed) return;
      // Unmounting ends the kernel connection; the session then sees ENODEV and stops.
      // A busy mount throws here and stays served: mount.ts retries, then detaches it lazily
      // and finishes without waiting for the session, which then must not hold the process.
      if (mountAt(mountpoint)) {
        try {
          await unmountPath(mountpoint);
        } catch (err) {
          if (handle && !destroyed) addon.unref(handle);
          throw err;
        }
      }
      await loopEnded;
    },
  };
}

export class NativeBinding implements Binding {
  readonly name = 'native';
  readonly knowsCaller = true;
  readonly hidesReleasedFiles = true;

  async mount(mountpoint: string, ops: FsOps, options: MountOptions): Promise<MountedFs> {
    const addon = loadNativeAddon();
    if (addon instanceof Error) throw addon;
    return serveSession(addon, mountpoint, (onClosed) => makeHandler(addon, ops, onClosed), options, !!ops.xattr);
  }
}
