import crypto from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { CRC32C, type Storage } from '@google-cloud/storage';
import { DEFAULTS } from '../../config/index.js';
import { fdOps } from '../fd-ops.js';

/*
 * The hottest requests of a small-file workload, sent on the JSON API directly instead of
 * through @google-cloud/storage. Profiling `tar -x` of 3,000 files showed the client's per-call
 * machinery (a File and a Duplex per upload, a stream pipeline, retry-request, teeny-request,
 * node-fetch, a hashing stream, a UUID and header building per request) costing more daemon CPU
 * than the request itself. Here one request is one Buffer written on a keep-alive socket and
 * one JSON answer read back. The client stays the source of the endpoint and of credentials.
 *
 * Errors take the shapes errors.ts reads: an HTTP failure carries its status as a numeric
 * `code` (as the client's ApiError does), a transport failure Node's own string code
 * (ECONNRESET, ETIMEDOUT, ...), so the one retry policy treats both as before.
 */

/** The object's CRC-32C as GCS writes it (base64 of the big-endian 32 bits). */
export function crc32cOf(data: Buffer): string {
  const ops = fdOps();
  // (no addon, or one built before crc32c existed)
  if (!ops?.crc32c) {
    const c = new CRC32C();
    c.update(data);
    return c.toString();
  }
  // the CPU's crc32 instruction in native/ledgerfs_fdops.c: about 1 us per 4 KiB object where
  // the client's JS table took 25, on the event loop every FUSE request waits for
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(ops.crc32c(data));
  return b.toString('base64');
}

export class JsonApiError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly errors?: Array<{ reason?: string; message?: string }>,
  ) {
    super(message);
    this.name = 'JsonApiError';
  }
}

export interface JsonApiOptions {
  /** send the client's credentials (false: the emulator, reached without a keyFile) */
  authenticate: boolean;
  requestTimeoutMs: number;
}

export interface MultipartSpec {
  ifGenerationMatch: bigint;
  ifMetagenerationMatch?: bigint;
  contentType?: string;
  metadata: Record<string, string>;
}

export class JsonApi {
  private readonly base: URL;
  private readonly agent: http.Agent;
  private readonly userAgent: string;

  constructor(
    private readonly storage: Storage,
    private readonly bucketName: string,
    private readonly opts: JsonApiOptions,
  ) {
    this.base = new URL(storage.apiEndpoint);
    const Agent = this.base.protocol === 'https:' ? https.Agent : http.Agent;
    this.agent = new Agent({ keepAlive: true, maxSockets: DEFAULTS.gcs.jsonApiMaxSockets });
    this.userAgent = `ledgerfs gcloud-node-storage/${(storage as unknown as { packageJson?: { version?: string } }).packageJson?.version ?? '7'}`;
  }

  /**
   * A multipart upload (objects.insert, uploadType=multipart) of `data` with its metadata and
   * crc32c in one request. GCS checks the crc32c against the bytes it received and refuses the
   * upload on a mismatch, so nothing corrupt is ever committed. Resolves with the new object's
   * resource.
   */
  async multipartUpload(key: string, data: Buffer, spec: MultipartSpec): Promise<Record<string, unknown>> {
    const boundary = crypto.randomBytes(12).toString('hex');
    const resource = {
      name: key,
      ...(spec.contentType ? { contentType: spec.contentType } : {}),
      metadata: spec.metadata,
      // (not CRC32C.from(data): a 4-byte Buffer there is taken as the checksum itself)
      crc32c: crc32cOf(data),
    };
    const head = Buffer.from(
      `--${boundary}\r\nContent-Type: application/json\r\n\r\n${JSON.stringify(resource)}\r\n` +
        `--${boundary}\r\nContent-Type: ${spec.contentType ?? 'application/octet-stream'}\r\n\r\n`,
    );
    const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
    const qs = new URLSearchParams({ uploadType: 'multipart', name: key, ifGenerationMatch: spec.ifGenerationMatch.toString() });
    if (spec.ifMetagenerationMatch !== undefined) qs.set('ifMetagenerationMatch', spec.ifMetagenerationMatch.toString());
    const path = `${this.prefix()}/upload/storage/v1/b/${encodeURIComponent(this.bucketName)}/o?${qs}`;
    return this.send('POST', path, Buffer.concat([head, data, tail]), `multipart/related; boundary=${boundary}`);
  }

