import crypto from 'node:crypto';
import os from 'node:os';
import path from 'node:path';

/**
 * The one place defaults live. Everything else imports from here; CLI help texts print these
 * values so the documentation cannot drift from the behaviour.
 */
/** A duration a test may set through the environment (a positive number of ms), else `fallback`. */
function msFromEnv(name: string, fallback: number): number {
  const v = Number(process.env[name]);
  return Number.isFinite(v) && v > 0 ? v : fallback;
}

/** The GCS workspace's reserved area (journal mirror, rename intents), below its prefix. */
const GCS_RESERVED = '.ledgerfs';

export const DEFAULTS = {
  /** Kernel attribute/entry cache lifetimes, seconds. Every mutation passes through us, so the
   * kernel's cache is only stale for changes made beside the mount (in the source directory). */
  attrTimeoutSec: 1,
  entryTimeoutSec: 1,
  negativeTimeoutSec: 0,
  /** Which kernel binding `ledgerfs mount` uses (src/fuse/bindings.ts): `native-ll` is the
   * project's libfuse3 addon (native/, low-level API driven from the JS thread), `fuse-native`
   * the patched libfuse 2 module. native-ll is the default: it passes the whole mounted,
   * sandboxed and property suite and beat fuse-native on every line of scripts/bench
   * (2026-11-22, quiet run); fuse-native is the fallback when the addon was not built. The
   * high-level libfuse3 addon (`native`) was retired: native-ll was at or above it on every
   * bench line, and every op had to be kept in two C tables. */
  binding: 'native-ll' as BindingName,
  /** native-ll: after answering the last request in flight, keep reading the session without
   * sleeping for this many microseconds, while requests keep coming that quickly (see SPIN in
   * native/ledgerfs_fuse3_ll.c); 0 never does. A program that works one request at a time sends
   * the next some tens of microseconds after our answer wakes it; sleeping meanwhile makes each
   * request pay this thread's wake-up from an idle CPU. Measured on 2 vCPUs (2026-11-22, journal
   * on, tmpfs): a 3000-file stat loop 0.31 s -> 0.15 s, 2000 creates 1.2 s -> 0.74 s, git
   * add+commit of 3000 files 5.8 s -> 3.9 s; 50 us missed 6% of git's requests, 200 us 0.4%,
   * and an idle mount spins at most once per burst. A CPU held by another process ends the spin
   * for 100 ms (SPIN_BACKOFF_NS): a runnable spinner waits out the neighbour's slice (issue 17). */
  busyPollMicros: 200,
  /** the longest window --busy-poll takes (mountOptions() caps any value there): a burst's last
   * answer holds the JS thread this long when no request follows */
  busyPollMaxMicros: 10_000,
  /** Largest write request the kernel may send (needs big_writes on libfuse 2). */
  maxWriteBytes: 1024 * 1024,
  /** Most bytes one copy_file_range request copies (callers loop for the rest): the local store
   * copies on libuv's thread pool, but a read+write copy (GCS) runs on the JS thread. */
  copyRangeMaxBytes: 16 * 1024 * 1024,
  /** copy_file_range between stores that cannot copy themselves: read+write in pieces this big */
  copyBufferBytes: 1024 * 1024,
  logLevel: 'info' as const,
  /** Log bytes waiting to be written when the log goes to a pipe or socket nobody is reading (a
   * stalled supervisor): past this, further lines are dropped and counted, rather than the
   * daemon blocking on the write and every program on the mount with it (src/core/log.ts). */
  logPipeBufferBytes: 4 * 1024 * 1024,
  /** how long `ledgerfs unmount` waits, after the mount is gone, for the daemon to let go of its journal */
  unmountReleaseWaitMs: 30_000,
  /** at exit, the daemon waits for such a pipe to take the log lines still queued while it takes some at least this often */
  logFlushTimeoutMs: 1000,
  /** `ledgerfs state prune` without --older-than: state directories unused this long go */
  statePruneOlderThan: '30d',
  /** `mount --daemon`: how long the parent waits for the mount to answer stat before giving up */
  daemonReadyTimeoutSec: 60,
  /** how long one readiness stat of a mount (made by a child process) may take before it counts as no answer */
  readinessStatTimeoutMs: 10_000,
  fsName: 'ledgerfs',
  /** Where `ledgerfs mount` without --source puts its demo workspace. */
  demoWorkspaceDir: path.join(os.homedir(), '.ledgerfs', 'demo-workspace'),
  /** Seconds to wait for a busy mount to become free during shutdown before lazy-unmounting. */
  unmountGraceSec: 5,
  /** V8 flags the daemon sets before it serves (src/app/mount.ts; LEDGERFS_DAEMON_V8_FLAGS
   * replaces them, '' for none). A fresh daemon spends its first thousands of requests in
   * TurboFan: over 2000 creates its compiler threads took ~100 us per file (a third of the
   * daemon's CPU), most of it inlining big async functions (the journal's session end, the
   * pipeline's step) into their callers. Inlining only functions under 100 bytes of bytecode
   * (V8's default: 460) cut that by a third and the daemon's CPU over 2000 creates or a 2000-file
   * tar -x by 10-30%, with the warm cost per request unchanged within noise; disabling inlining
   * or TurboFan, or eager Sparkplug/feedback, did not pay (measured on a loaded 2-core machine; see the native-perf report on issue 7). */
  daemonV8Flags: '--max-inlined-bytecode-size=100',
  /** Per-process attribution (src/core/process-names.ts), when the binding tells us the caller's pid. */
  callers: {
    /** a pid's command line is read from /proc once and reused this long (pids get reused) */
    commandTtlMs: 2000,
    /** pids remembered at once; the map starts over when full */
    cacheSize: 512,
    /** a longer command line is cut here, with an ellipsis */
    commandMaxChars: 200,
  },
  /** unexpected failures of FUSE requests logged per second at most (src/fuse/failure-log.ts) */
  failureLogPerSecond: 10,
  /** `ledgerfs mount --metrics` with no port: Prometheus' registered port for ledgerfs-like exporters */
  metricsPort: 9464,
  /** --metrics request latency buckets, seconds: from a cached getattr (tens of µs) to a slow upload */
  metricsLatencyBuckets: [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10] as readonly number[],
  /** /healthz: the backend call that proves it reachable must answer within this */
  healthTimeoutMs: 2000,
  /** `ledgerfs run` (src/cli/run-command.ts, src/sandbox/bwrap.ts). */
  run: {
    /** where the program sees the workspace, and its working directory */
    at: '/workspace',
    /** the daemon's log level: the program's own stderr stays readable; `warn` shows each refusal */
    logLevel: 'error' as const,
    /** prefix of generated session ids */
    sessionPrefix: 'run-',
    /** actor label on the run's journal records */
    actor: 'run',
    /** `run --source DIR` hides what this preset hides unless --preset says otherwise: a program
     * handed a directory should not find the credentials lying in it */
    sourcePreset: 'sandboxed' as const,
    /** how long the daemon may take to mount before `run` gives up */
    mountTimeoutMs: 60_000,
    /** after letting go, how long past the daemon's own unmount grace before it is sent SIGTERM */
    daemonExitExtraSec: 10,
    /** a daemon whose `run` died looks for sandboxes still on its mount at these delays */
    orphanSweepMs: [100, 300, 1000, 3000],
    /** whom the program runs as (in its user namespace, without capabilities) when root started `run` and --uid/--gid do not say */
    rootUser: { uid: 1000, gid: 1000 },
    /** variables passed from the caller's environment into the sandbox (everything else is cleared) */
    passEnv: ['PATH', 'TERM', 'LANG', 'LANGUAGE', 'LC_ALL', 'LC_CTYPE', 'LC_MESSAGES', 'TZ', 'USER', 'LOGNAME'],
  },
  /** The local store's descriptors (src/backend/local.ts, fd-pool.ts, fd-limit.ts). */
  local: {
    /** Backing descriptors of open files held at once. Past this, the least recently used one
     * is closed and reopened by path on its next use (one openat2 + fstat), so thousands of
     * files held open by programs never exhaust the daemon. A file unlinked or renamed over
     * while open cannot be reopened and keeps its descriptor (pinned) until its last close. */
    backingFdsMax: 4096,
    /** the pool never holds fewer than this (when the open-file limit is tiny: half of it) */
    backingFdsMin: 64,
    /** descriptors always left below the daemon's open-file limit for everything else it opens
     * (journal segments and blobs, /dev/fuse, directory listings, the control socket, /proc) */
    fdHeadroom: 256,
    /** pinned descriptors may fill at most this share of the pool: past it, an unlink or
     * rename over a file open through the mount fails with EMFILE (its caller's problem), and
     * the rest of the pool keeps serving everyone else's open files */
    pinnedShare: 0.75,
    /** a request refused for want of a descriptor is logged (warn) at most this often; the line
     * counts the refusals since the last one */
    fdExhaustedLogIntervalMs: 10_000,
  },
  /** Where live mounts note their state directory, binding and pid (`ledgerfs status`, and the
   * refusal of a second mount of one source); entries are checked against the mount table. */
  mountRegistryDir: process.env.XDG_RUNTIME_DIR
    ? path.join(process.env.XDG_RUNTIME_DIR, 'ledgerfs', 'mounts')
    : process.getuid?.() === 0 ? '/run/ledgerfs/mounts' : path.join(os.tmpdir(), `ledgerfs-${process.getuid?.() ?? 'user'}`, 'mounts'),
  /** a session's counts against its `limits:` are written to its state directory this often
   * when they changed (and at unmount): a remount of the session goes on from them */
  limitCountsSaveMs: 250,
  /** The journal (src/journal). */
  journal: {
    /** directories recovery reconciles at once after a crash (a stat is one request each on an
     * object store) */
    reconcileStatConcurrency: 16,
    /** files of one directory from which recovery reads its listing first */
    reconcileListFrom: 4,
    /** `ledgerfs log --follow` looks at the journal this often */
    followPollMs: 200,
    /** base of default state directories: $XDG_STATE_HOME/ledgerfs, else ~/.local/state/ledgerfs */
    stateHome: path.join(process.env.XDG_STATE_HOME || path.join(os.homedir(), '.local', 'state'), 'ledgerfs'),
    /** paths whose last ended write session is remembered (a conflict found at a later close
     * is tied to it) */
    endedSessionsKept: 256,
    /** roll to a new segment file at this size */
    segmentBytes: 64 * 1024 * 1024,
    /** a mount file's `journal:` retention (maxBytes, keep) is checked this often, and first
     * this long after the mount starts */
    retentionIntervalMs: 10 * 60_000,
    /** (LEDGERFS_RETENTION_FIRST_MS shortens it for a test, which need not wait 30 s to see the first run) */
    retentionFirstMs: msFromEnv('LEDGERFS_RETENTION_FIRST_MS', 30_000),
    /** the state directory's file system is low on space (a warning in the log and in
     * /.ledgerfs/usage) below either of these */
    lowSpaceFraction: 0.05,
    lowSpaceBytes: 256 * 1024 * 1024,
    /** how often the mount looks at the state directory's free space */
    spaceCheckMs: 30_000,
    /** group commit: the journal is fsynced at most this long after a record (and always before
     * an fsync of workspace data is acknowledged). Each fsync also forces a commit of the file
     * system's own journal; every 50 ms that cost small-file creates measurably here, and ext4
     * commits the workspace's metadata only every 5 s anyway. */
    syncIntervalMs: 1000,
    /** outcome records wait at most this long for the next intent to share its write(2) */
    flushDelayMs: 5,
    /** a write session's end records the sha256 of files up to this size, so rollback can tell
     * a file whose mtime alone changed (touch) from one whose content did; larger files are
     * judged by size and mtime */
    contentHashMaxBytes: 8 * 1024 * 1024,
    /** before-images of files larger than this are kept as aligned extents of this size: the
     * first change to an extent in a write session keeps that extent's old bytes, once (smaller
     * files are kept whole: one blob is cheaper than a record per extent). Measured (issue 17,
     * 200 one-row UPDATEs of a 100 MB SQLite database): 64 KiB kept 76 KB per transaction,
     * 256 KiB 213 KB (the bar is 256 KiB); the time per transaction was within the noise */
    extentBytes: 64 * 1024,
    /** actor label of a mount's records, and of a rollback's */
    mountActor: 'mount',
    rollbackActor: 'rollback',
    /** GCS: what the spool sends to the bucket is gathered this long, then uploaded as one part
     * (the local spool stays the durability point; this only bounds how stale the bucket is) */
    mirrorIntervalMs: 1000,
    /** GCS: at unmount, how long to wait for the bucket to take the rest of the spool (below
     * run.daemonExitExtraSec, so the daemon says what it left before `run` signals it again;
     * LEDGERFS_MIRROR_DRAIN_TIMEOUT_MS shortens it for a test that unmounts with the bucket down) */
    mirrorDrainTimeoutMs: msFromEnv('LEDGERFS_MIRROR_DRAIN_TIMEOUT_MS', 8_000),
    /** GCS: after a failed upload the mirror tries again after this (doubling up to 30 s) */
    mirrorRetryMs: 1000,
    /** GCS: the longest wait between retries of a failed upload */
    mirrorRetryMaxMs: 30_000,
    /** GCS: blob mtimes and an upload pass's start come from one clock; this covers coarse file timestamps */
    mirrorBlobClockSlackMs: 2000,
  },
  /** GCS backend (src/backend/gcs.ts); every value can be overridden in the policy's `backend`. */
  gcs: {
    /** directories exist by their common prefix too, not only by a `dir/` placeholder */
    implicitDirs: true,
    /** staged files above this size upload resumably, in chunks of uploadChunkBytes */
    resumableThresholdBytes: 8 * 1024 * 1024,
    /** resumable chunk size; GCS wants a multiple of 256 KiB */
    uploadChunkBytes: 8 * 1024 * 1024,
    /** where writes stage before upload (and where conflicting local versions are kept) */
    stagingDir: path.join(os.tmpdir(), 'ledgerfs-staging'),
    /** emptied staging files kept open for the next handles that write (gcs/staging-files.ts):
     * a new file per handle made ext4 scan past every inode freed in the last seconds */
    stagingFilesKept: 32,
    /** generations this mount unlinked, remembered so a version based on one that comes late is dropped (not a conflict); by name, oldest forgotten first */
    deletedGenerationsKept: 4096,
    /** a staging file larger than this is removed on the thread pool, not emptied for reuse on
     * the event loop: freeing its blocks (ftruncate) is disk work every request would wait for */
    stagingReuseMaxBytes: 1024 * 1024,
    /** attempts per request, including the first; backoff doubles from initial to max */
    retryAttempts: 6,
    retryInitialDelayMs: 100,
    retryMaxDelayMs: 10_000,
    /**
     * the least wait before retrying a 429: GCS's per-object limits (about one write, and one
     * metadata update, per second to one name) refill in a second, so backing off from 100 ms
     * only spends attempts (a close that follows its file's create by milliseconds used 4 of 6)
     */
    rateLimitRetryDelayMs: 1_000,
    /** give up retrying a request after this long in total */
    retryTotalTimeoutMs: 120_000,
    /** a request with no answer for this long is abandoned (and retried) */
    requestTimeoutMs: 60_000,
    /**
     * the mount's first look at the bucket gives up after this long: an endpoint that takes the
     * connection and never answers is then a sentence, within `mount --daemon`'s 60 s wait, not
     * that wait's "did not answer" after a request timeout of 60 s and its retries (2 min);
     * LEDGERFS_GCS_SETUP_TIMEOUT_MS shortens it for a test
     */
    setupTimeoutMs: msFromEnv('LEDGERFS_GCS_SETUP_TIMEOUT_MS', 30_000),
    /** permission bits for objects and prefixes that carry none in their metadata */
    fileMode: 0o644,
    dirMode: 0o755,
    /** objects copied at once by a directory rename */
    renameConcurrency: 8,
    /** directory placeholders whose last known generation the backend remembers from its own
     * mkdir and patch answers, so a chmod/chown/utimens of a directory it just made or changed
     * (tar's fix-ups) patches without a lookup first; preconditions catch a stale one (as many
     * files' last patch answers are kept the same way: git's freshen of an object it has) */
    placeholderHints: 4096,
    /** keep-alive sockets the direct JSON API requests (small uploads) may hold open to the endpoint */
    jsonApiMaxSockets: 64,
    /** close(2) returns once the version is in the bucket ('bucket'), or durable in the state
     * directory's upload spool with uploads in the background ('journal'; --durability) */
    durability: 'bucket' as 'bucket' | 'journal',
    /** durability journal: background uploads in flight at once (not tuned yet: 2 and 16 measured the same on a 2-core host with the emulator beside it) */
    uploadConcurrency: 16,
    /** durability journal: a failed background upload is tried again after this, doubling up to the max */
    uploadRetryMs: 1000,
    uploadRetryMaxMs: 30_000,
    /** durability journal: versions up to this size are written into the spool's log itself (one
     * fdatasync per close); bigger ones get a data file of their own (src/backend/gcs/spool-log.ts) */
    spoolInlineBytes: 1024 * 1024,
    /** durability journal: a spool log segment is closed past this size (removed whole once its versions landed) */
    spoolSegmentBytes: 16 * 1024 * 1024,
    /** durability journal: the log is written with zeros this far ahead of its end, so a close's
     * fdatasync rewrites blocks the file already has and waits for no file-system journal commit
     * (a size change made each one wait for ext4's commit of everything else on the disk) */
    spoolZeroAheadBytes: 1024 * 1024,
    /** durability journal: queued versions' bytes kept in memory for their upload, at most (past it they are read back from the spool) */
    spoolMemoryBytes: 64 * 1024 * 1024,
    /** durability journal: a new file's create waits this long in the spool for its close's version to replace it before it is uploaded alone (a file held open) */
    spoolHoldMs: 2000,
    /** durability journal: a closed version waits this long before its upload starts (unless something waits for it), so a
     * rename, chmod or utimens right after the close (git's objects: close, then rename into place) is taken into the queue
     * instead of waiting for the upload and copying it after */
    uploadDelayMs: 300,
    /** name, below the workspace prefix, of the reserved area holding the journal's mirror
     * (journal/<writer>/..., blobs/..) and rename intents: the view never shows it, and refuses to make it */
    reservedName: GCS_RESERVED,
    /** where a directory rename's intent object lives while it runs, below the workspace prefix
     * (src/backend/gcs/rename-intent.ts), inside the reserved area */
    renameIntentsPrefix: `${GCS_RESERVED}/intents/`,
    /** an intent written by another host is taken as abandoned (and finished by whoever opens
     * the workspace next) when it is older than this; on this host a dead pid decides */
    renameIntentLeaseSec: 900,
    /** the owner renews its lease this often (a fraction of the lease) ... */
    renameIntentRenewFraction: 1 / 3,
    /** ... and copies on only while its last renewal is younger than this fraction of it, so an
     * owner that cannot renew stops before another host may take the rename over */
    renameIntentHeldFraction: 2 / 3,
  },
  /** Cache layers around the GCS backend (src/backend/layers); the policy's `backend.cache` overrides. */
  gcsCache: {
    /** attributes, "nothing here" answers and listings are trusted this long; a change made by
     * another host shows up after at most this (opens always revalidate the generation) */
    metadataTtlSec: 5,
    /** cached paths (attributes) at most */
    metadataMaxEntries: 500_000,
    /** cached directory listings at most */
    metadataMaxListings: 8_000,
    /** lookups that miss in one directory within the TTL before the directory is listed instead
     * (git's lstat of every file of a tree whose listing expired: a listing per directory, not
     * a lookup per file) ... */
    relistAfterMisses: 3,
    /** ... or at the first miss when it had at most this many (git's objects/xx: a listing of a
     * dozen names costs the client about what one lookup's two requests do, measured against the
     * emulator: 0.56 ms of CPU against 0.42; 100 names cost 1.6 ms) ... */
    relistFirstMissMaxEntries: 32,
    /** ... when its last listing had at most this many entries (a large one is never listed for
     * a stat; one never listed is not either) */
    relistMaxEntries: 2000,
    /** tree walks (one page of the flat listing below a directory at a time) remembered at once */
    metadataMaxWalks: 64,
    /** sequential reads fetch ahead: first window, doubling up to the maximum */
    readAheadMinBytes: 1024 * 1024,
    readAheadMaxBytes: 16 * 1024 * 1024,
    /** windows fetched ahead of the reader at once (one alone leaves gaps between requests) */
    readAheadWindows: 2,
    /** local disk cache of whole objects, keyed by generation, LRU beyond this many bytes */
    contentBytes: 1024 ** 3,
    /** objects larger than this are not kept in the content cache */
    contentMaxObjectBytes: 256 * 1024 ** 2,
    /** the copies of uploads that land within this many milliseconds are written to the content
     * cache in one thread-pool job (a job per file was a wake-up of a pool thread and of the
     * event loop per small file: most of a busy host's cost of keeping it) */
    contentCopyBatchMs: 5,
    /** ... and a batch is written at once past this many bytes or files */
    contentCopyBatchMaxBytes: 8 * 1024 * 1024,
    contentCopyBatchMaxFiles: 256,
    /** the latest copies of uploads are kept in memory up to this many bytes, and go to the disk
     * only when newer ones push them out (a file created per small upload was 3 s of a journal-
     * mode tar -x's daemon CPU for 3,000 files, measured) */
    contentMemoryBytes: 32 * 1024 * 1024,
    /** a per-process directory is made under it (and removed at unmount) */
    contentDir: path.join(os.tmpdir(), 'ledgerfs-cache'),
  },
} as const;

