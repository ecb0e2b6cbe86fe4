/**
 * The Backend interface: a dumb store of files, directories and symlinks addressed by
 * normalized absolute paths ("/", "/a/b"). Caching, retries, policy and journaling are layers
 * around it, never inside it. Every method rejects with a VfsError.
 */

export type NodeType = 'file' | 'dir' | 'symlink' | SpecialType;
/** FIFOs, sockets and device nodes (mknod): no content through the store, only a name and a mode */
export type SpecialType = 'fifo' | 'socket' | 'chardev' | 'blockdev';

// S_IFMT and the file types (sys/stat.h), as modes carry them
export const S_IFMT = 0o170000;
const FORMATS: Record<number, NodeType> = {
  0o100000: 'file', 0o040000: 'dir', 0o120000: 'symlink',
  0o010000: 'fifo', 0o140000: 'socket', 0o020000: 'chardev', 0o060000: 'blockdev',
};
/** The node type a mode's S_IFMT bits name (a mode without them is a regular file, as mknod(2) takes it). */
export function typeOfMode(mode: number): NodeType {
  return FORMATS[mode & S_IFMT] ?? 'file';
}
export function isSpecial(t: NodeType): t is SpecialType {
  return t === 'fifo' || t === 'socket' || t === 'chardev' || t === 'blockdev';
}

/** Node attributes. Times are nanoseconds since the epoch; `mode` includes the S_IFMT bits. */
export interface Attr {
  type: NodeType;
  mode: number;
  size: number;
  nlink: number;
  uid: number;
  gid: number;
  ino: number;
  blocks: number;
  atimeNs: bigint;
  mtimeNs: bigint;
  ctimeNs: bigint;
  /** device number of a character or block device node */
  rdev?: number;
}

export interface DirEntry {
  name: string;
  type: NodeType;
}

export interface FsStats {
  bsize: number;
  blocks: number;
  bfree: number;
  bavail: number;
  files: number;
  ffree: number;
  namemax: number;
}

/** Open intent, already decoded from O_* flags. */
export interface OpenMode {
  write: boolean;
  create?: boolean;
  exclusive?: boolean;
  truncate?: boolean;
  /**
   * A cache in front knows nothing is at the path and its parent is a directory: the store may
   * skip its own lookups before creating (it must still create only if absent).
   */
  knownAbsent?: boolean;
  /**
   * A read-only open: a cache in front knows (within its TTL) that the path is a file. The
   * store may skip what it asks only to tell a file from a directory; it still fetches the
   * file's current version.
   */
  knownFile?: boolean;
}

/** A file opened in the backend. Offsets are explicit: there is no shared file position. */
export interface BackendFile {
  read(buf: Buffer, length: number, position: number): Promise<number>;
  write(buf: Buffer, length: number, position: number): Promise<number>;
  truncate(size: number): Promise<void>;
  stat(): Promise<Attr>;
  /** Make written data durable. */
  sync(dataOnly: boolean): Promise<void>;
  close(): Promise<void>;
  /** Whether this handle can write (a read-only fallback open cannot). */
  readonly writable: boolean;
  /**
   * Optional: make written data durable before close(2) returns (the Vfs calls it on every
   * flush). A store that uploads at close (GCS) does its upload here, so an error reaches the
   * program's close(2) rather than the later release nobody waits for.
   */
  flush?(): Promise<void>;
  /**
   * Optional: bytes [position, position + length) handed to `onData` as they arrive, each piece
   * with its offset, in the store's own buffers: a read-ahead keeps them rather than copying
   * them into one buffer first. Resolves with the number of bytes delivered (fewer at the end).
   */
  readParts?(position: number, length: number, onData: (data: Buffer, at: number) => void): Promise<number>;
  /**
   * Optional: the identity of the immutable content this handle reads (e.g. object name and
   * generation), undefined while it has local changes. Content caches key on it.
   */
  readonly version?: string | undefined;
  /**
   * Optional: fallocate(2) in the store. Absent (or rejecting EOPNOTSUPP): the request answers
   * EOPNOTSUPP, and glibc's posix_fallocate then writes the range itself.
   */
  allocate?(mode: AllocateMode, offset: number, length: number): Promise<void>;
  /**
   * Optional: copy `length` bytes at `srcPos` of this file to `dst` at `dstPos` inside the
   * store, no data through the daemon; resolves the bytes copied (short only at this file's end).
   * Rejects EXDEV or EOPNOTSUPP when it cannot (another store, another file system): the
   * caller then copies by read and write.
   */
  copyRangeTo?(dst: BackendFile, srcPos: number, dstPos: number, length: number): Promise<number>;
  /**
   * Optional: lseek(2) SEEK_DATA / SEEK_HOLE from `offset` (ENXIO past the end). Absent: the
   * whole file is data (one hole, at its end).
   */
  seekData?(offset: number, what: 'data' | 'hole'): Promise<number>;
  /**
   * Optional (stores with allocate): where the blocks allocated to the file end, when that is
   * past its size: blocks fallocate KEEP_SIZE reserved beyond the end (the policy charges them).
   * Resolves at most about the size (its last block) when nothing is reserved past it.
   */
  allocatedEnd?(): Promise<number>;
  /**
   * Optional: attribute and xattr changes through the open file, for a file unlinked while open
   * (the kernel sends fchmod, fchown, futimens and the f*xattr calls by node, and such a node
   * has no path). Each answers as the path-based call on the store does.
   */
  chmod?(mode: number): Promise<Attr | void>;
  chown?(uid: number, gid: number): Promise<Attr | void>;
  utimens?(times: TimeSpec): Promise<Attr | void>;
  getxattr?(name: string): Promise<Buffer>;
  listxattr?(): Promise<string[]>;
  setxattr?(name: string, value: Buffer, flags: number): Promise<void>;
  removexattr?(name: string): Promise<void>;
}

