import { readSpool } from '../../src/backend/gcs/spool-log.js';

/** How many closed versions a --durability journal spool directory still holds (none: 0). */
export function spooledVersions(spoolDir: string): number {
  return readSpool(spoolDir, { headersOnly: true }).versions.length;
}
