import { DEFAULTS, normalizePrefix } from '../../config/index.js';

/**
 * What `createGcsBackend` takes. The first five fields are the policy file's `backend` block
 * (src/config/load.ts GcsBackendConfig is assignable to this); the rest are tuning knobs whose
 * defaults live in DEFAULTS.gcs.
 */
export interface GcsBackendOptions {
  /** accepted so the policy's backend block can be passed as it is */
  type?: 'gcs';
  bucket: string;
  /** object-name prefix the workspace lives under ("" or "team/ws"; slashes trimmed) */
  prefix?: string;
  /** e.g. http://127.0.0.1:4443 for the emulator; requests then go unauthenticated unless keyFile is set */
  apiEndpoint?: string;
  /** service-account JSON key; without it, Application Default Credentials */
  keyFile?: string;
  projectId?: string;

  implicitDirs?: boolean;
  stagingDir?: string;
  /** where local versions that could not be uploaded are kept (default: <stagingDir>/conflicts) */
  conflictsDir?: string;
  resumableThresholdBytes?: number;
  uploadChunkBytes?: number;
  retryAttempts?: number;
  retryInitialDelayMs?: number;
  retryMaxDelayMs?: number;
  /** the least wait before retrying a 429 */
  rateLimitRetryDelayMs?: number;
  retryTotalTimeoutMs?: number;
  requestTimeoutMs?: number;
  /** the setup probe of the bucket gives up after this long (DEFAULTS.gcs.setupTimeoutMs) */
  setupTimeoutMs?: number;
  fileMode?: number;
  dirMode?: number;
  renameConcurrency?: number;
  /**
   * bucket: close(2) returns once the version is in the bucket. journal: once it is durable in
   * `spoolDir` (the journal's state directory); uploads run in the background.
   */
  durability?: 'bucket' | 'journal';
  /** the upload queue's spool; versions found there at open are uploaded whatever `durability` says */
  spoolDir?: string;
  /** background uploads in flight at once (durability: journal) */
  uploadConcurrency?: number;
  /** owner of nodes whose metadata names none (default: the daemon's uid/gid) */
  uid?: number;
  gid?: number;
  /** called when an upload is refused because another writer changed the object (see GcsConflict) */
  onConflict?: (c: GcsConflict) => void;
  /**
   * Test seam: awaited after each object a directory rename copied (`copied`, count so far).
   * Crash tests stop a rename mid-way with it; nothing else sets it.
   */
  renameHook?: (step: 'copied', count: number) => Promise<void> | void;
}

/**
 * A local version that could not be uploaded because the object changed in the bucket since it
 * was read. The bytes are kept in `localFile` (under the staging dir's conflicts/ area) until
 * the journal moves them to its conflict area; nothing is dropped.
 */
export interface GcsConflict {
  /**
   * changed-remotely: another writer replaced or deleted the object (the upload got 412);
   * upload-failed: the upload failed for another reason at close(2), fsync or the last close
   * (e.g. GCS unreachable after all retries), so the staged bytes had nowhere else to go; the
   * handle does not upload them again.
   */
  reason: 'changed-remotely' | 'upload-failed';
  /** view path the handle was writing */
  path: string;
  objectName: string;
  /** generation the local version was based on (0: the object did not exist) */
  expectedGeneration: string;
  /** generation found in the bucket, if any */
  currentGeneration?: string;
  localFile: string;
  size: number;
  time: Date;
  /** found by a background upload (durability journal), after close(2) had returned */
  late?: boolean;
}

export type ResolvedGcsOptions = Required<Omit<GcsBackendOptions, 'type' | 'apiEndpoint' | 'keyFile' | 'projectId' | 'onConflict' | 'conflictsDir' | 'renameHook' | 'spoolDir'>> & { conflictsDir: string } &
  Pick<GcsBackendOptions, 'apiEndpoint' | 'keyFile' | 'projectId' | 'onConflict' | 'renameHook' | 'spoolDir'>;

const CHUNK_GRANULE = 256 * 1024;

export function resolveGcsOptions(o: GcsBackendOptions): ResolvedGcsOptions {
  const d = DEFAULTS.gcs;
  const r: ResolvedGcsOptions = {
    bucket: o.bucket,
    prefix: normalizePrefix(o.prefix ?? ''),
    implicitDirs: o.implicitDirs ?? d.implicitDirs,
    stagingDir: o.stagingDir ?? d.stagingDir,
    conflictsDir: o.conflictsDir ?? `${o.stagingDir ?? d.stagingDir}/conflicts`,
    resumableThresholdBytes: o.resumableThresholdBytes ?? d.resumableThresholdBytes,
    uploadChunkBytes: o.uploadChunkBytes ?? d.uploadChunkBytes,
    retryAttempts: o.retryAttempts ?? d.retryAttempts,
    retryInitialDelayMs: o.retryInitialDelayMs ?? d.retryInitialDelayMs,
    retryMaxDelayMs: o.retryMaxDelayMs ?? d.retryMaxDelayMs,
    rateLimitRetryDelayMs: o.rateLimitRetryDelayMs ?? d.rateLimitRetryDelayMs,
    retryTotalTimeoutMs: o.retryTotalTimeoutMs ?? d.retryTotalTimeoutMs,
    requestTimeoutMs: o.requestTimeoutMs ?? d.requestTimeoutMs,
    setupTimeoutMs: o.setupTimeoutMs ?? d.setupTimeoutMs,
    fileMode: o.fileMode ?? d.fileMode,
    dirMode: o.dirMode ?? d.dirMode,
    renameConcurrency: o.renameConcurrency ?? d.renameConcurrency,
    durability: o.durability ?? d.durability,
    uploadConcurrency: o.uploadConcurrency ?? d.uploadConcurrency,
    uid: o.uid ?? process.getuid?.() ?? 0,
    gid: o.gid ?? process.getgid?.() ?? 0,
    ...(o.apiEndpoint !== undefined ? { apiEndpoint: o.apiEndpoint } : {}),
    ...(o.keyFile !== undefined ? { keyFile: o.keyFile } : {}),
    ...(o.projectId !== undefined ? { projectId: o.projectId } : {}),
    ...(o.onConflict !== undefined ? { onConflict: o.onConflict } : {}),
    ...(o.renameHook !== undefined ? { renameHook: o.renameHook } : {}),
    ...(o.spoolDir !== undefined ? { spoolDir: o.spoolDir } : {}),
  };
  if (r.durability === 'journal' && r.spoolDir === undefined) {
    throw new Error('GCS backend: durability "journal" needs a state directory to spool uploads in (it cannot be used with --no-journal)');
  }
  if (r.uploadConcurrency < 1) throw new Error('GCS backend: uploadConcurrency must be at least 1');
  if (!r.bucket) throw new Error('GCS backend: `bucket` is required');
  if (r.uploadChunkBytes <= 0 || r.uploadChunkBytes % CHUNK_GRANULE !== 0) {
    throw new Error(`GCS backend: uploadChunkBytes must be a positive multiple of 256 KiB, got ${r.uploadChunkBytes}`);
  }
  if (r.retryAttempts < 1) throw new Error('GCS backend: retryAttempts must be at least 1');
  return r;
}
