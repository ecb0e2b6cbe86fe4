import fs from 'node:fs';
import path from 'node:path';
import { readSpool } from '../backend/index.js';
import { formatSize } from '../config/index.js';
import { stateLayout } from '../journal/index.js';

/*
 * The upload spool of durability journal as seen from outside the daemon (src/backend/gcs/
 * upload-queue.ts keeps it): `ledgerfs status` and `ledgerfs unmount` read it without asking the
 * daemon, and `unmount --no-wait` leaves a request file the daemon takes at unmount.
 */

export interface SpoolSummary {
  files: number;
  bytes: number;
  /** seconds since the oldest queued version was closed (0 when empty) */
  oldestAgeSec: number;
}

const NO_WAIT_FILE = 'unmount-no-wait';

/** Whether the state directory has an upload spool (a GCS workspace's). */
export function hasSpool(stateDir: string): boolean {
  return fs.existsSync(stateLayout(stateDir).uploadSpool);
}

/** What waits in a state directory's upload spool (the versions its log holds that are not done). */
export function spoolSummary(stateDir: string): SpoolSummary {
  let versions;
  try {
    versions = readSpool(stateLayout(stateDir).uploadSpool, { headersOnly: true }).versions;
  } catch {
    return { files: 0, bytes: 0, oldestAgeSec: 0 }; // read while the daemon removed a segment: empty enough
  }
  let bytes = 0;
  let oldest = Infinity;
  for (const v of versions) {
    bytes += v.entry.size;
    oldest = Math.min(oldest, v.entry.enqueuedAt);
  }
  const files = versions.length;
  return { files, bytes, oldestAgeSec: files && oldest !== Infinity ? Math.max(0, (Date.now() - oldest) / 1000) : 0 };
}

export function describeSpool(s: SpoolSummary): string {
  return `${s.files} file(s), ${formatSize(s.bytes)}, oldest ${Math.round(s.oldestAgeSec)} s`;
}

/** `unmount --no-wait`: the daemon of this state directory is to leave its queue in the spool. */
export function requestNoWait(stateDir: string): void {
  fs.writeFileSync(path.join(stateDir, NO_WAIT_FILE), `${process.pid}\n`, { mode: 0o600 });
}

/** Taken by the daemon at unmount: true when asked not to wait (the request is consumed). */
export function takeNoWaitRequest(stateDir: string): boolean {
  try {
    fs.unlinkSync(path.join(stateDir, NO_WAIT_FILE));
    return true;
  } catch {
    return false;
  }
}
