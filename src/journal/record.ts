import { createRequire } from 'node:module';
import type * as Zod from 'zod';

/**
 * The journal record types: defined once, used by the writer (stage, recovery, gc), the reader
 * (log, show, diff, verify) and rollback. A record is one line in a segment file (see codec.ts).
 *
 * One mutation is one *operation*, identified by the `seq` of its `op` record. The `op` record is
 * the intent: written (reaching the journal file) before the change reaches the backend, with
 * the before-state of every path it touches. Later records refer to it with `of`:
 *   done     the change was applied; after-states of the same paths
 *   failed   the backend refused it; nothing changed
 *   capture  (write sessions) the before-image of the whole file, taken just before the first
 *            request that overwrote or cut existing bytes (a session that only appends needs none)
 *   range    (write sessions of files over journal.extentBytes) the old bytes of one aligned
 *            extent (or run of hole extents), taken before the first request that changed it
 *   end      (write sessions) the session ended (last close, or a mutation that splits it), or
 *            reached an fsync; after-state of the file. The file's session goes on past an
 *            fsync (what it kept stays kept): a `resume` record, written before its file
 *            changes again, reopens it, and its last `end` is the one that counts
 * An `op` without `done`/`failed`/`end` is pending: in flight, or cut short by a crash. The next
 * start of a writer resolves it against the backend (recovery.ts).
 *
 * Paths, per op (`paths[0]` is always the node whose existence or content the op changes):
 *   rename [from, to]; link [newPath, existing]; every other op [path].
 */

/** 2: range before-images (`range` records, `ranges` in a node state), which version 1 readers
 * refuse as records they do not understand rather than restore wrongly. */
export const RECORD_VERSION = 2;

export const MUTATION_OPS = [
  'create', 'write', 'truncate', 'unlink', 'mkdir', 'rmdir', 'rename', 'symlink', 'link',
  'mknod', 'chmod', 'chown', 'utimens', 'setxattr', 'removexattr',
] as const;
export type JournalOp = (typeof MUTATION_OPS)[number];

export const SHA256_HEX = /^[0-9a-f]{64}$/;
/** A before-image's reference: the sha256 of a blob in the spool, or one the backend kept itself
 * (REMOTE_BLOB_REF in remote.ts: a GCS server-side copy). */
export const BLOB_REF = /^(?:[0-9a-f]{64}|gcs-\d{1,20}-[0-9a-f]{16})$/;
/** The backend kept this before-image (a server-side copy): its bytes are not in the spool. */
export const keptByBackend = (ref: string): boolean => ref.startsWith('gcs-');

export const END_REASONS = ['close', 'fsync', 'split', 'recovered'] as const;
export const CONFLICT_REASONS = ['changed-remotely', 'upload-failed'] as const;
export const CLOSE_REASONS = ['roll', 'close', 'recovered'] as const;

/*
 * The schemas need zod: about 850 kB of JavaScript in 95 modules, a fifth of a CLI process's
 * start. Only a process that reads records pays it: zod is required, and the schemas built, on
 * the first record decoded (recordSchema()).
 */
