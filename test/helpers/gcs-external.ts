import { randomBytes } from 'node:crypto';

/**
 * LEDGERFS_TEST_GCS_ENDPOINT=http://HOST:PORT points the mounted GCS tests at a GCS emulator
 * this suite did not start, e.g. the independent fake-gcs-server
 * (`fake-gcs-server -scheme http -port 4443 -backend memory`: its default filesystem backend
 * keeps no `dir/` placeholders, see src/backend/gcs/README.md), so they check ledgerfs against a second reading
 * of the JSON API rather than only against the project's own. Each mount then gets a bucket of
 * its own there (made through the JSON API, never emptied or deleted: use a throwaway server).
 * Tests that need the project emulator's admin endpoints (fault injection, outages, request
 * counts) skip with a note in that mode; so does test/gcs/external-emulator.test.ts without it.
 */
export const EXTERNAL_GCS_ENDPOINT: string | undefined = process.env.LEDGERFS_TEST_GCS_ENDPOINT?.replace(/\/+$/, '') || undefined;

/** Why a test that needs the project emulator's admin endpoints is skipped (or undefined: it runs). */
export const NEEDS_OWN_EMULATOR: string | undefined = EXTERNAL_GCS_ENDPOINT
  ? `skipped: needs the project emulator's /_emulator/ admin endpoints, and LEDGERFS_TEST_GCS_ENDPOINT=${EXTERNAL_GCS_ENDPOINT} points the GCS tests at another`
  : undefined;

let made = 0;

/** A fresh bucket name on the external server: `base` plus this worker's pid and a random tail. */
export function externalBucketName(base: string): string {
  return `${base}-${process.pid}-${++made}-${randomBytes(3).toString('hex')}`.toLowerCase().slice(0, 63);
}

/** Make `name` on the external server (the JSON API's buckets.insert; 409, already there, is fine). */
export async function createExternalBucket(endpoint: string, name: string): Promise<void> {
  const r = await fetch(`${endpoint}/storage/v1/b?project=ledgerfs-test`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ name }),
  }).catch((err: Error) => {
    throw new Error(`LEDGERFS_TEST_GCS_ENDPOINT=${endpoint}: cannot reach it to make bucket ${name} (${err.message})`);
  });
  if (!r.ok && r.status !== 409) throw new Error(`LEDGERFS_TEST_GCS_ENDPOINT=${endpoint}: making bucket ${name} answered ${r.status}: ${await r.text()}`);
}
