import { type Attr, type FsStats, type TimeSpec, type Caller, UTIME_NOW, UTIME_OMIT } from '../core/index.js';

/**
 * The one interface between ledgerfs and a kernel binding. fuse-native implements it today; a
 * libfuse3 addon in native/ may replace it. Nothing above src/fuse/ knows which one runs.
 * Ops return promises and reject with VfsError; the binding turns rejections into errnos.
 * `caller` is filled when the binding knows who called (uid, gid, pid), else it is empty.
 */
export interface FsOps {
  getattr(caller: Caller, path: string): Promise<Attr>;
  /** optional: getattr for a LOOKUP, null for nothing there (ENOENT) instead of a rejection */
  lookup?(caller: Caller, path: string): Promise<Attr | null>;
  fgetattr(caller: Caller, path: string | null, fh: number): Promise<Attr>;
  access(caller: Caller, path: string, mode: number): Promise<void>;
  statfs(caller: Caller, path: string): Promise<FsStats>;
  readdir(caller: Caller, path: string): Promise<string[]>;
  /** readdir with each entry's attributes (null: not known), for bindings that can hand them to
   * the kernel with the listing (readdirplus) and spare it a lookup per entry */
  readdirPlus?(caller: Caller, path: string): Promise<DirEntryAttr[]>;
  readlink(caller: Caller, path: string): Promise<string>;

  open(caller: Caller, path: string, flags: number): Promise<number>;
  /** `made.attr`: set to the new file's attributes when the core read them after the create
   * (the journal does), for a reply that would otherwise fgetattr the handle */
  create(caller: Caller, path: string, mode: number, flags: number, made?: { attr?: Attr }): Promise<number>;
  read(caller: Caller, fh: number, buf: Buffer, length: number, position: number): Promise<number>;
  write(caller: Caller, fh: number, buf: Buffer, length: number, position: number): Promise<number>;
  flush(caller: Caller, fh: number): Promise<void>;
  /** whether close(2) of this new handle must wait for its flush; when false a binding that can
   * may tell the kernel not to send one (the handle's release does the closing work) */
  closeNeedsFlush?(fh: number): boolean;
  fsync(caller: Caller, fh: number, dataOnly: boolean): Promise<void>;
  release(caller: Caller, fh: number): Promise<void>;
  truncate(caller: Caller, path: string, size: number): Promise<void>;
  ftruncate(caller: Caller, fh: number, size: number): Promise<void>;

  /** fallocate(2) modes 0, KEEP_SIZE, PUNCH_HOLE|KEEP_SIZE (others: EOPNOTSUPP) */
  fallocate(caller: Caller, fh: number, mode: number, offset: number, length: number): Promise<void>;
  /** copy_file_range(2) between two open handles of this mount: the bytes copied */
  copyFileRange(caller: Caller, fhIn: number, offIn: number, fhOut: number, offOut: number, length: number, flags: number): Promise<number>;
  /** lseek(2) SEEK_DATA (3) / SEEK_HOLE (4): the offset found */
  lseek(caller: Caller, fh: number, offset: number, whence: number): Promise<number>;

  /*
   * mkdir, symlink, mknod, chmod, chown and utimens may resolve to the node's attributes as the
   * change left them (read right after it, by the journal): a binding that answers with
   * attributes uses them instead of a getattr of the same node. void: ask getattr.
   */
  mkdir(caller: Caller, path: string, mode: number): Promise<Attr | void>;
  rmdir(caller: Caller, path: string): Promise<void>;
  unlink(caller: Caller, path: string): Promise<void>;
  rename(caller: Caller, from: string, to: string): Promise<void>;
  symlink(caller: Caller, target: string, path: string): Promise<Attr | void>;
  link(caller: Caller, existing: string, newPath: string): Promise<void>;
  /** mknod(2): `mode` with its S_IFMT bits (a FIFO, socket, device node; or a regular file) */
  mknod(caller: Caller, path: string, mode: number, rdev: number): Promise<Attr | void>;
  chmod(caller: Caller, path: string, mode: number): Promise<Attr | void>;
  chown(caller: Caller, path: string, uid: number, gid: number): Promise<Attr | void>;
  utimens(caller: Caller, path: string, times: TimeSpec): Promise<Attr | void>;
  /** chmod, chown and utimens of a node unlinked while open, through its open handle `fh` */
  fchmod(caller: Caller, fh: number, mode: number): Promise<Attr | void>;
  fchown(caller: Caller, fh: number, uid: number, gid: number): Promise<Attr | void>;
  futimens(caller: Caller, fh: number, times: TimeSpec): Promise<Attr | void>;

