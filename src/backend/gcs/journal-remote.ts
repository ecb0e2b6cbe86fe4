import crypto from 'node:crypto';
import { isNotFound, isPreconditionFailed } from './errors.js';
import type { GcsRequests } from './client.js';

/*
 * The workspace's reserved area in the bucket (`<prefix>/.ledgerfs/`), where the journal of a
 * GCS workspace is mirrored (src/journal/bucket-mirror.ts):
 *   journal/<writer>/<segment:6>/<offset:12>   a run of whole records of a segment
 *   blobs/ab/cdef...                           before-images uploaded from the spool (sha256)
 *   blobs/gcs/<generation>-<name hash>         before-images kept by a server-side copy of the
 *                                              object generation (journal ref gcs-<gen>-<hash>)
 * Every object is created with ifGenerationMatch=0 and never replaced.
 */

const PART_RE = /^journal\/([A-Za-z0-9._-]+)\/(\d{6,})\/(\d{12})$/;

const partName = (p: { writer: string; segment: number; offset: number }) =>
  `journal/${p.writer}/${String(p.segment).padStart(6, '0')}/${String(p.offset).padStart(12, '0')}`;

function blobName(ref: string): string {
  if (ref.startsWith('gcs-')) return `blobs/gcs/${ref.slice(4)}`;
  return `blobs/${ref.slice(0, 2)}/${ref.slice(2)}`;
}

export class GcsJournalRemote {
  readonly location: string;

  constructor(
    private readonly req: GcsRequests,
    /** object-name prefix of the area, ending in '/' */
    private readonly area: string,
  ) {
    this.location = `gs://${req.bucket.name}/${area}`;
  }

  private async list(prefix: string, startOffset?: string): Promise<Array<{ name: string; size: number }>> {
    const out: Array<{ name: string; size: number }> = [];
    let pageToken: string | undefined;
    do {
      const page = await this.req.list({
        prefix: this.area + prefix, ...(startOffset ? { startOffset: this.area + startOffset } : {}), ...(pageToken ? { pageToken } : {}),
      });
      for (const o of page.items) out.push({ name: o.name.slice(this.area.length), size: o.size });
      pageToken = page.nextPageToken;
    } while (pageToken);
    return out;
  }

  /** Upload only if nothing has that name yet; false when something had (412). */
  private async create(name: string, data: Buffer | { file: string; size: number }): Promise<boolean> {
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

  /** Writers that have parts here. */
  async listWriters(): Promise<string[]> {
    const out: string[] = [];
    let pageToken: string | undefined;
    do {
      const page = await this.req.list({ prefix: this.area + 'journal/', delimiter: '/', ...(pageToken ? { pageToken } : {}) });
      for (const p of page.prefixes) out.push(p.slice((this.area + 'journal/').length, -1));
      pageToken = page.nextPageToken;
    } while (pageToken);
    return out;
  }

  /** One writer's parts, in (segment, offset) order; with `from`, that part and the ones after it only. */
  async listParts(writer: string, from?: { segment: number; offset: number }): Promise<Array<{ writer: string; segment: number; offset: number; size: number }>> {
    const out = [];
    for (const o of await this.list(`journal/${writer}/`, from ? partName({ writer, ...from }) : undefined)) {
      const m = PART_RE.exec(o.name);
      if (m) out.push({ writer: m[1] as string, segment: Number(m[2]), offset: Number(m[3]), size: o.size });
    }
    return out;
  }

  putPart(p: { writer: string; segment: number; offset: number }, data: Buffer): Promise<boolean> {
    return this.create(partName(p), data);
  }

  fetchPart(p: { writer: string; segment: number; offset: number }, dest: string): Promise<void> {
    return this.req.downloadTo(this.area + partName(p), 0n, dest);
  }

  putBlob(ref: string, file: string, size: number): Promise<boolean> {
    return this.create(blobName(ref), { file, size });
  }

  /** The blob, whole, into a local file (crc32c checked). */
  fetchBlob(ref: string, dest: string): Promise<void> {
    return this.req.downloadTo(this.area + blobName(ref), 0n, dest);
  }

  /**
   * Keep one generation of an object as a before-image by a server-side copy into the area:
   * no byte passes through this host. The reference names the generation (unique per object
   * name) and the name, so the same generation is kept once. Undefined when that generation is
   * gone already (the caller falls back to reading the bytes it has).
   */
  async keepObject(key: string, generation: bigint): Promise<string | undefined> {
    const ref = `gcs-${generation}-${crypto.createHash('sha256').update(key).digest('hex').slice(0, 16)}`;
    try {
      await this.req.copy(key, generation, this.area + blobName(ref), { ifGenerationMatch: 0n });
    } catch (err) {
      if (isPreconditionFailed(err)) return ref; // kept before: same generation, same bytes
      if (isNotFound(err)) return undefined;
      throw err;
    }
    return ref;
  }
}
