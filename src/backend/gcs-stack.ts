import fs from 'node:fs';
import { DEFAULTS, type GcsBackendConfig } from '../config/index.js';
import { createGcsBackend, type GcsBackend, type GcsConflict } from './gcs.js';
import { ContentCache } from './layers/content-cache.js';
import { MetadataCacheLayer } from './layers/metadata-cache.js';
import { ReadCacheLayer } from './layers/read-cache.js';
import { ReservedNameLayer } from './layers/reserved.js';
import type { GcsJournalRemote } from './gcs/journal-remote.js';
import type { Backend } from '../core/index.js';

export interface GcsStack {
  /** what the workspace uses: metadata cache -> read cache -> GCS */
  store: Backend;
  gcs: GcsBackend;
  metadata: MetadataCacheLayer;
  /** the local copies of whole objects (absent when its size is 0) */
  content: ContentCache | undefined;
  /** the reserved area of the workspace in the bucket, where the journal is mirrored */
  journalRemote: GcsJournalRemote;
}

export interface GcsStackOptions {
  /** local staging of writes */
  stagingDir: string;
  /** where local versions that could not be uploaded are kept (each with a .json note);
   * default: conflicts/ in the staging directory */
  conflictsDir?: string | undefined;
  onConflict?: (c: GcsConflict) => void;
  /** the upload queue's spool (the state directory's upload-spool/); needed by durability journal */
  spoolDir?: string | undefined;
}

/**
 * The GCS backend with its cache layers, as a mount uses it: stat/listing cache outermost
 * (every mutation passes through it), then read-ahead and the content cache, then the layer
 * that keeps the journal's reserved area out of the view, then the bucket.
 */
export async function openGcsStack(b: GcsBackendConfig, o: GcsStackOptions): Promise<GcsStack> {
  const c = { ...DEFAULTS.gcsCache, ...b.cache };
  const gcs = await createGcsBackend({
    bucket: b.bucket,
    ...(b.prefix !== undefined ? { prefix: b.prefix } : {}),
    ...(b.apiEndpoint !== undefined ? { apiEndpoint: b.apiEndpoint } : {}),
    ...(b.keyFile !== undefined ? { keyFile: b.keyFile } : {}),
    ...(b.implicitDirs !== undefined ? { implicitDirs: b.implicitDirs } : {}),
    ...(b.durability !== undefined ? { durability: b.durability } : {}),
    ...(o.spoolDir !== undefined ? { spoolDir: o.spoolDir } : {}),
    stagingDir: o.stagingDir,
    conflictsDir: o.conflictsDir,
    onConflict: (conflict) => {
      noteConflict(conflict);
      o.onConflict?.(conflict);
    },
  });
  const content = c.contentBytes > 0 ? new ContentCache({ dir: c.contentDir, maxBytes: c.contentBytes, maxObjectBytes: c.contentMaxObjectBytes, copyBatchMs: c.contentCopyBatchMs, memoryBytes: c.contentMemoryBytes }) : undefined;
  if (content) gcs.onUploadedBytes = (version, bytes) => content.put(version, bytes);
  const visible = new ReservedNameLayer(gcs, DEFAULTS.gcs.reservedName);
  const read = new ReadCacheLayer(visible, {
    readAheadMinBytes: c.readAheadMinBytes,
    readAheadMaxBytes: c.readAheadMaxBytes,
    ...(content ? { content } : {}),
  });
  const metadata = new MetadataCacheLayer(read, { ttlMs: c.metadataTtlSec * 1000, maxEntries: c.metadataMaxEntries, maxListings: c.metadataMaxListings, maxWalks: c.metadataMaxWalks });
  return { store: metadata, gcs, metadata, content, journalRemote: gcs.journalArea };
}

/**
 * The reserved area of a GCS workspace alone (the journal commands on a host that does not mount
 * it): the bucket is checked as a mount checks it, so a missing bucket or credentials say so.
 */
export async function openGcsJournalRemote(b: GcsBackendConfig, stagingDir: string): Promise<GcsJournalRemote> {
  return (await createGcsBackend({ ...b, stagingDir })).journalArea;
}

/** A note next to a conflicting local version saying what it is (the version is kept by the backend). */
function noteConflict(c: GcsConflict): void {
  try {
    fs.writeFileSync(`${c.localFile}.json`, JSON.stringify({ ...c, time: c.time.toISOString() }, null, 2) + '\n', { mode: 0o600 });
  } catch {
    /* the bytes are kept all the same; the note is a convenience */
  }
}
