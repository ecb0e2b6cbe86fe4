import path from 'node:path';
import { Storage, type Bucket } from '@google-cloud/storage';
import { afterAll, beforeAll, beforeEach } from 'vitest';
import { createGcsBackend, type GcsBackend } from '../../src/backend/gcs.js';
import { makeTemp, rmTemp } from './tmp.js';
import { startGcsEmulator, type FaultSpec, type GcsEmulator } from '../../src/dev/gcs-emulator/index.js';

/**
 * A GCS emulator on a free 127.0.0.1 port plus a real @google-cloud/storage client pointed at
 * it. Tests talk to the emulator only through that client (and the admin endpoint for faults).
 */
export interface EmulatorFixture {
  emu: GcsEmulator;
  storage: Storage;
  /** inject faults through the admin endpoint over HTTP */
  fault(spec: FaultSpec | FaultSpec[]): Promise<void>;
  clearFaults(): Promise<void>;
  stats(): Promise<{ requests: number; faultsInjected: number; byMethod: Record<string, number> }>;
  stop(): Promise<void>;
}

export function clientFor(url: string, opts: { retries?: boolean } = {}): Storage {
  return new Storage({
    apiEndpoint: url,
    projectId: 'test',
    // The client's backoff starts at ~1 s; 1 s is also the smallest maxRetryDelay its
    // async-retry based paths (save, resumable start) accept.
    retryOptions: opts.retries === false ? { autoRetry: false, maxRetries: 0 } : { maxRetries: 3, maxRetryDelay: 1 },
  });
}

export async function startEmulatorFixture(opts: { port?: number; retries?: boolean } = {}): Promise<EmulatorFixture> {
  const emu = await startGcsEmulator(opts.port ? { port: opts.port } : {});
  const admin = (method: string, what: string, body?: unknown) =>
    fetch(`${emu.url}/_emulator/${what}`, { method, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) }).then(async (r) => {
      if (!r.ok) throw new Error(`admin ${method} ${what}: ${r.status} ${await r.text()}`);
      return r.status === 204 ? undefined : r.json();
    });
  return {
    emu,
    storage: clientFor(emu.url, opts),
    fault: async (spec) => void (await admin('POST', 'faults', spec)),
    clearFaults: async () => void (await admin('DELETE', 'faults')),
    stats: async () => (await admin('GET', 'stats')) as { requests: number; faultsInjected: number; byMethod: Record<string, number> },
    stop: () => emu.stop(),
  };
}

/** Backend options for tests: fast retries, small upload thresholds, a given staging dir. */
export function testBackendOptions(url: string, bucket: string, stagingDir: string, extra: Record<string, unknown> = {}) {
  return {
    bucket,
    apiEndpoint: url,
    stagingDir,
    retryInitialDelayMs: 5,
    retryMaxDelayMs: 40,
    retryTotalTimeoutMs: 10_000,
    requestTimeoutMs: 5_000,
    resumableThresholdBytes: 1024 * 1024,
    uploadChunkBytes: 256 * 1024,
    ...extra,
  };
}

/**
 * For a test file: an emulator and a bucket for the whole file, and before each test a fresh
 * GcsBackend under a prefix of its own (`ctx.prefix`). `ctx.raw` is the bucket as another tool
 * sees it. Call at the top level of the file.
 */
export function gcsBackendPerTest(bucketName: string): GcsTestContext {
  const ctx = { n: 0 } as GcsTestContext & { n: number };
  beforeAll(async () => {
    ctx.fx = await startEmulatorFixture();
    [ctx.raw] = await ctx.fx.storage.createBucket(bucketName);
    ctx.tmp = makeTemp(`gcs-${bucketName}`);
  });
  afterAll(async () => {
    await ctx.fx?.stop();
    if (ctx.tmp) rmTemp(ctx.tmp);
  });
  beforeEach(async () => {
    ctx.prefix = `t${++ctx.n}`;
    ctx.b = await createGcsBackend(testBackendOptions(ctx.fx.emu.url, bucketName, path.join(ctx.tmp, 'staging'), { prefix: ctx.prefix }));
  });
  return ctx;
}

export interface GcsTestContext {
  fx: EmulatorFixture;
  raw: Bucket;
  /** a temp dir for the file (staging lives in it) */
  tmp: string;
  b: GcsBackend;
  prefix: string;
}
