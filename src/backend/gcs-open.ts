import type { GcsBackendConfig } from '../config/index.js';
import type { GcsStack, GcsStackOptions } from './gcs-stack.js';
import type { GcsJournalRemote } from './gcs/journal-remote.js';

/*
 * The doors to a GCS workspace, loaded on first use: the GCS modules bring in
 * @google-cloud/storage (about half a second of start-up), which every CLI process would
 * otherwise pay, though log, diff, status, unmount, policy check and a local mount never touch
 * a bucket. Both doors are async already, so the wait hides in the bucket probe they make.
 */

/** The GCS backend with its cache layers, as a mount uses it (see gcs-stack.ts). */
export async function openGcsStack(b: GcsBackendConfig, o: GcsStackOptions): Promise<GcsStack> {
  return (await import('./gcs-stack.js')).openGcsStack(b, o);
}

/** The reserved area of a GCS workspace alone (the journal commands on a host that does not mount it). */
export async function openGcsJournalRemote(b: GcsBackendConfig, stagingDir: string): Promise<GcsJournalRemote> {
  return (await import('./gcs-stack.js')).openGcsJournalRemote(b, stagingDir);
}
