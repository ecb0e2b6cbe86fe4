import fs from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Storage, type Bucket, type File } from '@google-cloud/storage';
import { httpStatus } from './errors.js';
import { JsonApi } from './json-api.js';
import { objectInfo, type ObjectInfo, type RawObjectMetadata } from './metadata.js';
import type { ResolvedGcsOptions } from './options.js';
import { withRetries, type RetryCounters, type RetryPolicy } from './retry.js';

/**
 * Build the client. Its own retry machinery is switched off and all retrying happens in
 * retry.ts, because in @google-cloud/storage v7:
 *  - file.save() and resumable-upload initiation run async-retry with maxTimeout =
 *    maxRetryDelay*1000 and a fixed minTimeout of 1000 ms, so a maxRetryDelay below 1 s throws
 *    "minTimeout is greater than maxTimeout" before any request (we keep it >= 1 s for that);
 *  - multipart (non-resumable) uploads never retry, and which other calls retry depends on
 *    whether preconditions were passed (IdempotencyStrategy.RetryConditional);
 *  - an unconditional save() sets the shared storage.retryOptions.autoRetry to false while it
 *    runs, which changes the retry behaviour of concurrent calls on the same client.
 * With apiEndpoint (the emulator) and no keyFile, requests go unauthenticated, as the client
 * does for custom endpoints; with a keyFile they are signed even there.
 */
export function makeStorage(o: ResolvedGcsOptions): Storage {
  return new Storage({
    ...(o.apiEndpoint !== undefined ? { apiEndpoint: o.apiEndpoint, useAuthWithCustomEndpoint: o.keyFile !== undefined } : {}),
    ...(o.keyFile !== undefined ? { keyFilename: o.keyFile } : {}),
    // Bucket and object calls need no project; the emulator's client still wants one set.
    ...(o.projectId !== undefined ? { projectId: o.projectId } : o.apiEndpoint !== undefined ? { projectId: 'ledgerfs' } : {}),
    timeout: o.requestTimeoutMs,
    retryOptions: { autoRetry: false, maxRetries: 0, maxRetryDelay: 64, totalTimeout: Math.max(1, o.retryTotalTimeoutMs / 1000) },
  });
}

export interface ListPage {
  items: ObjectInfo[];
  prefixes: string[];
  nextPageToken?: string;
}

export interface WritePreconditions {
  /** 0n: the object must not exist */
  ifGenerationMatch: bigint;
  ifMetagenerationMatch?: bigint;
}

export interface UploadSpec extends WritePreconditions {
  contentType?: string;
  metadata: Record<string, string>;
}

/** 64-bit generations travel as decimal strings: numbers above 2^53 would lose digits. */
const int64 = (g: bigint) => g.toString() as unknown as number;

/**
 * The requests the GCS backend makes, each retried by the one policy, with results parsed into
 * ObjectInfo. Nothing here knows about paths or POSIX; that is gcs.ts's job.
 */
export class GcsRequests {
  readonly bucket: Bucket;
  readonly counters: RetryCounters = { retries: 0, attempts: new Map() };
  /** object bytes received (downloads) and sent (uploads, each attempt), for metrics */
  readonly traffic = { bytesIn: 0, bytesOut: 0 };
  /** small uploads, sent without the client's per-call machinery (see json-api.ts) */
  private readonly json: JsonApi;

  constructor(
    readonly storage: Storage,
    bucketName: string,
    private readonly policy: RetryPolicy,
    private readonly opts: { resumableThresholdBytes: number; uploadChunkBytes: number; requestTimeoutMs: number; apiEndpoint?: string; keyFile?: string },
  ) {
    this.bucket = storage.bucket(bucketName);
    // as makeStorage: a custom endpoint without a key file goes unauthenticated
    this.json = new JsonApi(storage, bucketName, { authenticate: opts.apiEndpoint === undefined || opts.keyFile !== undefined, requestTimeoutMs: opts.requestTimeoutMs });
  }

  private retry<T>(fn: (attempt: number) => Promise<T>, method = 'GET'): Promise<T> {
    return withRetries(this.policy, this.counters, (a) => fn(a.number), method);
  }

  private file(key: string, generation?: bigint): File {
    return generation !== undefined && generation > 0n ? this.bucket.file(key, { generation: int64(generation) }) : this.bucket.file(key);
  }

  /**
   * Whether the bucket answers these credentials: a listing of at most one object under
   * `prefix`, sent once (the caller decides on retries). A listing needs storage.objects.list,
   * which every role that can use a workspace has (roles/storage.objectViewer, objectUser,
   * objectAdmin); the bucket's own metadata needs storage.buckets.get, which those roles lack
   * (gcsfuse asked for it once and had to stop: GoogleCloudPlatform/gcsfuse#982).
   */
  async probe(prefix: string): Promise<void> {
    await this.json.listObjects({ prefix, maxResults: 1 });
  }

