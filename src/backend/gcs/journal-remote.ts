import { isPreconditionFailed } from './errors.js';
import type { GcsRequests } from './client.js';

/**
 * The workspace's reserved area in the bucket (`<prefix>/.ledgerfs/`), as the journal's mirror
 * uses it (src/journal/remote.ts JournalRemote): write-once objects, listed and fetched by name
 * relative to the area. Every request goes through GcsRequests, so it has the backend's retries.
 */
export class GcsJournalRemote {
  readonly location: string;

  constructor(
    private readonly req: GcsRequests,
    /** object-name prefix of the area, ending in '/' */
    private readonly area: string,
  ) {
    this.location = `gs://${req.bucket.name}/${area}`;
  }

  async list(prefix: string): Promise<Array<{ name: string; size: number }>> {
    const out: Array<{ name: string; size: number }> = [];
    let pageToken: string | undefined;
    do {
      const page = await this.req.list({ prefix: this.area + prefix, ...(pageToken ? { pageToken } : {}) });
      for (const o of page.items) out.push({ name: o.name.slice(this.area.length), size: o.size });
      pageToken = page.nextPageToken;
    } while (pageToken);
    return out;
  }

  /** Upload only if nothing has that name yet; false when something had (412). */
  async create(name: string, data: Buffer | { file: string; size: number }): Promise<boolean> {
    const spec = { ifGenerationMatch: 0n, metadata: {}, contentType: 'application/octet-stream' };
    try {
      if (Buffer.isBuffer(data)) await this.req.uploadBuffer(this.area + name, data, spec);
      else await this.req.uploadFile(this.area + name, data.file, data.size, spec);
      return true;
    } catch (err) {
      if (isPreconditionFailed(err)) return false;
      throw err;
    }
  }

  /** The live object, whole, into a local file (crc32c checked). */
  downloadTo(name: string, file: string): Promise<void> {
    return this.req.downloadTo(this.area + name, 0n, file);
  }
}
