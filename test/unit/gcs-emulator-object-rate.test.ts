import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGcsEmulator, type GcsEmulator } from '../../src/dev/index.js';
import { ObjectRateLimiter } from '../../src/dev/gcs-emulator/object-rate.js';

/**
 * GCS limits mutations of one object name to about one per second (writes, and separately
 * metadata updates; cloud.google.com/storage/quotas) and may answer 429 rateLimitExceeded past
 * that. The emulator does so when asked (`objectRateLimit`), and never by default.
 */
describe('gcs emulator: per-object mutation rate, as GCS limits it', () => {
  let limited: GcsEmulator;
  let free: GcsEmulator;
  beforeAll(async () => {
    limited = await startGcsEmulator({ objectRateLimit: { perSecond: 1, burst: 2 } });
    free = await startGcsEmulator();
    for (const e of [limited, free]) e.store.createBucket('rate', '');
  });
  afterAll(async () => {
    await limited?.stop();
    await free?.stop();
  });

  const upload = (e: GcsEmulator, name: string) =>
    fetch(`${e.url}/upload/storage/v1/b/rate/o?uploadType=media&name=${encodeURIComponent(name)}`, { method: 'POST', body: 'x' });
  const patch = (e: GcsEmulator, name: string, v: string) =>
    fetch(`${e.url}/storage/v1/b/rate/o/${encodeURIComponent(name)}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ metadata: { k: v } }) });
  const remove = (e: GcsEmulator, name: string) => fetch(`${e.url}/storage/v1/b/rate/o/${encodeURIComponent(name)}`, { method: 'DELETE' });

  it('writes to one name past the burst: 429 rateLimitExceeded, shaped like GCS; other names unaffected', async () => {
    expect((await upload(limited, 'a')).status).toBe(200);
    expect((await upload(limited, 'a')).status).toBe(200);
    const r = await upload(limited, 'a');
    expect(r.status).toBe(429);
    const body = (await r.json()) as { error: { code: number; errors: Array<{ reason: string }> } };
    expect(body.error.code).toBe(429);
    expect(body.error.errors[0]?.reason).toBe('rateLimitExceeded');
    expect((await upload(limited, 'b')).status).toBe(200);
    // a delete is a mutation of the name too
    expect((await remove(limited, 'a')).status).toBe(429);
    // the refused write changed nothing: the object is the second upload's
    const meta = (await (await fetch(`${limited.url}/storage/v1/b/rate/o/a`)).json()) as { generation: string };
    expect(meta.generation).toBeDefined();
  });

  it('metadata updates have their own allowance', async () => {
    expect((await upload(limited, 'm')).status).toBe(200);
    expect((await patch(limited, 'm', '1')).status).toBe(200);
    expect((await patch(limited, 'm', '2')).status).toBe(200);
    expect((await patch(limited, 'm', '3')).status).toBe(429);
    // writes were not spent by the patches
    expect((await upload(limited, 'm')).status).toBe(200);
  });

  it('the rate refills with time (the limiter on its own clock)', () => {
    const l = new ObjectRateLimiter({ perSecond: 1, burst: 2 });
    l.take('b', 'a', 'write', 0);
    l.take('b', 'a', 'write', 10);
    expect(() => l.take('b', 'a', 'write', 20)).toThrow(/rate limit/);
    expect(() => l.take('b', 'a', 'write', 900)).toThrow(/rate limit/); // 0.9 of a token back
    l.take('b', 'a', 'write', 1_100); // one back after a second
    expect(() => l.take('b', 'a', 'write', 1_150)).toThrow(/rate limit/);
    l.take('b', 'a', 'metadata', 1_150); // its own allowance
    l.take('b', 'a', 'write', 5_000);
    l.take('b', 'a', 'write', 5_001); // a full burst again after a long pause
  });

  it('off by default: any number of mutations of one name succeed', async () => {
    for (let i = 0; i < 10; i++) expect((await upload(free, 'a')).status).toBe(200);
    for (let i = 0; i < 10; i++) expect((await patch(free, 'a', String(i))).status).toBe(200);
  });
});
