import fs from 'node:fs';
import nodePath from 'node:path';
import { type AllocateMode, type Attr, type Backend, type BackendCapabilities, type BackendFile, checkPath, type DirEntry, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, fromNodeError, type FsStats, type NodeType, type OpenMode, SEEK_DATA, SEEK_HOLE, type TimeSpec, VfsError } from '../core/index.js';
import { loadBeneath, type Beneath } from './beneath.js';
import { fdOps, type FdOps } from './fd-ops.js';

const { O_RDONLY, O_RDWR, O_CREAT, O_EXCL, O_TRUNC, O_NOFOLLOW, O_DIRECTORY } = fs.constants;

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
  };
}

function typeOf(st: fs.BigIntStats | fs.Dirent): NodeType {
  if (st.isDirectory()) return 'dir';
  if (st.isSymbolicLink()) return 'symlink';
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

/** Wrap a sync fs call, converting Node errors to VfsErrors that keep their errno. */
function sys<T>(what: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw fromNodeError(err, what);
  }
}

class LocalFile implements BackendFile {
  /** copies off the JS thread that use this fd: close waits for them (the fd number could be
   * reused by the next open meanwhile) */
  private readonly copies = new Set<Promise<number>>();

  constructor(private fd: number, readonly writable: boolean, private readonly label: string) {}

  async read(buf: Buffer, length: number, position: number): Promise<number> {
    return sys(`read ${this.label}`, () => fs.readSync(this.fd, buf, 0, length, position));
  }

  async write(buf: Buffer, length: number, position: number): Promise<number> {
    if (!this.writable) throw new VfsError('EBADF', `${this.label} is open read-only in the backend`);
    return sys(`write ${this.label}`, () => fs.writeSync(this.fd, buf, 0, length, position));
  }

  async truncate(size: number): Promise<void> {
    sys(`truncate ${this.label}`, () => fs.ftruncateSync(this.fd, size));
  }

  async stat(): Promise<Attr> {
    return attrFromStats(sys(`fstat ${this.label}`, () => fs.fstatSync(this.fd, { bigint: true })));
  }

  async sync(dataOnly: boolean): Promise<void> {
    sys(`fsync ${this.label}`, () => (dataOnly ? fs.fdatasyncSync(this.fd) : fs.fsyncSync(this.fd)));
  }

  async close(): Promise<void> {
    while (this.copies.size) await Promise.allSettled([...this.copies]);
    const fd = this.fd;
    this.fd = -1;
    if (fd >= 0) sys(`close ${this.label}`, () => fs.closeSync(fd));
  }

  // fallocate, copy_file_range and SEEK_DATA/SEEK_HOLE go to the backing fd itself, so what the
  // disk does (blocks, holes, reflinks) is what the program gets.

  async allocate(mode: AllocateMode, offset: number, length: number): Promise<void> {
    const ops = needFdOps(`fallocate ${this.label}`);
    const flags = mode === 'allocate' ? 0 : mode === 'keep-size' ? FALLOC_FL_KEEP_SIZE : FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
    sys(`fallocate ${this.label}`, () => ops.fallocate(this.fd, flags, offset, length));
  }

  async copyRangeTo(dst: BackendFile, srcPos: number, dstPos: number, length: number): Promise<number> {
    if (!(dst instanceof LocalFile)) throw new VfsError('EXDEV', `copy ${this.label}: the destination is not in the local store`);
    const what = `copy ${this.label} to ${dst.label}`;
    const ops = needFdOps(what);
    const copy = sys(what, () => ops.copyFileRange(this.fd, srcPos, dst.fd, dstPos, length));
    this.copies.add(copy);
    dst.copies.add(copy);
    try {
      return await copy;
    } catch (err) {
      throw fromNodeError(err, what);
    } finally {
      this.copies.delete(copy);
      dst.copies.delete(copy);
    }
  }

