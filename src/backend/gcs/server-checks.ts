import crypto from 'node:crypto';
import type { GcsRequests } from './client.js';

/**
 * Does the server keep an object whose name ends in '/'? GCS does. fake-gcs-server's default
 * filesystem backend answers 200 to the upload and stores nothing, so there directory
 * placeholders never exist: an empty directory disappears once the metadata cache forgets it,
 * and directories lose their mode, owner and times. Nothing in the answers says so; only a
 * read-back does. The probe is a placeholder of its own under `area` (the reserved area, hidden
 * from the mount), removed at once. undefined: the probe itself failed, so nothing is known.
 */
export async function keepsPlaceholders(req: GcsRequests, area: string): Promise<boolean | undefined> {
  const key = `${area}probe-${crypto.randomBytes(6).toString('hex')}/`;
  try {
    await req.uploadBuffer(key, Buffer.alloc(0), { ifGenerationMatch: 0n, metadata: {} });
    const seen = await req.head(key);
    if (seen) await req.remove(key, seen.generation);
    return seen !== undefined;
  } catch {
    return undefined;
  }
}