/**
 * What a fallocate request does: reserve blocks and grow the size to cover the range (mode 0),
 * reserve blocks only (FALLOC_FL_KEEP_SIZE), or zero the range and free its blocks, the size
 * kept (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE).
 */
export type AllocateMode = 'allocate' | 'keep-size' | 'punch-hole';

// The kernel's numbers for them (linux/falloc.h, unistd.h), as FUSE passes them through.
export const FALLOC_FL_KEEP_SIZE = 0x01;
export const FALLOC_FL_PUNCH_HOLE = 0x02;
export const SEEK_DATA = 3;
export const SEEK_HOLE = 4;

/** utimensat(2)'s special nanosecond values (linux/stat.h), as the kernel passes them through libfuse */
export const UTIME_NOW = (1 << 30) - 1;
export const UTIME_OMIT = (1 << 30) - 2;

export interface TimeSpec {
  /** nanoseconds since epoch; 'now' for the current time; undefined leaves it unchanged */
  atimeNs?: bigint | 'now';
  mtimeNs?: bigint | 'now';
}

export interface BackendCapabilities {
  xattrs: boolean;
  hardLinks: boolean;
  symlinks: boolean;
  /** the store keeps owners (chown means something) */
  owners: boolean;
  /**
   * the store makes new nodes as a POSIX file system does: owned by the process that made them
   * (the daemon), the group of a setgid parent, and the setgid bit on directories made in one.
   * Where it does not, the core does it when it gives a node to its caller.
   */
  posixNewNodes: boolean;
  /**
   * Optional, for a store that is not posixNewNodes: the owner it gives a new node by itself.
   * A caller with exactly these ids (outside a setgid directory) then needs no chown after a
   * create or mkdir; on GCS that chown is a lookup and a metadata patch per new node.
   */
  newNodeOwner?: { uid: number; gid: number };
  /**
   * the store keeps a directory's mtime itself, moved by every change of its entries and set by
   * utimens (a local file system): the journal records it before a session's first change of
   * the entries, for a rollback to set back. Absent: derived (an object store's directories
   * have no mtime of their own unless a placeholder holds one).
   */
  dirTimes?: boolean;
}

/** What a cache in front knows before a rename (see OpenMode.knownAbsent). */
export interface RenameHint {
  /** nothing is at the destination and its parent is a directory: the store may skip its lookups */
  toKnownAbsent?: boolean;
}

/** What a cache in front knows before a mkdir (see OpenMode.knownAbsent). */
export interface MkdirHint {
  /** nothing is at the path and its parent is a directory: the store may skip its lookups */
  knownAbsent?: boolean;
}

/** A page of a tree listing (Backend.readdirTree). */
export interface TreePage {
  /** directory path -> its entries, for every directory the page holds completely */
  dirs: Map<string, Array<DirEntry & { attr?: Attr }>>;
  /** more below: pass it to get the next page */
  nextPageToken?: string;
  /** with nextPageToken: the path of the page's last object (directories sorting after it may be on the next page) */
  last?: string;
}

export interface Backend {
  readonly kind: string;
  /** Human-readable location for logs and errors. */
  readonly location: string;
  readonly capabilities: BackendCapabilities;