  /** The live object, or undefined if there is none. */
  async head(key: string): Promise<ObjectInfo | undefined> {
    const m = await this.retry(() => this.json.getObject(key));
    return m && objectInfo(m as unknown as RawObjectMetadata);
  }

  /**
   * The live object, or undefined if there is none, asked once: for a last look after the
   * retries of another request gave up, when waiting through more backoff would only delay an
   * answer that is the same either way.
   */
  async headOnce(key: string): Promise<ObjectInfo | undefined> {
    const m = await this.json.getObject(key);
    return m && objectInfo(m as unknown as RawObjectMetadata);
  }

  /**
   * One page of objects.list, a plain JSON request (json-api.ts) rather than bucket.getFiles(),
   * which builds a File object per item: for a page of 1,000 that costs several times the
   * request itself.
   */
  async list(q: { prefix: string; delimiter?: string; includeTrailingDelimiter?: boolean; maxResults?: number; pageToken?: string; startOffset?: string }): Promise<ListPage> {
    const qs = {
      prefix: q.prefix,
      ...(q.startOffset ? { startOffset: q.startOffset } : {}),
      ...(q.delimiter ? { delimiter: q.delimiter } : {}),
      ...(q.includeTrailingDelimiter ? { includeTrailingDelimiter: true } : {}),
      ...(q.maxResults ? { maxResults: q.maxResults } : {}),
      ...(q.pageToken ? { pageToken: q.pageToken } : {}),
    };
    const resp = await this.retry(() => this.json.listObjects(qs));
    const r = (resp ?? {}) as { items?: RawObjectMetadata[]; prefixes?: string[]; nextPageToken?: string };
    return {
      items: (r.items ?? []).map((m) => objectInfo(m)),
      prefixes: r.prefixes ?? [],
      ...(r.nextPageToken ? { nextPageToken: r.nextPageToken } : {}),
    };
  }

  /** Bytes [start, end] (inclusive) of one generation, in one buffer. 404 if that generation is gone. */
  async readRange(key: string, generation: bigint, start: number, end: number): Promise<Buffer> {
    const out = Buffer.allocUnsafe(end - start + 1);
    const n = await this.readRangeParts(key, generation, start, end, (d, at) => d.copy(out, at - start));
    return n === out.length ? out : out.subarray(0, n);
  }

  /**
   * Bytes [start, end] (inclusive) of one generation as they arrive: `onData` gets each piece
   * in order with its offset in the object, in the client's own buffers (no copy here; the
   * caller keeps them or copies them where they go). A retry after a broken transfer asks only
   * for the bytes not delivered yet. Resolves with the number delivered (fewer at the object's
   * end); 404 if that generation is gone.
   */
  async readRangeParts(key: string, generation: bigint, start: number, end: number, onData: (d: Buffer, at: number) => void): Promise<number> {
    let got = 0;
    await this.retry(
      () =>
        new Promise<void>((resolve, reject) => {
          if (start + got > end) return resolve();
          // decompress: false: an object stored gzip-encoded (gsutil cp -Z) comes as stored (the
          // client asks with Accept-Encoding: gzip), and its size is the stored size; the client's
          // gunzip of a range would fail mid-object and give more bytes than the range at 0
          const rs = this.file(key, generation).createReadStream({ start: start + got, end, validation: false, decompress: false });
          rs.on('error', reject);
          rs.on('data', (d: Buffer) => {
            if (start + got + d.length > end + 1) {
              rs.destroy(new Error(`read ${key}: more bytes than the range ${start}-${end} asked for`));
              return;
            }
            onData(d, start + got);
            got += d.length;
            this.traffic.bytesIn += d.length;
          });
          rs.on('end', resolve);
        }),
    );
    return got;
  }

  /** One generation, whole, into a local file (checked against the object's crc32c). */
  async downloadTo(key: string, generation: bigint, hostFile: string): Promise<void> {
    // the stored bytes, as readRangeParts gives them (a gzip-encoded object is not decompressed)
    await this.retry(() => this.file(key, generation).download({ destination: hostFile, validation: 'crc32c', decompress: false }));
    // (off the event loop: every FUSE request waits for it)
    this.traffic.bytesIn += (await fs.promises.stat(hostFile)).size;
  }

