import path from 'node:path';
import { type Attr, type Caller, errnoOf, kernelErrno, type TimeSpec, VfsError, withoutSetid } from '../core/index.js';
import type { Binding, BindingStats, DirEntryAttr, FsOps, MountedFs, MountOptions } from './binding.js';
import { loadAddon, readTime, renameWithFlags, serveSession, writeAttr, writeStatfs } from './native-session.js';
import { NodeTable, type Node, type NodeIdentity } from './node-table.js';

/*
 * The low-level libfuse3 binding (native/ledgerfs_fuse3_ll.c, see native/README.md): requests
 * arrive by node id on the JS thread itself, with no libfuse thread in between. Node ids and
 * their paths live in NodeTable; every op below maps onto the path-based FsOps and ends in
 * exactly one addon.reply(id, code, payload). No closure, timer or reference per request.
 */

export const NATIVE_LL_ADDON = path.resolve(import.meta.dirname, '../../native/build/Release/ledgerfs_fuse3_ll.node');

type Handler = (
  id: number, op: number, uid: number, gid: number, pid: number, ino: number,
  a: number, b: number, c: number, name: string | null, name2: string | null, extra: Buffer | boolean | null,
) => void;

interface Addon {
  mount(mountpoint: string, handler: Handler, options: Record<string, unknown>, xattrs: boolean): object;
  destroy(handle: object): void;
  unref(handle: object): void;
  /** -1: the request was no longer waiting; else entries sent (readdir) or 0. An OPEN or
   * CREATE answer's payload is its open flags (OPEN_NOFLUSH). */
  reply(id: number, code: number, payload?: unknown, records?: ArrayBuffer): number;
  setScratch(buf: ArrayBuffer): void;
  /** the kernel forgets the node's cached attributes (0, or -errno: e.g. -ENOENT, not cached) */
  invalAttr(handle: object, ino: number): number;
  /** (ino, null) pairs drop a node's attributes, (parent, name) a directory entry; off the JS thread */
  invalidate(handle: object, items: Array<number | string | null>): Promise<number>;
  /** the session's counters (see BindingStats), undefined once it ended; absent in an older build */
  stats?(handle: object): number[] | undefined;
  libfuseVersion: string;
  /** its op codes' names, by code (LEDGERFS_OPS) */
  opNames: string[];
}

/* Scratch shared with the addon: one 128-byte record (mode uid gid size ino nlink blocks blksize
 * rdev as doubles, atime/mtime/ctime seconds as int64 at slots 9-11, nodeid at 12, generation at
 * 13, then the three times' nanoseconds as int32 at byte 112, NSEC_AT in the C file) for
 * entry/attr/statfs replies and setattr's new values; from byte 256, (nodeid, nlookup) pairs of
 * BATCH_FORGET. */
const RECORD = 128;
/** open reply flag: the kernel sends no FLUSH at close (FOPEN_NOFLUSH); OPEN_NOFLUSH in the C file */
const OPEN_NOFLUSH = 1;
/** the nanoseconds' int32 index in a record */
const NSEC = 112 / 4;
const FORGET_AT = 256;
const FORGET_CHUNK = 512;
const scratch = new ArrayBuffer(FORGET_AT + FORGET_CHUNK * 16);
const f64 = new Float64Array(scratch, 0, 16);
const i64 = new BigInt64Array(scratch, 0, 16);
const i32 = new Int32Array(scratch, 0, 32);
const forgets = new Float64Array(scratch, FORGET_AT, FORGET_CHUNK * 2);

let loaded: Addon | Error | undefined;
/** The addon, or why it cannot be used (not built: the install said so). */
export function loadNativeLlAddon(): Addon | Error {
  if (loaded === undefined) {
    const addon = loadAddon<Addon>(NATIVE_LL_ADDON, 'native-ll', scratch);
    const problem = addon instanceof Error ? null : opTableProblem(addon.opNames);
    loaded = problem ? new Error(problem) : addon;
  }
  return loaded;
}

// Op codes: the order of `enum op` in ledgerfs_fuse3_ll.c.
/**
 * The addon's op codes (LEDGERFS_OPS in native/ledgerfs_fuse3_ll.c). A const enum keeps the
 * dispatch switch on constants; OP_NAMES spells the same order, checked against the enum at
 * compile time (OpNamesInOrder) and against the addon's `opNames` when it loads.
 */
