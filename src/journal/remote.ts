/**
 * Where a journal is mirrored off the host (for GCS: the workspace's reserved area in the
 * bucket, src/backend/gcs/journal-remote.ts). Objects are written once under a name and never
 * replaced, so two hosts cannot overwrite each other and a retried upload is harmless.
 */
export interface JournalRemote {
  /** for messages: where the mirror lives */
  readonly location: string;
  /** every object whose name starts with `prefix` (names relative to the area) */
  list(prefix: string): Promise<Array<{ name: string; size: number }>>;
  /** create `name` only if it does not exist; false if it did (left as it was) */
  create(name: string, data: Buffer | { file: string; size: number }): Promise<boolean>;
  downloadTo(name: string, file: string): Promise<void>;
}