  /** the store's inode numbers name its nodes for the life of the mount (hard links share
   * one): the binding may then give all names of an inode one kernel node */
  inodesNameNodes?: boolean;

  /** Present only when the filesystem stores xattrs; absent ops answer ENOSYS once and the
   * kernel stops asking (it otherwise asks for security.capability on every write). */
  xattr?: {
    get(caller: Caller, path: string, name: string): Promise<Buffer>;
    set(caller: Caller, path: string, name: string, value: Buffer, flags: number): Promise<void>;
    list(caller: Caller, path: string): Promise<string[]>;
    remove(caller: Caller, path: string, name: string): Promise<void>;
    /** the same on a node unlinked while open, through its open handle `fh` */
    fget(caller: Caller, fh: number, name: string): Promise<Buffer>;
    fset(caller: Caller, fh: number, name: string, value: Buffer, flags: number): Promise<void>;
    flist(caller: Caller, fh: number): Promise<string[]>;
    fremove(caller: Caller, fh: number, name: string): Promise<void>;
  };
}

export interface DirEntryAttr {
  name: string;
  attr: Attr | null;
}

export interface MountOptions {
  allowOther: boolean;
  attrTimeoutSec: number;
  entryTimeoutSec: number;
  negativeTimeoutSec: number;
  maxWriteBytes: number;
  /** native-ll only: microseconds to keep reading the session after the last answer (0: sleep at once) */
  busyPollMicros: number;
  fsName: string;
  debug: boolean;
}

export interface MountedFs {
  readonly mountpoint: string;
  unmount(): Promise<void>;
  /**
   * The store changed under these paths without a request (a staged mount's overlay applied or
   * dropped by its daemon): the kernel forgets the attributes and directory entries it cached
   * for them, so the next look asks. Resolves when the kernel has been told.
   */
  invalidate?(paths: string[]): Promise<void>;
  /** the kernel session's counters (native-ll); undefined once it ended */
  stats?(): BindingStats | undefined;
}

/** What native-ll counts as it serves (LEDGERFS_NATIVE_STATS prints the same at the end). */
export interface BindingStats {
  /** FUSE requests read */
  requests: number;
  /** times the JS thread was entered to serve them */
  wakeups: number;
  /** requests the busy-poll caught (no wake-up of the thread) */
  busyPollCaught: number;
  /** spins that caught a request */
  busyPollSpins: number;
  /** spins that ran out of their window */
  busyPollRanOut: number;
  /** spins given up because another task held the CPU */
  busyPollContended: number;
}

export interface Binding {
  readonly name: string;
  /** whether FsOps receive the caller's uid/gid/pid */
  readonly knowsCaller: boolean;
  /** whether its libfuse may rename a file the core has already released to .fuse_hidden*
   * (libfuse 3 answers RELEASE before it drops its open count); see VfsOptions */
  readonly hidesReleasedFiles: boolean;
  mount(mountpoint: string, ops: FsOps, options: MountOptions): Promise<MountedFs>;
}

/** One time of a utimens request as the core takes it: ns since the epoch, 'now', or unchanged. */
export function timeArg(sec: number, nsec: number): bigint | 'now' | undefined {
  if (nsec === UTIME_OMIT) return undefined;
  if (nsec === UTIME_NOW) return 'now';
  return BigInt(sec) * 1_000_000_000n + BigInt(nsec);
}