const enum Op {
  LOOKUP, FORGET, BATCH_FORGET, GETATTR, SETATTR, READLINK, MKDIR,
  UNLINK, RMDIR, SYMLINK, RENAME, LINK, OPEN, READ, WRITE, FLUSH,
  RELEASE, FSYNC, OPENDIR, READDIR, RELEASEDIR, STATFS, SETXATTR,
  GETXATTR, LISTXATTR, REMOVEXATTR, ACCESS, CREATE,
  FALLOCATE, COPY_FILE_RANGE, LSEEK, MKNOD,
}
export const OP_NAMES = [
  'LOOKUP', 'FORGET', 'BATCH_FORGET', 'GETATTR', 'SETATTR', 'READLINK', 'MKDIR',
  'UNLINK', 'RMDIR', 'SYMLINK', 'RENAME', 'LINK', 'OPEN', 'READ', 'WRITE', 'FLUSH',
  'RELEASE', 'FSYNC', 'OPENDIR', 'READDIR', 'RELEASEDIR', 'STATFS', 'SETXATTR',
  'GETXATTR', 'LISTXATTR', 'REMOVEXATTR', 'ACCESS', 'CREATE',
  'FALLOCATE', 'COPY_FILE_RANGE', 'LSEEK', 'MKNOD',
] as const;
/** The names whose code in Op is not their place in OP_NAMES (never, when the two agree). */
type OpsOutOfOrder = { [K in keyof typeof Op]: (typeof OP_NAMES)[(typeof Op)[K]] extends K ? never : K }[keyof typeof Op];
const opsInOrder: [OpsOutOfOrder] extends [never] ? true : OpsOutOfOrder = true;
void opsInOrder;

/** Why the addon's op table is not ours (an addon built from other sources), or null. */
export function opTableProblem(addonNames: readonly string[] | undefined): string | null {
  if (addonNames && addonNames.length === OP_NAMES.length && addonNames.every((n, i) => n === OP_NAMES[i])) return null;
  return `the native-ll addon's op table (${addonNames?.join(' ') ?? 'none'}) is not this build's (${OP_NAMES.join(' ')}); rebuild it: node scripts/build-native.mjs --force`;
}
const CLOSED = -1;

// FUSE_SET_ATTR_* (fuse_lowlevel.h)
const SET_MODE = 1 << 0;
const SET_UID = 1 << 1;
const SET_GID = 1 << 2;
const SET_SIZE = 1 << 3;
const SET_ATIME = 1 << 4;
const SET_MTIME = 1 << 5;
const SET_ATIME_NOW = 1 << 7;
const SET_MTIME_NOW = 1 << 8;
/** the kernel's FATTR_KILL_SUIDGID, which libfuse passes on under this name's bit */
const SET_KILL_SUIDGID = 1 << 11;
const KEEP_ID = 0xffffffff; // chown: (uid_t)-1 leaves it

const DONE = Promise.resolve();
const ENOENT = -errnoOf('ENOENT');
const EBADF = -errnoOf('EBADF');
const EIO = -errnoOf('EIO');

/** mode uid gid size ino nlink blocks blksize rdev, the 3 times, nodeid, generation; `o` in doubles */
function writeRecord(f: Float64Array, t: BigInt64Array, n: Int32Array, o: number, a: Attr, nodeid: number): void {
  writeAttr(f, o, t, o + 9, n, o * 2 + NSEC, a);
  f[o + 12] = nodeid; f[o + 13] = 0;
}

/* Readdirplus records for the entries a reply may hold; one growing buffer. */
const plusArea = (bytes: number) => {
  const buf = new ArrayBuffer(bytes);
  return { buf, f: new Float64Array(buf), t: new BigInt64Array(buf), n: new Int32Array(buf) };
};
let plus = plusArea(RECORD * 64);
function plusRecords(n: number): { buf: ArrayBuffer; f: Float64Array; t: BigInt64Array; n: Int32Array } {
  if (plus.buf.byteLength < n * RECORD) plus = plusArea(n * RECORD * 2);
  return plus;
}
/** the smallest readdirplus entry: fuse_entry_out (128) + fuse_dirent (24) + an 8-byte name */
const MIN_PLUS_ENTRY = 160;
/** the smallest readdir entry: fuse_dirent (24) + an 8-byte name */
const MIN_ENTRY = 32;