  async seekData(offset: number, what: 'data' | 'hole'): Promise<number> {
    const ops = needFdOps(`lseek ${this.label}`);
    return sys(`lseek ${this.label}`, () => ops.seek(this.fd, offset, what === 'data' ? SEEK_DATA : SEEK_HOLE));
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

/**
 * The embedded default backend: a directory on the local file system. It never leaves its root:
 * paths are normalized (no '..'), the final component is never followed (O_NOFOLLOW, l*-calls),
 * and the parent of every path must resolve, symlink-free, to the same place under the root.
 */
export class LocalBackend implements Backend {
  readonly kind = 'local';
  readonly capabilities: BackendCapabilities = { xattrs: false, hardLinks: true, symlinks: true, owners: true, posixNewNodes: true };
  readonly location: string;
  private readonly root: string;
  /** openat2 beneath `rootFd` when the addon is built; else realpath checks by path */
  private readonly beneath: Beneath | null;
  private rootFd = -1;

  /** `beneath`: the openat2 helper; null keeps the realpath checks (what a machine without the addon runs) */
  constructor(rootDir: string, beneath: Beneath | null = loadBeneath()) {
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

  /** lstat through the verified parent; throws like lstat */
  private lstatNode(path: string): Attr | undefined {
    checkPath(path);
    if (!this.beneath) {
      const st = sys(`stat ${path}`, () => fs.lstatSync(this.host(path), { bigint: true, throwIfNoEntry: false }));
      return st === undefined ? undefined : attrFromStats(st);
    }
    const [parent, name] = LocalBackend.split(path);
    const r = this.beneath.lstat(this.rootFd, parent, name);
    if (typeof r !== 'number') return r;
    throw fromNodeError(this.nativeFailure(path, r), `stat ${path}`);
  }

  /** open(2) of the node without following it; throws a VfsError for the parent, else like openSync */
  private openNode(path: string, flags: number, mode?: number): number {
    if (!this.beneath) return fs.openSync(this.host(path), flags | O_NOFOLLOW, mode);
    checkPath(path);
    const [parent, name] = LocalBackend.split(path);
    const fd = this.beneath.open(this.rootFd, parent, name, flags, mode ?? 0o666);
    if (fd < 0) throw this.nativeFailure(path, fd);
    return fd;
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
        real = fs.realpathSync.native(parent);
      } catch (err) {
        throw fromNodeError(err, `resolve ${path}`);
      }
      if (real !== parent) {
        throw new VfsError('EACCES', `${path}: a parent directory is a symlink inside the backend; refusing to follow it`);
      }
    }
    return full;
  }

  async stat(path: string): Promise<Attr> {
    // a miss is the common answer (the kernel looks up every name before creating it): no
    // Node exception for it, whose message and stack cost more than the lstat
    const st = this.lstatNode(path);
    if (st === undefined) throw new VfsError('ENOENT', `stat ${path}: no such file or directory`);
    return st;
  }

  async tryStat(path: string): Promise<Attr | null> {
    // Absence needs no parent check: if nothing is there by the lexical path, a parent swapped
    // for a symlink could only hide a node from us, never expose one (and any change there is
    // refused by host() anyway). The journal asks this before every create. With openat2 a miss
    // is one call already and a hit would pay the quick lstat on top.
    if (path !== '/' && !this.beneath) {
      let quick: fs.Stats | undefined | null = null;
      try {
        quick = fs.lstatSync(this.root + checkPath(path), { throwIfNoEntry: false });
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
      const ents = sys(`readdir ${path}`, () => fs.readdirSync(`/proc/self/fd/${fd}`, { withFileTypes: true }));
      return ents.map((d) => ({ name: d.name, type: typeOf(d) }));
    } finally {
      fs.closeSync(fd);
    }
  }

  async readlink(path: string): Promise<string> {
    const p = this.host(path);
    return sys(`readlink ${path}`, () => fs.readlinkSync(p));
  }

  async open(path: string, mode: OpenMode, createMode = 0o644): Promise<BackendFile> {
    let flags = mode.write ? O_RDWR : O_RDONLY;
    if (mode.create) flags |= O_CREAT;
    if (mode.exclusive) flags |= O_EXCL;
    if (mode.truncate) flags |= O_TRUNC;
    try {
      return new LocalFile(this.openNode(path, flags, createMode), mode.write, path);
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      if (e.code === 'ELOOP') throw new VfsError('ELOOP', `${path} is a symlink; not following it`);
      throw fromNodeError(err, `open ${path}`);
    }
  }

  async mkdir(path: string, mode: number): Promise<void> {
    const p = this.host(path);
    sys(`mkdir ${path}`, () => fs.mkdirSync(p, { mode }));
  }

  async rmdir(path: string): Promise<void> {
    const p = this.host(path);
    sys(`rmdir ${path}`, () => fs.rmdirSync(p));
  }

  async unlink(path: string): Promise<void> {
    const p = this.host(path);
    sys(`unlink ${path}`, () => fs.unlinkSync(p));
  }

  async rename(from: string, to: string): Promise<void> {
    const a = this.host(from);
    const b = this.host(to);
    sys(`rename ${from} -> ${to}`, () => fs.renameSync(a, b));
  }

  async symlink(target: string, path: string): Promise<void> {
    const p = this.host(path);
    sys(`symlink ${path}`, () => fs.symlinkSync(target, p));
  }

  async link(existing: string, newPath: string): Promise<void> {
    const a = this.host(existing);
    const b = this.host(newPath);
    sys(`link ${existing} -> ${newPath}`, () => fs.linkSync(a, b));
  }

  async chmod(path: string, mode: number): Promise<void> {
    const p = this.host(path);
    const st = sys(`stat ${path}`, () => fs.lstatSync(p));
    // Linux cannot chmod a symlink itself, and following it could leave the root.
    if (st.isSymbolicLink()) throw new VfsError('EOPNOTSUPP', `${path} is a symlink; its mode cannot be changed`);
    sys(`chmod ${path}`, () => fs.chmodSync(p, mode & 0o7777));
  }

  async chown(path: string, uid: number, gid: number): Promise<void> {
    const p = this.host(path);
    sys(`chown ${path}`, () => fs.lchownSync(p, uid, gid));
  }

  async utimens(path: string, times: TimeSpec): Promise<void> {
    const p = this.host(path);
    if (times.atimeNs === undefined && times.mtimeNs === undefined) return;
    const cur = sys(`stat ${path}`, () => fs.lstatSync(p, { bigint: true }));
    const now = BigInt(Date.now()) * 1_000_000n;
    const pick = (t: bigint | 'now' | undefined, current: bigint) => (t === undefined ? current : t === 'now' ? now : t);
    const at = nsToSeconds(pick(times.atimeNs, cur.atimeNs));
    const mt = nsToSeconds(pick(times.mtimeNs, cur.mtimeNs));
    sys(`utimens ${path}`, () => fs.lutimesSync(p, at, mt));
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
    const p = this.host(path);
    // FICLONE: a copy-on-write clone where the file system offers one (btrfs, XFS), else a
    // kernel-side copy; off the event loop, since a big file takes a while.
    try {
      await fs.promises.copyFile(p, hostFile, fs.constants.COPYFILE_FICLONE | fs.constants.COPYFILE_EXCL);
    } catch (err) {
      throw fromNodeError(err, `copy ${path}`);
    }
  }

  async statfs(path: string): Promise<FsStats> {
    const p = this.host(path);
    // statfs follows a final symlink; do not report on whatever it points at
    if (sys(`stat ${path}`, () => fs.lstatSync(p)).isSymbolicLink()) throw new VfsError('ELOOP', `${path} is a symlink; not following it`);
    const s = sys(`statfs ${path}`, () => fs.statfsSync(p));
    return { bsize: s.bsize, blocks: s.blocks, bfree: s.bfree, bavail: s.bavail, files: s.files, ffree: s.ffree, namemax: 255 };
  }

  async close(): Promise<void> {
    const fd = this.rootFd;
    this.rootFd = -1;
    if (fd >= 0) fs.closeSync(fd);
  }
}