function build(z: typeof Zod) {
  const decimal = z.string().regex(/^\d+$/);
  /** nanoseconds since the epoch: negative before 1970, beyond 64 bits past 2262 */
  const signedDecimal = z.string().regex(/^-?\d+$/);

  /** Old bytes of [offset, offset + length) of a file; no blob: they were a hole (zeros). */
  const RangeSchema = z.object({
    offset: z.number().int().nonnegative(),
    length: z.number().int().positive(),
    blob: z.string().regex(BLOB_REF).optional(),
  });

  /** A node as the journal remembers it. `null` (see State) means "no node at this path". */
  const NodeStateSchema = z.object({
    type: z.enum(['file', 'dir', 'symlink', 'fifo', 'socket', 'chardev', 'blockdev']),
    /** permission bits only (mode & 0o7777) */
    mode: z.number().int(),
    uid: z.number().int(),
    gid: z.number().int(),
    size: z.number().int().nonnegative(),
    /** nanoseconds since the epoch, as a decimal string (JSON has no 64-bit integers; negative before 1970) */
    mtimeNs: signedDecimal,
    /** recorded only where an undo needs it (utimens) */
    atimeNs: signedDecimal.optional(),
    ino: z.number().int(),
    nlink: z.number().int(),
    /** symlink text */
    target: z.string().optional(),
    /** a device node's number */
    rdev: z.number().int().optional(),
    /** the content's before-image, when it was kept (BLOB_REF) */
    blob: z.string().regex(BLOB_REF).optional(),
    /**
     * instead of `blob` (large files): the content of [rangesFrom, size) as its data extents; the
     * bytes of that span no range holds were a hole. Bytes below `rangesFrom` were not destroyed
     * (a truncate keeps only the tail it cut).
     */
    ranges: z.array(RangeSchema.required({ blob: true })).optional(),
    rangesFrom: z.number().int().nonnegative().optional(),
    /** sha256 of the content (files a write session left, up to journal.contentHashMaxBytes):
     * what rollback compares when the mtime differs but the size does not */
    sha256: z.string().regex(SHA256_HEX).optional(),
    /** a removed node's `user.*` extended attributes (name: base64 value); absent when it had none */
    xattrs: z.record(z.string(), z.string()).optional(),
  });
  const StateSchema = NodeStateSchema.nullable();

  const OpArgsSchema = z.object({
    mode: z.number().int().optional(),
    size: z.number().int().optional(),
    uid: z.number().int().optional(),
    gid: z.number().int().optional(),
    /** symlink text of a symlink op */
    target: z.string().optional(),
    /** mknod of a device: its number (the mode, with its S_IFMT bits, is in `mode`) */
    rdev: z.number().int().optional(),
    xattr: z.string().optional(),
    /** the xattr value before a setxattr/removexattr, base64; null if it was absent */
    xattrBefore: z.string().nullable().optional(),
  });

  const OpRecordSchema = z.object({
    kind: z.literal('op'),
    seq: z.number().int().positive(),
    /** milliseconds since the epoch */
    time: z.number(),
    session: z.string(),
    actor: z.string(),
    /** the calling process, when the binding tells us */
    pid: z.number().int().optional(),
    /** that process's command line at the time of the call (from /proc) */
    cmd: z.string().optional(),
    /** set on the mutations a rollback makes: the seq of the operation being undone */
    undoes: z.number().int().positive().optional(),
    op: z.enum(MUTATION_OPS),
    paths: z.array(z.string()).min(1).max(2),
    before: z.array(StateSchema),
    args: OpArgsSchema.optional(),
    /**
     * the mtimes of the directories whose entries this op changes, as they were before it; kept
     * at a session's first change of each directory (a rollback of the whole session puts them
     * back once it has restored their entries)
     */
    dirs: z.array(z.object({ path: z.string(), mtimeNs: signedDecimal })).optional(),
  });

  const DoneRecordSchema = z.object({
    kind: z.literal('done'),
    of: z.number().int().positive(),
    time: z.number(),
    after: z.array(StateSchema),
    /** resolved by recovery after a crash rather than observed */
    recovered: z.literal(true).optional(),
  });

  const FailedRecordSchema = z.object({
    kind: z.literal('failed'),
    of: z.number().int().positive(),
    time: z.number(),
    errno: z.string(),
    recovered: z.literal(true).optional(),
  });

  const CaptureRecordSchema = z.object({
    kind: z.literal('capture'),
    of: z.number().int().positive(),
    time: z.number(),
    blob: z.string().regex(BLOB_REF),
    /** bytes kept: the file size when the session began */
    size: z.number().int().nonnegative(),
  });

  const RangeRecordSchema = z.object({
    kind: z.literal('range'),
    of: z.number().int().positive(),
    time: z.number(),
    offset: z.number().int().nonnegative(),
    length: z.number().int().positive(),
    /** absent: these bytes were a hole (zeros) */
    blob: z.string().regex(BLOB_REF).optional(),
  });

  /** A write session that reached an fsync changes its file again (written before that change). */
  const ResumeRecordSchema = z.object({
    kind: z.literal('resume'),
    of: z.number().int().positive(),
    time: z.number(),
  });

  const EndRecordSchema = z.object({
    kind: z.literal('end'),
    of: z.number().int().positive(),
    time: z.number(),
    after: z.array(StateSchema),
    reason: z.enum(END_REASONS),
  });

  /**
   * A writer opened the journal (a mount started, or a rollback/gc ran on an unmounted workspace),
   * or gc dropped old records. `lastSeq` keeps the numbering going when gc dropped every operation.
   */
  const StartRecordSchema = z.object({
    kind: z.literal('start'),
    time: z.number(),
    session: z.string(),
    actor: z.string(),
    pid: z.number().int(),
    source: z.string(),
    version: z.number().int(),
    /** the last seq used so far */
    lastSeq: z.number().int().nonnegative().optional(),
    /** what recovery (or gc) found and did, if anything */
    note: z.string().optional(),
    /** a staged mount (mount --staged): its records describe an overlay, not the backend */
    staged: z.boolean().optional(),
  });

  /**
   * (GCS) A local version that did not reach the bucket: another writer changed the object since
   * it was read (the upload was refused, 412), or the upload failed at close(2), fsync or the last
   * close. The bytes are kept in `localFile`, in the conflict area of the state directory. `of`
   * names the write session (or operation) that made them, when the journal knows it.
   */
  const ConflictRecordSchema = z.object({
    kind: z.literal('conflict'),
    of: z.number().int().positive().optional(),
    time: z.number(),
    /** view path of the file */
    path: z.string(),
    reason: z.enum(CONFLICT_REASONS),
    /** the generation the local version was based on (0: a new object) */
    expectedGeneration: decimal,
    /** what the bucket had instead; absent: the object was deleted (or could not be looked up) */
    currentGeneration: decimal.optional(),
    localFile: z.string(),
    size: z.number().int().nonnegative(),
  });

  /**
   * Framing of a segment (since the journal's second format; older segments have neither, and are
   * read as before). `segment` is a segment's first record, `close` its last: written when the
   * writer rolls to the next segment (`roll`: the next one must exist), closes the journal
   * (`close`), or by the next start after a crash (`recovered`, with the bytes of torn record it
   * cut). `bytes` is where the close record begins, i.e. the length of everything before it: a
   * segment that ends without its close record, or whose close record disagrees with it, has lost
   * records, unless it is the one a writer was writing when it stopped (layout.ts `writing.json`).
   */
  const SegmentRecordSchema = z.object({
    kind: z.literal('segment'),
    index: z.number().int().positive(),
    time: z.number(),
  });

  const CloseRecordSchema = z.object({
    kind: z.literal('close'),
    index: z.number().int().positive(),
    time: z.number(),
    reason: z.enum(CLOSE_REASONS),
    bytes: z.number().int().nonnegative(),
    /** recovered: bytes of a torn last record the start cut */
    cut: z.number().int().nonnegative().optional(),
  });

  /**
   * A rollback's own progress, so that one cut short (SIGKILL, a daemon that died) is known as
   * such: the intent, written before its first change, lists the operations it will undo (newest
   * first); `restored` follows each undo once all its changes are made; `rollback-end` says how it
   * finished. Its undo mutations are ordinary `op` records of session `session`, tagged `undoes`.
   * Until `restored` names an operation, the undo mutations of it are partial work: the operation
   * still counts as not undone, and a re-run recognises that state as its own (rollback.ts).
   * Journals from before these records have undo mutations only; those count as complete.
   */
  const RollbackIntentRecordSchema = z.object({
    kind: z.literal('rollback-intent'),
    time: z.number(),
    session: z.string(),
    actor: z.string(),
    /** the selection, in words ("after #42, of session X") */
    target: z.string(),
    /** seqs to undo, in the order they will be undone */
    ops: z.array(z.number().int().positive()),
    force: z.literal(true).optional(),
  });

  const RestoredRecordSchema = z.object({
    kind: z.literal('restored'),
    /** the operation undone */
    of: z.number().int().positive(),
    time: z.number(),
    /** the rollback (its intent's session) that undid it */
    session: z.string(),
  });

  const RollbackEndRecordSchema = z.object({
    kind: z.literal('rollback-end'),
    time: z.number(),
    session: z.string(),
    restored: z.number().int().nonnegative(),
    /** every operation of the intent was undone */
    complete: z.boolean(),
  });

  /**
   * A named checkpoint (`ledgerfs tag NAME`): the journal's point when it was made, `at` (the last
   * seq then; 0: before any mutation). With `session`, the point is that session's last mutation
   * and the tag stands for that session: `rollback --to NAME` and `diff --from NAME` then select
   * only its mutations. Names are unique in a journal and never parse as a seq, a duration or a
   * time (what --to takes besides).
   */
  const TagRecordSchema = z.object({
    kind: z.literal('tag'),
    time: z.number(),
    name: z.string().min(1),
    at: z.number().int().nonnegative(),
    session: z.string().optional(),
    actor: z.string(),
  });

  const RecordSchema = z.discriminatedUnion('kind', [
    OpRecordSchema, DoneRecordSchema, FailedRecordSchema, CaptureRecordSchema, RangeRecordSchema, ResumeRecordSchema, EndRecordSchema, StartRecordSchema, ConflictRecordSchema,
    SegmentRecordSchema, CloseRecordSchema, RollbackIntentRecordSchema, RestoredRecordSchema, RollbackEndRecordSchema, TagRecordSchema,
  ]);

  return { RangeSchema, NodeStateSchema, StateSchema, OpArgsSchema, OpRecordSchema, DoneRecordSchema, FailedRecordSchema, CaptureRecordSchema, RangeRecordSchema, ResumeRecordSchema, EndRecordSchema, StartRecordSchema, ConflictRecordSchema, SegmentRecordSchema, CloseRecordSchema, RollbackIntentRecordSchema, RestoredRecordSchema, RollbackEndRecordSchema, TagRecordSchema, RecordSchema };
}