  /** Create a new generation from a buffer (a multipart upload). */
  async uploadBuffer(key: string, data: Buffer, spec: UploadSpec): Promise<ObjectInfo> {
    return this.retry(async () => {
      this.traffic.bytesOut += data.length;
      return objectInfo((await this.json.multipartUpload(key, data, spec)) as unknown as RawObjectMetadata);
    }, 'POST');
  }

  /**
   * Create a new generation from a local file: multipart below the resumable threshold,
   * otherwise resumable in chunks. A retried resumable upload continues its session (the
   * client asks the server how much it has and skips that much of the file); if the session is
   * gone, it starts a new one.
   */
  async uploadFile(key: string, localPath: string, size: number, spec: UploadSpec): Promise<ObjectInfo> {
    const source = () => fs.createReadStream(localPath);
    if (size < this.opts.resumableThresholdBytes) {
      // read per attempt: what is uploaded is what the file holds when the request is made;
      // synchronously, as file.ts stages: a local file under the threshold, where the promise
      // API's four thread-pool trips (open, fstat, read, close) cost more than the read
      return this.retry(async () => {
        const data = fs.readFileSync(localPath);
        this.traffic.bytesOut += data.length;
        return objectInfo((await this.json.multipartUpload(key, data, spec)) as unknown as RawObjectMetadata);
      }, 'POST');
    }
    let uri: string | undefined;
    // (a resumable upload counts the file once: a retry resumes where the server stopped)
    this.traffic.bytesOut += size;
    return this.retry(async () => {
      try {
        return await this.uploadOnce(key, source, { ...spec, resumable: true, ...(uri ? { uri } : {}) }, (u) => (uri = u));
      } catch (err) {
        const s = httpStatus(err);
        if (uri && (s === 404 || s === 410)) {
          uri = undefined;
          return this.uploadOnce(key, source, { ...spec, resumable: true }, (u) => (uri = u));
        }
        throw err;
      }
    }, 'PUT');
  }

  private async uploadOnce(
    key: string,
    source: () => Readable,
    spec: UploadSpec & { resumable: boolean; uri?: string },
    onUri?: (uri: string) => void,
  ): Promise<ObjectInfo> {
    const f = this.file(key);
    const pre: Record<string, number> = { ifGenerationMatch: int64(spec.ifGenerationMatch) };
    if (spec.ifMetagenerationMatch !== undefined) pre.ifMetagenerationMatch = int64(spec.ifMetagenerationMatch);
    const ws = f.createWriteStream({
      resumable: spec.resumable,
      // Applies to multipart uploads (the client's default there is no timeout at all).
      timeout: this.opts.requestTimeoutMs,
      ...(spec.resumable ? { chunkSize: this.opts.uploadChunkBytes } : {}),
      ...(spec.uri ? { uri: spec.uri } : {}),
      metadata: { ...(spec.contentType ? { contentType: spec.contentType } : {}), metadata: spec.metadata },
      preconditionOpts: pre,
      validation: 'crc32c',
    });
    if (onUri) ws.on('uri', onUri);
    await pipeline(source(), ws);
    return objectInfo(f.metadata as RawObjectMetadata);
  }

  /** Server-side copy of one generation (rewrite); the destination keeps the source's metadata. */
  async copy(srcKey: string, srcGeneration: bigint, dstKey: string, dst: WritePreconditions): Promise<ObjectInfo> {
    const pre: Record<string, number> = { ifGenerationMatch: int64(dst.ifGenerationMatch) };
    const [, resp] = await this.retry(() => this.file(srcKey, srcGeneration).copy(this.bucket.file(dstKey), { preconditionOpts: pre }), 'POST');
    // file.copy() does not fill the new File's metadata; the rewrite response carries it.
    const resource = (resp as { resource?: RawObjectMetadata } | undefined)?.resource;
    if (!resource) throw new Error(`copy to ${dstKey}: the rewrite response has no resource`);
    return objectInfo(resource);
  }

  async remove(key: string, ifGenerationMatch: bigint): Promise<void> {
    await this.retry(() => this.file(key).delete({ ifGenerationMatch: int64(ifGenerationMatch) }), 'DELETE');
  }

  /** Merge custom metadata entries (null deletes a key); metageneration + 1. */
  async patchMetadata(key: string, entries: Record<string, string | null>, pre: { ifGenerationMatch: bigint; ifMetagenerationMatch: bigint }): Promise<ObjectInfo> {
    const [m] = await this.retry(() =>
      this.file(key).setMetadata(
        { metadata: entries },
        { ifGenerationMatch: int64(pre.ifGenerationMatch), ifMetagenerationMatch: int64(pre.ifMetagenerationMatch) },
      ),
    'PATCH');
    return objectInfo(m as RawObjectMetadata);
  }
}