/** Policy defaults (src/policy, src/config/load.ts). */
export const POLICY_DEFAULTS = {
  /** A root without `mode` (and no preset or `defaults.mode` giving one) is read-only: writes
   * are granted explicitly, never by omission. */
  rootMode: 'ro' as const,
  /** Latest refusals kept for /.ledgerfs/denials (older ones are only in the log). */
  denialRingSize: 100,
  /** Block size statfs reports for roots with a byte quota (df divides the quota by it). */
  statfsBlockSize: 4096,
  /** Blocks fallocate --keep-size reserved past a file's end are charged when they reach past
   * the block (of this size) holding its last byte: a file costs its size, or the end of such a
   * reservation if that is further (src/policy/usage.ts chargeOf). */
  reservationBlockBytes: 4096,
  /** The read-only virtual directory that explains the policy inside the view. */
  metaDir: '/.ledgerfs',
  /** Directories whose hidden subdirectories the view remembers it counted (a directory's
   * link count leaves them out; src/policy/view.ts visibleLinks), oldest forgotten first. */
  hiddenLinkCacheEntries: 4096,
  /** A directory a program removes while it still holds names the policy hides is kept, with
   * them, under `<this><n>.<its name>` beside it (hidden in every view, whatever the policy),
   * and comes back when its name is made again (src/policy/view.ts): the program never learns
   * that hidden names were there, and nothing hidden is deleted. */
  keptPrefix: '.ledgerfs-kept.',
  /**
   * What a program under a policy may do that only an operator should, unless the mount file's
   * `privileges` grants it: set setuid/setgid bits (S_ISUID; S_ISGID on a file), give a node to
   * another user or group, make device nodes. Refused with EPERM and a denial line.
   */
  privileges: { setid: false, chown: false, devices: false } as Privileges,
  /**
   * The same for a workspace without a mount file (`--source DIR`: the operator's own
   * directory, used as a local disk, where the kernel's checks on who may chown or set setuid
   * apply as usual): only device nodes are refused, since they would appear in the host
   * directory.
   */
  sourcePrivileges: { setid: true, chown: true, devices: false } as Privileges,
} as const;

