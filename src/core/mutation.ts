import type { AllocateMode, Attr, BackendFile } from './backend.js';

/*
 * The words the mutation path shares: who called, what a mutation is, and the stage interface
 * through which the core (vfs) hands each mutation to policy and journal. The core calls
 * stages it is given; it never imports them.
 */

/**
 * The open-file state of a path as the stages see it (the core's OpenFile): the stages read
 * its backend file and keep its size current; `path` is null once it was unlinked while open.
 */
export interface OpenFileState {
  readonly path: string | null;
  readonly file: BackendFile;
  /** the file's size as the mutation path knows it; undefined = unknown (then fstat) */
  size: number | undefined;
  /** the policy's: where blocks fallocate KEEP_SIZE reserved past the size end (0: none), once known */
  reservedTo?: number | undefined;
}

/** Who asked, when the binding can tell us (fuse-native cannot; the native binding can). */
export interface Caller {
  uid?: number;
  gid?: number;
  pid?: number;
  /**
   * An operator action (e.g. a rollback run by the CLI), not the sandboxed program: stages
   * let it through their rules (policy: read-only roots, globs, suffixes, quotas) but still
   * keep their books (usage stays exact, the journal still records).
   */
  operator?: boolean;
}

export type MutationOp =
  | 'create' | 'write' | 'truncate' | 'unlink' | 'mkdir' | 'rmdir' | 'rename' | 'symlink' | 'link' | 'mknod'
  | 'chmod' | 'chown' | 'utimens' | 'setxattr' | 'removexattr';

/**
 * One mutation as the stages see it. `path` is the node changed; `target` is the second path of
 * rename/link (the new name) and the link text of symlink. Fields are filled as the op needs.
 */
export interface Mutation {
  op: MutationOp;
  path: string;
  target?: string;
  /** new size (truncate), or end offset of the write (write) */
  size?: number;
  /** bytes a write adds at `offset` */
  length?: number;
  /**
   * write: the bytes written (their first `length`), valid until the request is answered. The
   * journal hashes a file written in order from its start as the bytes pass, instead of reading
   * it back at its close.
   */
  data?: Buffer;
  offset?: number;
  /** create/mkdir/chmod: the new mode; mknod: with its S_IFMT bits */
  mode?: number;
  /** mknod of a device: its number */
  rdev?: number;
  uid?: number;
  gid?: number;
  xattr?: string;
  /**
   * For write and ftruncate through an open file: true on the first change since the path was
   * opened (the journal captures the before-image once per write session, not per request).
   */
  firstInSession?: boolean;
  /**
   * A write that is a fallocate through an open file (see AllocateMode), over [offset,
   * offset + length): 'allocate' may grow the size but keeps every byte, 'keep-size' changes
   * neither size nor bytes (only blocks), 'punch-hole' zeroes bytes and keeps the size.
   */
  allocate?: AllocateMode;
  /** create: O_TRUNC was given (an existing file loses its content) */
  truncate?: boolean;
  /** create: O_EXCL was given, so the create succeeds only where nothing was (else EEXIST) */
  exclusive?: boolean;
  /**
   * The open-file state of `path` when it is open: write and truncate through it; unlink,
   * rename (source) and link of an open file. Lets stages know sizes without a stat and
   * follow a file unlinked while open (its `path` is then null and `path` above is '').
   */
  file?: OpenFileState;
  /** rename: the open-file state of `target` when a file open there is replaced */
  targetFile?: OpenFileState;
  caller: Caller;
  /**
   * Set by a stage that read the node at `path` once the change was applied (the journal's
   * outcome): its attributes then, which the reply to the request can give without another
   * stat of the same node. Left unset when no stage read them.
   */
  after?: Attr;
}

/**
 * A stage wraps the application of a mutation: it may refuse (throw a VfsError) before calling
 * `apply`, record what it needs before and after, and must call `apply` at most once.
 * Policy and journal plug in here; the order is fixed by the Vfs: policy first, journal second,
 * so nothing refused is ever journaled and nothing unjournaled reaches the backend.
 */
export interface MutationStage {
  readonly name: string;
  run<T>(m: Mutation, apply: () => Promise<T>): Promise<T>;
  /**
   * A write session ended (fsync, or last close of a written file). `path` is where the file is
   * now, or null if it was unlinked while open. The data is already in the backend.
   */
  endWriteSession?(path: string | null, caller: Caller, reason: 'fsync' | 'close', file?: OpenFileState): Promise<void>;
  /**
   * Everything recorded so far must be durable: an fsync of workspace data is about to be
   * acknowledged (the journal's records reach the disk before the data they describe is
   * reported durable). endWriteSession(..., 'fsync') implies it.
   */
  durable?(): Promise<void>;
  /**
   * The last handle of an open-file state is being closed (its backend file still open).
   * `file.path` is null if the node was unlinked or replaced while open.
   */
  released?(file: OpenFileState): Promise<void>;
  /**
   * An existing file is being opened for writing (no mutation yet): a stage may refuse here,
   * as a read-only file system refuses the open rather than the first write.
   */
  openingForWrite?(path: string, caller: Caller): Promise<void>;
}