type Schemas = ReturnType<typeof build>;
let built: Schemas | undefined;
function schemas(): Schemas {
  return (built ??= build(createRequire(import.meta.url)('zod') as typeof Zod));
}

/** Every record kind (built on first use). */
export const recordSchema = (): Schemas['RecordSchema'] => schemas().RecordSchema;

export type Range = Zod.infer<Schemas['RangeSchema']>;
export type NodeState = Zod.infer<Schemas['NodeStateSchema']>;
export type State = NodeState | null;
export type OpArgs = Zod.infer<Schemas['OpArgsSchema']>;
export type OpRecord = Zod.infer<Schemas['OpRecordSchema']>;
export type DoneRecord = Zod.infer<Schemas['DoneRecordSchema']>;
export type FailedRecord = Zod.infer<Schemas['FailedRecordSchema']>;
export type CaptureRecord = Zod.infer<Schemas['CaptureRecordSchema']>;
export type RangeRecord = Zod.infer<Schemas['RangeRecordSchema']>;
export type ResumeRecord = Zod.infer<Schemas['ResumeRecordSchema']>;
export type EndRecord = Zod.infer<Schemas['EndRecordSchema']>;
export type StartRecord = Zod.infer<Schemas['StartRecordSchema']>;
export type ConflictRecord = Zod.infer<Schemas['ConflictRecordSchema']>;
export type SegmentRecord = Zod.infer<Schemas['SegmentRecordSchema']>;
export type CloseRecord = Zod.infer<Schemas['CloseRecordSchema']>;
export type RollbackIntentRecord = Zod.infer<Schemas['RollbackIntentRecordSchema']>;
export type RestoredRecord = Zod.infer<Schemas['RestoredRecordSchema']>;
export type RollbackEndRecord = Zod.infer<Schemas['RollbackEndRecordSchema']>;
export type TagRecord = Zod.infer<Schemas['TagRecordSchema']>;
export type JournalRecord = Zod.infer<Schemas['RecordSchema']>;
export type OutcomeRecord = DoneRecord | FailedRecord | EndRecord;