/** A directory handle: one listing, taken when the kernel reads from offset 0. */
interface DirHandle {
  ino: number;
  names: string[] | null;
  attrs: (Attr | null)[] | null;
}

/** the path of a node that must have one (else the request answers ENOENT) */
function need(p: string | null): string {
  if (p === null) throw gone();
  return p;
}
const gone = () => new VfsError('ENOENT', 'the node has no path any more (unlinked, or forgotten by the kernel)');

/** Remember the size and mtime an attribute reply gives the kernel for `node` (see `open`). */
function told(node: Node | undefined, a: Attr): void {
  if (node) { node.toldSize = a.size; node.toldMtimeNs = a.mtimeNs; node.toldMode = a.mode; }
}

function makeHandler(addon: Addon, ops: FsOps, onClosed: () => void, session: () => object | undefined, expose: (invalidate: (paths: string[]) => Promise<void>) => void): Handler {
  const reply = addon.reply;
  // hard links share one kernel node where the store's inode numbers name its nodes (local)
  const nodes = new NodeTable(ops.inodesNameNodes === true);
  /** MountedFs.invalidate: each path's node forgets its attributes, its parent the entry of its name */
  expose(async (paths) => {
    const handle = session();
    if (!handle) return;
    const items: Array<number | string | null> = [];
    for (const p of paths) {
      const node = nodes.find(p);
      if (node) {
        node.toldSize = undefined;
        node.toldMtimeNs = undefined;
        node.toldMode = undefined;
        items.push(node.id, null);
      }
      const slash = p.lastIndexOf('/');
      const parent = p === '/' ? undefined : nodes.find(slash === 0 ? '/' : p.slice(0, slash));
      if (parent) items.push(parent.id, p.slice(slash + 1));
    }
    if (items.length > 0) await addon.invalidate(handle, items);
  });
  const identity = (a: Attr): NodeIdentity => ({ ino: a.ino, nlink: a.nlink, dir: a.type === 'dir' });
  /** the node of each open file handle (release closes it there) */
  const fhNode = new Map<number, Node>();
  const dirs = new Map<number, DirHandle>();
  let nextDir = 1;
  const x = ops.xattr;

  /**
   * The open reply's flags for a new handle. FOPEN_NOFLUSH where close(2) need not wait for the
   * core: the kernel then sends no FLUSH at close (one round trip fewer per file a program
   * writes; mmap'd pages are still written at munmap), and the write session ends at release.
   */
  const openFlags = (fh: number): number => (ops.closeNeedsFlush?.(fh) === false ? OPEN_NOFLUSH : 0);

  /** answer an entry reply for `name` in `parent` with `attr`; the kernel holds one reference more */
  function entry(id: number, parent: number, name: string, attr: Attr, fh = -1): void {
    const node = nodes.ref(parent, name, 1, identity(attr));
    if (!node) return void reply(id, ENOENT);
    writeRecord(f64, i64, i32, 0, attr, node.id);
    told(node, attr);
    if (fh >= 0) {
      nodes.opened(node, fh);
      fhNode.set(fh, node);
    }
    if (reply(id, fh >= 0 ? fh : 0, fh >= 0 ? openFlags(fh) : undefined) < 0) {
      // the kernel is gone (unmounted meanwhile): nobody will forget or release these
      if (fh >= 0) void closeHandle(fh, {}).catch(() => undefined);
      nodes.forget(node.id, 1);
    }
  }
  function closeHandle(fh: number, c: Caller): Promise<void> {
    const node = fhNode.get(fh);
    if (node) {
      fhNode.delete(fh);
      nodes.closed(node, fh);
    }
    return ops.release(c, fh);
  }
  /** attributes by node: its path, else (unlinked while open) one of its open handles */
  function attrOf(c: Caller, ino: number, fh: number): Promise<Attr> {
    if (fh >= 0) return ops.fgetattr(c, nodes.path(ino), fh);
    const p = nodes.path(ino);
    if (p !== null) return ops.getattr(c, p);
    const open = orphanHandle(ino);
    if (open !== null) return ops.fgetattr(c, null, open);
    return Promise.reject(gone());
  }
  /** a node unlinked while open has no path: what is asked of it by node goes through one of its open files */
  function orphanHandle(ino: number): number | null {
    const open = nodes.get(ino)?.openHandles;
    return open?.length ? (open[open.length - 1] as number) : null;
  }

  /**
   * A new name of an inode the table knows is served by that inode's node (a hard link), but
   * only while the node's own name still leads to the inode: a rollback through the daemon (or a
   * change beside the mount) can free an inode number the store then gives to another file, and
   * the new name must not read the old node's file. One stat, only for inodes with nlink > 1 the
   * table has seen under another name.
   */
  async function checkAlias(c: Caller, parent: number, name: string, a: Attr): Promise<void> {
    if (a.type === 'dir' || a.nlink < 2) return;
    const same = nodes.nodeOfInode(a.ino);
    if (!same || (same.parent?.id === parent && same.name === name)) return;
    const p = nodes.path(same.id);
    const now = p === null ? null : await ops.getattr(c, p).catch(() => null);
    if (now?.ino !== a.ino) nodes.forgetInode(a.ino);
  }
  async function lookup(id: number, c: Caller, parent: number, name: string) {
    try {
      const p = need(nodes.childPath(parent, name));
      // most misses (every name before its create) answer without an exception
      const a = ops.lookup ? await ops.lookup(c, p) : await ops.getattr(c, p);
      if (a === null) return void reply(id, ENOENT);
      await checkAlias(c, parent, name, a);
      entry(id, parent, name, a);
    } catch (e) {
      reply(id, kernelErrno(e));
    }
  }
  async function getattr(id: number, c: Caller, ino: number, fh: number) {
    try {
      const a = await attrOf(c, ino, fh);
      writeRecord(f64, i64, i32, 0, a, ino);
      told(nodes.get(ino), a);
      reply(id, 0);
    } catch (e) {
      reply(id, kernelErrno(e));
    }
  }
  async function setattr(id: number, c: Caller, ino: number, valid: number, fh: number) {
    // the new values sit in the scratch only until the next request: read them first
    const mode = f64[0] as number, uid = f64[1] as number, gid = f64[2] as number, size = f64[3] as number;
    const atime = readTime(i64, 9, i32, NSEC), mtime = readTime(i64, 10, i32, NSEC + 1);
    try {
      const p = nodes.path(ino);
      const orphan = p === null ? orphanHandle(ino) : null;
      // the attributes the last change left, when the core read them after it (the journal does)
      let last: Attr | void = undefined;
      const chown = (valid & (SET_UID | SET_GID)) !== 0;
      const kill = (valid & SET_KILL_SUIDGID) !== 0 && !(valid & SET_MODE) && p !== null;
      if (kill && !chown) {
        const cleared = await clearSetid(c, p, await attrOf(c, ino, fh));
        if (cleared !== null) last = cleared;
      }
      if (valid & SET_MODE) last = orphan !== null ? await ops.fchmod(c, orphan, mode) : await ops.chmod(c, need(p), mode);
      if (chown) {
        const [u, g] = [valid & SET_UID ? uid : KEEP_ID, valid & SET_GID ? gid : KEEP_ID];
        last = orphan !== null ? await ops.fchown(c, orphan, u, g) : await ops.chown(c, need(p), u, g);
        // after the chown, which clears the bits itself on a Linux file system: its answer
        // (tar as root chowns every file) tells whether anything is left to clear, no stat first
        if (kill) {
          const cleared = await clearSetid(c, p, last ?? await attrOf(c, ino, fh));
          if (cleared !== null) last = cleared;
        }
      }
      // only a regular file's handle comes with a size change
      if (valid & SET_SIZE) last = void (await (fh >= 0 ? ops.ftruncate(c, fh, size) : ops.truncate(c, need(p), size)));
      if (valid & (SET_ATIME | SET_MTIME | SET_ATIME_NOW | SET_MTIME_NOW)) {
        const times: TimeSpec = {
          atimeNs: valid & SET_ATIME_NOW ? 'now' : valid & SET_ATIME ? atime : undefined,
          mtimeNs: valid & SET_MTIME_NOW ? 'now' : valid & SET_MTIME ? mtime : undefined,
        };
        last = orphan !== null ? await ops.futimens(c, orphan, times) : await ops.utimens(c, need(p), times);
      }
      // else by path (or a handle of the node when unlinked): a handle passed here may be a
      // directory's, which is not a core file handle
      const a = last ?? await attrOf(c, ino, -1);
      writeRecord(f64, i64, i32, 0, a, ino);
      told(nodes.get(ino), a);
      reply(id, 0);
    } catch (e) {
      reply(id, kernelErrno(e));
    }
  }
  /** mkdir, mknod (`rdev`), symlink (`other`: the target) or link (`other`: the existing path), then its entry */
  async function made(id: number, c: Caller, op: Op, parent: number, name: string, mode: number, other: string | null, rdev = 0) {
    try {
      const p = need(nodes.childPath(parent, name));
      // the new node's attributes, when the core read them after the change (the journal does)
      let made: Attr | void = undefined;
      if (op === Op.MKDIR) made = await ops.mkdir(c, p, mode);
      else if (op === Op.MKNOD) made = await ops.mknod(c, p, mode, rdev);
      else if (op === Op.SYMLINK) made = await ops.symlink(c, other as string, p);
      else await ops.link(c, other as string, p);
      const a = made ?? await ops.getattr(c, p);
      if (op === Op.LINK) await checkAlias(c, parent, name, a);
      entry(id, parent, name, a);
    } catch (e) {
      reply(id, kernelErrno(e));
    }
  }
  async function create(id: number, c: Caller, parent: number, name: string, mode: number, flags: number, kill: boolean) {
    let fh = -1;
    try {
      const p = need(nodes.childPath(parent, name));
      const made: { attr?: Attr } = {};
      fh = await ops.create(c, p, mode, flags, made);
      let a = made.attr ?? await ops.fgetattr(c, p, fh);
      // O_TRUNC without O_EXCL by a caller without CAP_FSETID: the name may have been a file
      // that another host made meanwhile, truncated now
      const cleared = kill ? await clearSetid(c, p, a) : null;
      if (cleared !== null) a = cleared ?? await ops.fgetattr(c, p, fh);
      entry(id, parent, name, a, fh);
    } catch (e) {
      if (fh >= 0) await ops.release(c, fh).catch(() => undefined);
      reply(id, kernelErrno(e));
    }
  }
  /*
   * Close-to-open across hosts: the open fetched the file's current version, but the kernel may
   * still hold the size of the one before (attrTimeoutSec) and cuts reads at it: another host's
   * longer file read as its new bytes up to the old length. So when the open's attributes differ
   * from the last ones the kernel was given for the node, the kernel forgets its attributes before
   * the open is answered, and asks again (a read past the cached size does). The reply never sets
   * keep_cache, so the kernel drops the node's pages at every open as well.
   */
  async function open(id: number, c: Caller, ino: number, flags: number, kill: boolean) {
    try {
      const p = need(nodes.path(ino));
      const fh = await ops.open(c, p, flags);
      // O_TRUNC by a caller without CAP_FSETID
      if (kill) await dropPriv(c, p, fh, ino);
      const node = nodes.get(ino);
      if (node) {
        nodes.opened(node, fh);
        fhNode.set(fh, node);
        if (node.toldSize !== undefined) {
          const a = await ops.fgetattr(c, p, fh).catch(() => null);
          const handle = session();
          if ((!a || a.size !== node.toldSize || a.mtimeNs !== node.toldMtimeNs) && handle) {
            node.toldSize = undefined;
            node.toldMtimeNs = undefined;
            node.toldMode = undefined;
            addon.invalAttr(handle, ino);
          }
        }
      }
      if (reply(id, fh, openFlags(fh)) < 0) await closeHandle(fh, c);
    } catch (e) {
      reply(id, kernelErrno(e));
    }
  }
  /** chmod `p` (attributes `a`) without setuid/setgid (withoutSetid): the chmod's outcome, or null
   * when there is nothing to clear */
  function clearSetid(c: Caller, p: string, a: Attr): Promise<Attr | void> | null {
    const mode = withoutSetid(a.mode);
    return mode === a.mode || a.type === 'dir' ? null : ops.chmod(c, p, mode);
  }
  /**
   * A write, truncating open or truncate by a caller without CAP_FSETID drops setuid/setgid
   * first (see withoutSetid). The kernel keeps the mode it cached: it forgets it here.
   */
  async function dropPriv(c: Caller, p: string | null, fh: number, ino: number): Promise<void> {
    if (p === null || (await clearSetid(c, p, await ops.fgetattr(c, p, fh))) === null) return;
    const node = nodes.get(ino);
    if (node) node.toldMode = undefined;
    const handle = session();
    if (handle) addon.invalAttr(handle, ino);
  }
  /** whether the file behind `fh` may be setuid/setgid: not when the kernel was told otherwise */
  function mayHoldPriv(fh: number): boolean {
    const told = fhNode.get(fh)?.toldMode;
    return told === undefined || withoutSetid(told) !== told;
  }
  /**
   * fallocate(2) and copy_file_range(2) into a setuid/setgid file: the kernel sends no flag with
   * them and, under killpriv v2, leaves the clearing to us; a caller other than root (who has
   * CAP_FSETID, as far as uids tell) drops the bits first, as should_remove_suid would.
   */
  function unprivileged(c: Caller, fh: number): Promise<void> {
    if (c.uid === 0 || !mayHoldPriv(fh)) return DONE;
    const node = fhNode.get(fh);
    return node ? dropPriv(c, nodes.path(node.id), fh, node.id) : DONE;
  }
  async function killThenWrite(id: number, c: Caller, fh: number, data: Buffer, length: number, position: number) {
    try {
      const node = fhNode.get(fh);
      if (node) await dropPriv(c, nodes.path(node.id), fh, node.id);
      reply(id, await ops.write(c, fh, data, length, position));
    } catch (e) {
      reply(id, kernelErrno(e));
    }
  }
  async function release(id: number, c: Caller, fh: number) {
    try { await closeHandle(fh, c); reply(id, 0); } catch (e) { reply(id, kernelErrno(e)); }
  }
  async function removed(id: number, c: Caller, parent: number, name: string, dir: boolean) {
    try {
      const p = need(nodes.childPath(parent, name));
      await (dir ? ops.rmdir(c, p) : ops.unlink(c, p));
      nodes.removed(parent, name);
      reply(id, 0);
    } catch (e) {
      reply(id, kernelErrno(e));
    }
  }
  async function rename(id: number, c: Caller, parent: number, name: string, newParent: number, newName: string, flags: number) {
    try {
      const rc = await renameWithFlags(ops, c, need(nodes.childPath(parent, name)), need(nodes.childPath(newParent, newName)), flags);
      if (rc === 0) nodes.moved(parent, name, newParent, newName);
      reply(id, rc);
    } catch (e) {
      reply(id, kernelErrno(e));
    }
  }
  function opendir(id: number, ino: number) {
    if (nodes.path(ino) === null) return void reply(id, ENOENT);
    const fh = nextDir;
    nextDir = nextDir >= 0x7fffffff ? 1 : nextDir + 1;
    dirs.set(fh, { ino, names: null, attrs: null });
    if (reply(id, fh) < 0) dirs.delete(fh);
  }
  async function readdir(id: number, c: Caller, fh: number, off: number, size: number, plus: boolean) {
    try {
      const d = dirs.get(fh);
      if (!d) return void reply(id, EBADF);
      // Every entry's attributes, plain readdir too: d_ino must be the inode stat shows (find,
      // du, rsync -H and git rely on it). The kernel asks readdirplus at offset 0 (then plain
      // readdir for the rest of a big directory), so the listing costs no more than before.
      if (off === 0 || !d.names || (!d.attrs && ops.readdirPlus)) {
        const p = need(nodes.path(d.ino));
        if (ops.readdirPlus) {
          const entries: DirEntryAttr[] = await ops.readdirPlus(c, p);
          d.names = entries.map((e) => e.name);
          d.attrs = entries.map((e) => e.attr);
        } else {
          d.names = await ops.readdir(c, p);
          d.attrs = null;
        }
      }
      if (!d.attrs) return void reply(id, 0, d.names);
      if (!plus) {
        // inode and type of the entries this reply may hold (nodeid 0: no lookup implied)
        const n = Math.min(d.names.length - off, Math.floor(size / MIN_ENTRY) + 1);
        const { buf, f, t, n: ns } = plusRecords(Math.max(n, 0));
        for (let k = 0; k < n; k++) {
          const a = d.attrs[off + k];
          if (a) writeRecord(f, t, ns, k * 16, a, 0);
          else f[k * 16] = 0;
        }
        return void reply(id, 0, d.names, buf);
      }
      // ids for the entries this reply may hold; each one sent is a lookup, the rest are dropped
      const n = Math.min(d.names.length - off, Math.floor(size / MIN_PLUS_ENTRY) + 1);
      const linked: Promise<void>[] = [];
      for (let k = 0; k < n; k++) {
        const a = d.attrs[off + k];
        const name = d.names[off + k] as string;
        if (a && a.nlink > 1 && name !== '.' && name !== '..') linked.push(checkAlias(c, d.ino, name, a));
      }
      if (linked.length) await Promise.all(linked);
      const { buf, f, t, n: ns } = plusRecords(Math.max(n, 0));
      const offered: (Node | undefined)[] = [];
      for (let k = 0; k < n; k++) {
        const name = d.names[off + k] as string;
        const a = d.attrs[off + k];
        // '.' and '..' carry their inode but no node: the kernel never looks them up from here
        const node = a && name !== '.' && name !== '..' ? nodes.ref(d.ino, name, 0, identity(a)) : undefined;
        offered.push(node);
        if (a) writeRecord(f, t, ns, k * 16, a, node ? node.id : 0);
        else f[k * 16] = 0;
      }
      const sent = reply(id, 0, d.names, buf);
      for (let k = 0; k < n; k++) {
        const node = offered[k];
        if (!node) continue;
        if (k < sent) {
          node.lookups++;
          told(node, d.attrs[off + k] as Attr);
        } else nodes.release(node);
      }
    } catch (e) {
      reply(id, kernelErrno(e));
    }
  }
  function forgetBatch(count: number) {
    for (let k = 0; k < count; k++) nodes.forget(forgets[2 * k] as number, forgets[2 * k + 1] as number);
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
  async function statfs(id: number, c: Caller, ino: number) {
    try { writeStatfs(f64, await ops.statfs(c, nodes.path(ino) ?? '/')); reply(id, 0); } catch (e) { reply(id, kernelErrno(e)); }
  }

  return (id, op, uid, gid, pid, ino, a, b, c, name, name2, extra) => {
    if (op === CLOSED) {
      // how many node ids the kernel still held (FORGET gives them back; see native-ll.test.ts)
      if (process.env.LEDGERFS_NATIVE_STATS) process.stderr.write(`native-ll: ${nodes.size} node ids known at unmount\n`);
      return onClosed();
    }
    if (op === Op.FORGET) return nodes.forget(ino, a);
    if (op === Op.BATCH_FORGET) return forgetBatch(a);
    const who: Caller = { uid, gid, pid };
    const nm = name as string;
    // `ops` may throw before returning a promise (an invalid path; `need` of a node without
    // one): answer that here.
    try {
      switch (op) {
        case Op.LOOKUP: return void lookup(id, who, ino, nm);
        case Op.GETATTR: return void getattr(id, who, ino, a);
        case Op.SETATTR: return void setattr(id, who, ino, a, b);
        case Op.READLINK: return void value(id, ops.readlink(who, need(nodes.path(ino))));
        case Op.MKDIR: return void made(id, who, Op.MKDIR, ino, nm, a, null);
        case Op.SYMLINK: return void made(id, who, Op.SYMLINK, ino, nm, 0, name2);
        // a: the mode (with S_IFMT), b: the device number
        case Op.MKNOD: return void made(id, who, Op.MKNOD, ino, nm, a, null, b);
        case Op.LINK: return void made(id, who, Op.LINK, a, nm, 0, need(nodes.path(ino)));
        case Op.UNLINK: return void removed(id, who, ino, nm, false);
        case Op.RMDIR: return void removed(id, who, ino, nm, true);
        case Op.RENAME: return void rename(id, who, ino, nm, a, name2 as string, b);
        // c (b for OPEN): the caller lacks CAP_FSETID and truncates, drop setuid/setgid
        case Op.CREATE: return void create(id, who, ino, nm, a, b, c !== 0);
        case Op.OPEN: return void open(id, who, ino, a, b !== 0);
        case Op.READ: return void num(id, ops.read(who, a, extra as Buffer, b, c));
        // f64[0]: the writer lacks CAP_FSETID, drop setuid/setgid first (read before any await)
        case Op.WRITE: return void (f64[0] && mayHoldPriv(a) ? killThenWrite(id, who, a, extra as Buffer, b, c) : num(id, ops.write(who, a, extra as Buffer, b, c)));
        case Op.FLUSH: return void done(id, ops.flush(who, a));
        case Op.FSYNC: return void done(id, ops.fsync(who, a, b !== 0));
        case Op.RELEASE: return void release(id, who, a);
        case Op.OPENDIR: return opendir(id, ino);
        // b: the entry index to start at, c: the reply's size, extra: readdirplus
        case Op.READDIR: return void readdir(id, who, a, b, c, extra === true);
        case Op.RELEASEDIR: dirs.delete(a); return void reply(id, 0);
        case Op.STATFS: return void statfs(id, who, ino);
        case Op.ACCESS: return void done(id, ops.access(who, need(nodes.path(ino)), a));
        // the mode is in the scratch (f64[0]); a: fh, b: offset, c: length
        case Op.FALLOCATE: {
          const mode = f64[0] as number;
          return void done(id, unprivileged(who, a).then(() => ops.fallocate(who, a, mode, b, c)));
        }
        // ino/a/b: the source node, fh, offset; c: length; the destination's fh, offset and the
        // flags are in the scratch (f64[1..3]), read before anything awaits
        case Op.COPY_FILE_RANGE: {
          const [fhOut, offOut, flags] = [f64[1] as number, f64[2] as number, f64[3] as number];
          return void num(id, unprivileged(who, fhOut).then(() => ops.copyFileRange(who, a, b, fhOut, offOut, c, flags)));
        }
        // a: fh, b: offset, c: whence (SEEK_DATA/SEEK_HOLE)
        case Op.LSEEK: return void num(id, ops.lseek(who, a, b, c));
        case Op.GETXATTR:
        case Op.SETXATTR:
        case Op.LISTXATTR:
        case Op.REMOVEXATTR: {
          if (!x) return void reply(id, EIO);
          const p = nodes.path(ino);
          const fh = p === null ? orphanHandle(ino) : null;
          if (op === Op.GETXATTR) return void value(id, fh !== null ? x.fget(who, fh, nm) : x.get(who, need(p), nm));
          if (op === Op.SETXATTR) return void done(id, fh !== null ? x.fset(who, fh, nm, extra as Buffer, a) : x.set(who, need(p), nm, extra as Buffer, a));
          if (op === Op.LISTXATTR) return void value(id, fh !== null ? x.flist(who, fh) : x.list(who, need(p)));
          return void done(id, fh !== null ? x.fremove(who, fh, nm) : x.remove(who, need(p), nm));
        }
        default: reply(id, EIO);
      }
    } catch (e) {
      reply(id, kernelErrno(e));
    }
  };
}

export class NativeLlBinding implements Binding {
  readonly name = 'native-ll';
  readonly knowsCaller = true;
  /** no .fuse_hidden renames: an unlinked open file is an UNLINK, its handles keep working */
  readonly hidesReleasedFiles = false;

  async mount(mountpoint: string, ops: FsOps, options: MountOptions): Promise<MountedFs> {
    const addon = loadNativeLlAddon();
    if (addon instanceof Error) throw addon;
    let invalidate: ((paths: string[]) => Promise<void>) | undefined;
    let sessionOf: () => object | undefined = () => undefined;
    const mounted = serveSession(addon, mountpoint, (onClosed, session) => {
      sessionOf = session;
      return makeHandler(addon, ops, onClosed, session, (fn) => (invalidate = fn));
    }, options, !!ops.xattr);
    const stats = (): BindingStats | undefined => {
      const h = sessionOf();
      const c = h && typeof addon.stats === 'function' ? addon.stats(h) : undefined;
      if (!c) return undefined;
      const [requests = 0, wakeups = 0, busyPollCaught = 0, busyPollSpins = 0, busyPollRanOut = 0, busyPollContended = 0] = c;
      return { requests, wakeups, busyPollCaught, busyPollSpins, busyPollRanOut, busyPollContended };
    };
    return {
      mountpoint: mounted.mountpoint,
      unmount: () => mounted.unmount(),
      stats,
      // an addon built before `invalidate` existed: the caller waits the kernel's caches out instead
      ...(typeof addon.invalidate === 'function' ? { invalidate: (paths: string[]) => invalidate?.(paths) ?? Promise.resolve() } : {}),
    };
  }
}