/** Privileged changes a policy may grant (see POLICY_DEFAULTS.privileges). */
export interface Privileges {
  setid: boolean;
  chown: boolean;
  devices: boolean;
}

/** Names that hold credentials in common tools; hidden by the `sandboxed` and `readonly` presets. */
export const SECRET_GLOBS: readonly string[] = [
  '**/.env', '**/.env.*', '**/*.pem', '**/*.key', '**/id_rsa*', '**/id_ecdsa*', '**/id_ed25519*',
  '**/.ssh', '**/.aws', '**/.gnupg', '**/.netrc', '**/.git-credentials', '**/.npmrc', '**/.pypirc',
];

export interface PresetRootDefaults {
  mode?: 'ro' | 'rw';
  quota?: { bytes?: number; files?: number };
  maxFileBytes?: number;
  suffixes?: readonly string[];
}

/** The mass-change guard's limits (a mount file's `limits:`); absent: unlimited. */
export interface Limits {
  deletes?: number;
  renames?: number;
  filesWritten?: number;
  bytesWritten?: number;
}

export const LIMIT_NAMES = ['deletes', 'renames', 'filesWritten', 'bytesWritten'] as const;
export type LimitName = (typeof LIMIT_NAMES)[number];

export interface PolicyPreset {
  description: string;
  /** the session's limits unless the file's `limits` says otherwise, field by field */
  limits?: Limits;
  /** applied to every root that does not set the field itself */
  defaults: PresetRootDefaults;
  hide: readonly string[];
  readonly: readonly string[];
}