  stat(path: string): Promise<Attr>;
  /**
   * Optional: like stat, but null when nothing is at `path` (or a parent is not a directory)
   * instead of a rejection. Callers that expect absence (the journal, before every create)
   * save the cost of an exception.
   */
  tryStat?(path: string): Promise<Attr | null>;
  /**
   * Optional: stat, but null exactly where stat rejects with ENOENT (any other failure still
   * rejects, ENOTDIR included). The kernel looks up every name before creating it; the miss
   * then costs no exception on its way to the answer.
   */
  statOrNull?(path: string): Promise<Attr | null>;
  readdir(path: string): Promise<DirEntry[]>;
  /**
   * Optional: a listing with each entry's attributes, when the store gets them in the same
   * request (a GCS listing carries every object's metadata). Metadata caches fill from it, so
   * `ls -l` costs one listing rather than one lookup per entry. An entry without `attr` (a
   * file with local changes, say) must be stat()ed.
   */
  readdirPlus?(path: string): Promise<Array<DirEntry & { attr?: Attr }>>;
  /**
   * Optional: one page of everything below the directory `path` (a GCS listing without
   * delimiter), as the readdirPlus answers of the directories it holds completely. Metadata
   * caches fill from it, so a walk of a tree costs a page per many directories.
   */
  readdirTree?(path: string, pageToken?: string): Promise<TreePage>;
  readlink(path: string): Promise<string>;
  open(path: string, mode: OpenMode, createMode?: number): Promise<BackendFile>;
  /**
   * Resolves with the new directory's attributes when the store has them from the request that
   * made it (a cache in front keeps them: no lookup right after), else with nothing.
   */
  mkdir(path: string, mode: number, hint?: MkdirHint): Promise<Attr | void>;
  rmdir(path: string): Promise<void>;
  unlink(path: string): Promise<void>;
  /** POSIX rename: replaces a file, or an empty directory, at `to`. */
  rename(from: string, to: string, hint?: RenameHint): Promise<void>;
  symlink(target: string, path: string): Promise<void>;
  /**
   * Optional: make a FIFO, socket or device node (`mode` carries S_IFMT; `rdev` the device).
   * Absent: such nodes cannot be made here (EPERM, as a file system without them answers).
   */
  mknod?(path: string, mode: number, rdev: number): Promise<void>;
  link(existing: string, newPath: string): Promise<void>;
  /**
   * Optional: for a store that keeps a directory's mtime/ctime and link count in memory as its
   * entries change (GCS), what they are now for the directory `path`, or undefined when its
   * entries did not change through it. A cache in front moves its copy of the directory's
   * attributes to them instead of asking again.
   */
  dirChange?(path: string): { mtimeNs: bigint; nlink: number } | undefined;
  /**
   * chmod, chown and utimens resolve, as mkdir, with the node's new attributes when the store
   * has them from the request that changed it (a cache in front keeps them: the stat that
   * follows, as FUSE's setattr answers with attributes, asks nothing), else with nothing.
   */
  chmod(path: string, mode: number): Promise<Attr | void>;
  chown(path: string, uid: number, gid: number): Promise<Attr | void>;
  utimens(path: string, times: TimeSpec): Promise<Attr | void>;
  truncate(path: string, size: number): Promise<void>;
  statfs(path: string): Promise<FsStats>;

  getxattr?(path: string, name: string): Promise<Buffer>;
  setxattr?(path: string, name: string, value: Buffer, flags: number): Promise<void>;
  listxattr?(path: string): Promise<string[]>;
  removexattr?(path: string, name: string): Promise<void>;

  /**
   * Copy a file's content to a local file, as cheaply as the store allows (a reflink on a local
   * file system that has them). Optional: the journal keeps before-images with it and falls back
   * to reading through `open` when it is absent.
   */
  copyOut?(path: string, hostFile: string): Promise<void>;

  /**
   * Keep the current content of a file (exactly `size` bytes) as a before-image inside the
   * store itself, without its bytes passing through this host (GCS: a server-side copy into the
   * journal's reserved area); returns the journal's reference to it, or null when the store
   * cannot do that for this file now (e.g. it holds local changes the store has not got), and the
   * journal reads the bytes instead. Optional.
   */
  keepCopy?(path: string, size: number): Promise<string | null>;

  /**
   * Optional (GCS): the next change of each path is made only on the version given (a
   * `BackendFile.version`; null: nothing there), until the returned function is called: a
   * lookup that finds another refuses with ESTALE, and the request itself is conditional on it
   * (ifGenerationMatch), so a change made beside between a check and the write fails instead of
   * overwriting it. `ledgerfs apply` pins what a staged session first read.
   */
  expectVersions?(pins: ReadonlyMap<string, string | null>): () => void;

  /** Release resources (file descriptors, connections). */
  close(): Promise<void>;
}
