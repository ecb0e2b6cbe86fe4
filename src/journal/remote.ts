/**
 * Where a journal is mirrored off the host (for GCS: the workspace's reserved area in the
 * bucket, src/backend/gcs/journal-remote.ts, which also decides the object names). Everything
 * is written once and never replaced, so two hosts cannot overwrite each other and a retried
 * upload is harmless.
 */
export interface JournalRemote {
  /** for messages: where the mirror lives */
  readonly location: string;
  /** writers that have parts */
  listWriters(): Promise<string[]>;
  /** one writer's parts in (segment, offset) order; with `from`, that part and those after it */
  listParts(writer: string, from?: { segment: number; offset: number }): Promise<RemotePart[]>;
  /** a run of whole records of `segment` starting at byte `offset`; false if it was there already */
  putPart(part: Omit<RemotePart, 'size'>, data: Buffer): Promise<boolean>;
  fetchPart(part: RemotePart, dest: string): Promise<void>;
  putBlob(ref: string, file: string, size: number): Promise<boolean>;
  fetchBlob(ref: string, dest: string): Promise<void>;
}

export interface RemotePart {
  writer: string;
  segment: number;
  offset: number;
  size: number;
}