/**
 * Presets for common trust levels (`preset: NAME` in a mount file). The file's own fields win,
 * field by field: `defaults.*` per field (quota per limit), a `readonly` list replaces the
 * preset's, a `hide` list is added to the preset's (`hide!:` or `replaceHide: true` replaces
 * it), and each root's own fields win over all defaults.
 */
export const POLICY_PRESETS = {
  /** A program you trust with the data: like `--source`, every root writable, nothing hidden. */
  trusted: {
    description: 'roots read-write unless they say otherwise; nothing hidden; no limits',
    defaults: { mode: 'rw' },
    hide: [],
    readonly: [],
  },
  /** An agent or untrusted tool: reads by default, writes only where a root says `mode: rw`,
   * within limits; credentials are hidden. */
  sandboxed: {
    description: 'roots read-only unless they say `mode: rw`; writable roots limited to 1 GiB, 100000 files and 256 MiB per file; a session may delete or rename 10000 names and write 100000 files or 4 GiB; common credential files hidden',
    defaults: { mode: 'ro', quota: { bytes: 1024 ** 3, files: 100_000 }, maxFileBytes: 256 * 1024 ** 2 },
    // generous: an agent's real work stays far below; a runaway `rm -rf` or rewrite loop does not
    limits: { deletes: 10_000, renames: 10_000, filesWritten: 100_000, bytesWritten: 4 * 1024 ** 3 },
    hide: SECRET_GLOBS,
    readonly: [],
  },
  /** Look, don't touch. A root may still say `mode: rw` explicitly (field-by-field override). */
  readonly: {
    description: 'roots read-only unless they say otherwise; common credential files hidden',
    defaults: { mode: 'ro' },
    hide: SECRET_GLOBS,
    readonly: [],
  },
} as const satisfies Record<string, PolicyPreset>;