  /**
   * objects.get (the metadata) of the live object: its resource, or undefined when there is
   * none. A lookup asks this of every name it is given, absent ones most of all (a create's
   * O_EXCL check, git's check for each object): a 404 is an answer here, not an error.
   */
  async getObject(key: string): Promise<Record<string, unknown> | undefined> {
    const path = `${this.prefix()}/storage/v1/b/${encodeURIComponent(this.bucketName)}/o/${encodeURIComponent(key)}`;
    return this.send('GET', path, undefined, undefined, true);
  }

  /** objects.list, one page, as GCS answers it. */
  async listObjects(qs: Record<string, string | number | boolean>): Promise<Record<string, unknown>> {
    const q = new URLSearchParams(Object.entries(qs).map(([k, v]) => [k, String(v)]));
    const path = `${this.prefix()}/storage/v1/b/${encodeURIComponent(this.bucketName)}/o?${q}`;
    return this.send('GET', path) as Promise<Record<string, unknown>>;
  }

  /** the endpoint's own path (an apiEndpoint may carry one), without a trailing slash */
  private prefix(): string {
    return this.base.pathname.replace(/\/+$/, '');
  }

  private async headers(body: Buffer | undefined, contentType: string | undefined): Promise<Record<string, string | number>> {
    const h: Record<string, string | number> = { 'User-Agent': this.userAgent, Accept: 'application/json' };
    if (body) {
      h['Content-Type'] = contentType ?? 'application/octet-stream';
      h['Content-Length'] = body.length;
    }
    if (this.opts.authenticate) {
      // the client's auth: cached tokens, refreshed by google-auth-library when they expire.
      // A plain object in google-auth-library 9, a fetch Headers from 10 on: take either.
      const auth = (await this.storage.authClient.getRequestHeaders()) as unknown as Record<string, string> | Headers;
      if (auth instanceof Headers) auth.forEach((v, k) => (h[k] = v));
      else Object.assign(h, auth);
    }
    return h;
  }

  private send(method: string, path: string, body?: Buffer, contentType?: string): Promise<Record<string, unknown>>;
  private send(method: string, path: string, body: Buffer | undefined, contentType: string | undefined, notFoundIsUndefined: true): Promise<Record<string, unknown> | undefined>;
  private async send(method: string, path: string, body?: Buffer, contentType?: string, notFoundIsUndefined = false): Promise<Record<string, unknown> | undefined> {
    const headers = await this.headers(body, contentType);
    const mod = this.base.protocol === 'https:' ? https : http;
    return new Promise((resolve, reject) => {
      const req = mod.request({ method, hostname: this.base.hostname, port: this.base.port || undefined, path, headers, agent: this.agent }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const status = res.statusCode ?? 0;
          let json: Record<string, unknown> | undefined;
          try {
            json = text ? (JSON.parse(text) as Record<string, unknown>) : {};
          } catch {
            json = undefined;
          }
          if (status >= 200 && status < 300 && json) return resolve(json);
          if (status === 404 && notFoundIsUndefined) return resolve(undefined);
          const e = (json?.error ?? {}) as { message?: string; errors?: Array<{ reason?: string; message?: string }> };
          reject(new JsonApiError(status || 500, e.message ?? (text.slice(0, 200) || `HTTP ${status}`), e.errors));
        });
      });
      req.setTimeout(this.opts.requestTimeoutMs, () => req.destroy(Object.assign(new Error(`network timeout after ${this.opts.requestTimeoutMs} ms`), { code: 'ETIMEDOUT' })));
      req.on('error', reject);
      if (body) req.end(body);
      else req.end();
    });
  }

  close(): void {
    this.agent.destroy();
  }
}