export type PresetName = keyof typeof POLICY_PRESETS;
export const PRESET_NAMES = Object.keys(POLICY_PRESETS) as PresetName[];

/**
 * Where a workspace's journal lives unless --state (or the mount file's `state`) says otherwise:
 * derived from the workspace's location, so `mount`, `log` and `rollback` agree without flags.
 * `location` is the source directory's real path (or the bucket URL).
 */
export function defaultStateDir(location: string): string {
  const name = location.replace(/\/+$/, '').split('/').pop()?.replace(/[^A-Za-z0-9._-]/g, '_') || 'root';
  const hash = crypto.createHash('sha256').update(location).digest('hex').slice(0, 12);
  return path.join(DEFAULTS.journal.stateHome, `${name}-${hash}`);
}

/** The pattern of defaultStateDir, for help texts. */
export const DEFAULT_STATE_DIR_PATTERN = path.join(DEFAULTS.journal.stateHome, '<source name>-<first 12 hex digits of sha256(source real path)>');

export type BindingName = 'native-ll' | 'fuse-native';
export const BINDING_NAMES: readonly BindingName[] = ['native-ll', 'fuse-native'];

export type LogFormat = 'text' | 'json';
export const LOG_FORMATS: readonly LogFormat[] = ['text', 'json'];

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
export const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
