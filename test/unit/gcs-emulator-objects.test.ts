import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { CRC32C, type Bucket } from '@google-cloud/storage';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulatorFixture, type EmulatorFixture } from '../helpers/gcs-emulator.js';

// Conformance of the emulator with the GCS JSON API, driven only through @google-cloud/storage.

let fx: EmulatorFixture;
let bucket: Bucket;

beforeAll(async () => {
  fx = await startEmulatorFixture();
  [bucket] = await fx.storage.createBucket('objects-test');
});
afterAll(async () => fx?.stop());

const md5 = (b: Buffer) => createHash('md5').update(b).digest('base64');
const crc32c = (b: Buffer) => {
  const c = new CRC32C();
  c.update(b);
  return c.toString();
};

async function status(p: Promise<unknown>): Promise<number | string | undefined> {
  try {
    await p;
    return 'ok';
  } catch (err) {
    // ApiError carries the status in `code`; resumable uploads fail with a GaxiosError that
    // has it in `status` only.
    const e = err as { code?: number | string; status?: number };
    return e.code ?? e.status;
  }
}

describe('buckets', () => {
  it('creates, gets, lists and refuses duplicates like GCS', async () => {
    const [b] = await fx.storage.createBucket('second-bucket');
    const [meta] = await b.getMetadata();
    expect(meta.name).toBe('second-bucket');
    expect(meta.kind).toBe('storage#bucket');
    expect((await b.exists())[0]).toBe(true);
    expect(await status(fx.storage.createBucket('second-bucket'))).toBe(409);
    const [all] = await fx.storage.getBuckets();
    expect(all.map((x) => x.name)).toEqual(expect.arrayContaining(['objects-test', 'second-bucket']));
    await b.file('x').save('x', { resumable: false });
    expect(await status(b.delete())).toBe(409); // not empty
    await b.file('x').delete();
    await b.delete();
    expect((await b.exists())[0]).toBe(false);
  });

  it('answers 404 for a missing bucket with a GCS-shaped error', async () => {
    try {
      await fx.storage.bucket('no-such-bucket').getMetadata();
      expect.unreachable();
    } catch (err) {
      const e = err as { code: number; errors: Array<{ reason: string; domain: string }>; message: string };
      expect(e.code).toBe(404);
      expect(e.errors[0]).toMatchObject({ reason: 'notFound', domain: 'global' });
      expect(e.message).toMatch(/bucket does not exist/);
    }
  });
});

describe('uploads and object metadata', () => {
  it('multipart upload stores bytes, content type, custom metadata, hashes and generations', async () => {
    const data = Buffer.from('hello, emulator');
    const f = bucket.file('dir/hello.txt');
    await f.save(data, { resumable: false, metadata: { contentType: 'text/plain', metadata: { a: '1', gcsfuse_mtime: '2024-05-01T10:20:30.123456789Z' } } });
    const [m] = await f.getMetadata();
    expect(m.name).toBe('dir/hello.txt');
    expect(m.size).toBe(String(data.length));
    expect(m.contentType).toBe('text/plain');
    expect(m.metadata).toEqual({ a: '1', gcsfuse_mtime: '2024-05-01T10:20:30.123456789Z' });
    expect(m.md5Hash).toBe(md5(data));
    expect(m.crc32c).toBe(crc32c(data));
    expect(m.metageneration).toBe('1');
    expect(typeof m.generation).toBe('string');
    expect(BigInt(m.generation as string)).toBeGreaterThan(0n);
    const [back] = await f.download(); // validated by the client against x-goog-hash
    expect(back.equals(data)).toBe(true);
  });

  it('every write makes a new, larger generation; the old one is gone (no versioning)', async () => {
    const f = bucket.file('gen.txt');
    await f.save('one', { resumable: false });
    const [m1] = await f.getMetadata();
    await f.save('two', { resumable: false });
    const [m2] = await f.getMetadata();
    expect(BigInt(m2.generation as string)).toBeGreaterThan(BigInt(m1.generation as string));
    expect(m2.metageneration).toBe('1');
    expect(await status(bucket.file('gen.txt', { generation: m1.generation as string }).download())).toBe(404);
    const [cur] = await bucket.file('gen.txt', { generation: m2.generation as string }).download();
    expect(cur.toString()).toBe('two');
  });

  it('resumable upload of a few MiB in 1 MiB chunks (308 Resume Incomplete in between)', async () => {
    const data = randomBytes(5 * 1024 * 1024 + 12345);
    const f = bucket.file('big/resumable.bin');
    const before = (await fx.stats()).byMethod.PUT ?? 0;
    await f.save(data, { resumable: true, chunkSize: 1024 * 1024, metadata: { metadata: { k: 'v' } } });
    const puts = ((await fx.stats()).byMethod.PUT ?? 0) - before;
    expect(puts).toBe(6);
    const [m] = await f.getMetadata();
    expect(Number(m.size)).toBe(data.length);
    expect(m.metadata).toEqual({ k: 'v' });
    const [back] = await f.download();
    expect(back.equals(data)).toBe(true);
  });

  it('resumable upload streamed in one request (Content-Range bytes 0-*/*)', async () => {
    const data = randomBytes(700 * 1024);
    const f = bucket.file('big/streamed.bin');
    await pipeline(Readable.from([data.subarray(0, 100_000), data.subarray(100_000)]), f.createWriteStream({ resumable: true }));
    const [back] = await f.download();
    expect(back.equals(data)).toBe(true);
  });

  it('an upload session created first and written later (createResumableUpload, then the session URI)', async () => {
    const f = bucket.file('big/session.bin');
    const [uri] = await f.createResumableUpload();
    expect(uri).toMatch(/upload_id=/);
    const data = randomBytes(300 * 1024);
    await pipeline(Readable.from([data]), f.createWriteStream({ uri, resumable: true, chunkSize: 256 * 1024 }));
    const [back] = await f.download();
    expect(back.equals(data)).toBe(true);
  });

  it('empty objects upload and download', async () => {
    const f = bucket.file('empty');
    await f.save(Buffer.alloc(0), { resumable: false });
    const [m] = await f.getMetadata();
    expect(m.size).toBe('0');
    const [back] = await f.download();
    expect(back.length).toBe(0);
  });

  it('rejects names GCS rejects', async () => {
    expect(await status(bucket.file('a\nb').save('x', { resumable: false }))).toBe(400);
    expect(await status(bucket.file('..').save('x', { resumable: false }))).toBe(400);
  });
});

describe('ranged downloads', () => {
  const data = Buffer.from(Array.from({ length: 1000 }, (_, i) => i % 251));
  beforeAll(async () => {
    await bucket.file('range.bin').save(data, { resumable: false });
  });

  it('start-end (inclusive), open-ended, and last-bytes ranges', async () => {
    const f = bucket.file('range.bin');
    expect((await f.download({ start: 10, end: 19 }))[0].equals(data.subarray(10, 20))).toBe(true);
    expect((await f.download({ start: 990 }))[0].equals(data.subarray(990))).toBe(true);
    expect((await f.download({ start: 0, end: 0 }))[0].equals(data.subarray(0, 1))).toBe(true);
    expect((await f.download({ start: 500, end: 5000 }))[0].equals(data.subarray(500))).toBe(true);
    expect((await f.download({ end: -10 }))[0].equals(data.subarray(990))).toBe(true);
  });

  it('a range starting past the end is 416', async () => {
    expect(await status(bucket.file('range.bin').download({ start: 1000, end: 1010 }))).toBe(416);
  });

  it('reads of a specific generation', async () => {
    const [m] = await bucket.file('range.bin').getMetadata();
    const [part] = await bucket.file('range.bin', { generation: m.generation as string }).download({ start: 1, end: 2 });
    expect(part.equals(data.subarray(1, 3))).toBe(true);
  });
});

describe('preconditions', () => {
  it('ifGenerationMatch on uploads: 0 means "must not exist"; a stale generation is 412', async () => {
    const f = bucket.file('pre/upload.txt');
    await f.save('v1', { resumable: false, preconditionOpts: { ifGenerationMatch: 0 } });
    expect(await status(f.save('again', { resumable: false, preconditionOpts: { ifGenerationMatch: 0 } }))).toBe(412);
    const [m1] = await f.getMetadata();
    await f.save('v2', { resumable: false, preconditionOpts: { ifGenerationMatch: m1.generation as number } });
    expect(await status(f.save('v3', { resumable: false, preconditionOpts: { ifGenerationMatch: m1.generation as number } }))).toBe(412);
    expect((await f.download())[0].toString()).toBe('v2');
  });

  it('the 412 body is GCS-shaped', async () => {
    try {
      await bucket.file('pre/upload.txt').save('x', { resumable: false, preconditionOpts: { ifGenerationMatch: 1 } });
      expect.unreachable();
    } catch (err) {
      const e = err as { code: number; errors: Array<{ reason: string }> };
      expect(e.code).toBe(412);
      expect(e.errors[0]?.reason).toBe('conditionNotMet');
    }
  });

  it('ifGenerationMatch on resumable uploads is checked at the start and at completion', async () => {
    const f = bucket.file('pre/resumable.bin');
    await f.save('first', { resumable: false });
    const data = randomBytes(600 * 1024);
    expect(await status(f.save(data, { resumable: true, chunkSize: 256 * 1024, preconditionOpts: { ifGenerationMatch: 0 } }))).toBe(412);
    // A session started while the object was absent fails at completion if it appeared meanwhile.
    const g = bucket.file('pre/racing.bin');
    const [uri] = await g.createResumableUpload({ preconditionOpts: { ifGenerationMatch: 0 } });
    await g.save('winner', { resumable: false });
    const err = await status(pipeline(Readable.from([data]), g.createWriteStream({ uri, resumable: true })));
    expect(err).toBe(412);
    expect((await g.download())[0].toString()).toBe('winner');
  });

  it('ifGenerationNotMatch on uploads and reads (304 on a read)', async () => {
    const f = bucket.file('pre/notmatch.txt');
    await f.save('a', { resumable: false });
    const [m] = await f.getMetadata();
    expect(await status(f.save('b', { resumable: false, preconditionOpts: { ifGenerationNotMatch: m.generation as number } }))).toBe(412);
    expect(await status(f.getMetadata({ ifGenerationNotMatch: m.generation as number }))).toBe(304);
    expect(await status(f.getMetadata({ ifGenerationMatch: m.generation as number }))).toBe('ok');
    expect(await status(f.getMetadata({ ifGenerationMatch: 1 }))).toBe(412);
  });

  it('metadata patch bumps metageneration only; ifMetagenerationMatch guards it', async () => {
    const f = bucket.file('pre/meta.txt');
    await f.save('m', { resumable: false, metadata: { metadata: { keep: 'yes', drop: 'me' } } });
    const [m1] = await f.getMetadata();
    const [m2] = await f.setMetadata({ metadata: { added: '1', drop: null } }, { ifMetagenerationMatch: 1 });
    expect(m2.generation).toBe(m1.generation);
    expect(m2.metageneration).toBe('2');
    expect(m2.metadata).toEqual({ keep: 'yes', added: '1' });
    expect(await status(f.setMetadata({ metadata: { late: '1' } }, { ifMetagenerationMatch: 1 }))).toBe(412);
    expect(await status(f.setMetadata({ metadata: { late: '1' } }, { ifMetagenerationNotMatch: 2 }))).toBe(412);
    expect(await status(f.setMetadata({ metadata: { late: '1' } }, { ifGenerationMatch: 1 }))).toBe(412);
    const [m3] = await f.setMetadata({ contentType: 'text/x-test', metadata: { late: '1' } }, { ifMetagenerationMatch: 2, ifGenerationMatch: m1.generation as number });
    expect(m3.metageneration).toBe('3');
    expect(m3.contentType).toBe('text/x-test');
    expect(m3.metadata).toEqual({ keep: 'yes', added: '1', late: '1' });
    const [m4] = await f.setMetadata({ metadata: null });
    expect(m4.metadata).toBeUndefined();
  });

  it('delete honours ifGenerationMatch; a missing object is 404 (or ignored on request)', async () => {
    const f = bucket.file('pre/delete.txt');
    await f.save('d', { resumable: false });
    const [m] = await f.getMetadata();
    expect(await status(f.delete({ ifGenerationMatch: 1 }))).toBe(412);
    await f.delete({ ifGenerationMatch: m.generation as number });
    expect((await f.exists())[0]).toBe(false);
    expect(await status(f.delete())).toBe(404);
    expect(await status(f.delete({ ignoreNotFound: true }))).toBe('ok');
  });

  it('404 for a missing object is GCS-shaped', async () => {
    try {
      await bucket.file('no/such/object').getMetadata();
      expect.unreachable();
    } catch (err) {
      const e = err as { code: number; message: string; errors: Array<{ reason: string }> };
      expect(e.code).toBe(404);
      expect(e.message).toBe('No such object: objects-test/no/such/object');
      expect(e.errors[0]?.reason).toBe('notFound');
    }
  });
});

describe('copy, rewrite and compose', () => {
  it('copy (rewrite) keeps data and metadata and makes a new object', async () => {
    const src = bucket.file('cp/src.txt');
    await src.save('copy me', { resumable: false, metadata: { contentType: 'text/plain', metadata: { gcsfuse_mtime: '2020-01-01T00:00:00Z' } } });
    const [dst] = await src.copy(bucket.file('cp/dst.txt'));
    const [m] = await dst.getMetadata();
    expect(m.metadata).toEqual({ gcsfuse_mtime: '2020-01-01T00:00:00Z' });
    expect(m.contentType).toBe('text/plain');
    expect((await dst.download())[0].toString()).toBe('copy me');
    const [sm] = await src.getMetadata();
    expect(m.generation).not.toBe(sm.generation);
  });

  it('copy preconditions: destination ifGenerationMatch, source generation', async () => {
    const src = bucket.file('cp/src2.txt');
    await src.save('v1', { resumable: false });
    const [m1] = await src.getMetadata();
    await src.copy(bucket.file('cp/dst2.txt'), { preconditionOpts: { ifGenerationMatch: 0 } });
    expect(await status(src.copy(bucket.file('cp/dst2.txt'), { preconditionOpts: { ifGenerationMatch: 0 } }))).toBe(412);
    await src.save('v2', { resumable: false });
    expect(await status(bucket.file('cp/src2.txt', { generation: m1.generation as string }).copy(bucket.file('cp/dst3.txt')))).toBe(404);
  });

  it('copy across buckets', async () => {
    const [other] = await fx.storage.createBucket('copy-target');
    await bucket.file('cp/src.txt').copy(other.file('in-other.txt'));
    expect((await other.file('in-other.txt').download())[0].toString()).toBe('copy me');
  });

  it('rewrite in several calls linked by rewriteToken', async () => {
    const data = randomBytes(3 * 1024 * 1024);
    await bucket.file('cp/big.bin').save(data, { resumable: false });
    const src = bucket.file('cp/big.bin');
    type RewriteResponse = { done: boolean; rewriteToken?: string; totalBytesRewritten: string; resource?: { name: string } };
    const call = (qs: Record<string, unknown>) =>
      new Promise<RewriteResponse>((resolve, reject) =>
        // The client's low-level request: the same HTTP path file.copy() uses, with the
        // per-call byte limit file.copy() has no option for.
        (src as unknown as { request: (o: unknown, cb: (e: Error | null, r: RewriteResponse) => void) => void }).request(
          { method: 'POST', uri: `/rewriteTo/b/objects-test/o/${encodeURIComponent('cp/rewritten.bin')}`, qs, json: {} },
          (e, r) => (e ? reject(e) : resolve(r)),
        ),
      );
    let r = await call({ maxBytesRewrittenPerCall: 1024 * 1024 });
    const progress: string[] = [r.totalBytesRewritten];
    expect(r.done).toBe(false);
    expect((await bucket.file('cp/rewritten.bin').exists())[0]).toBe(false);
    while (!r.done) {
      r = await call({ maxBytesRewrittenPerCall: 1024 * 1024, rewriteToken: r.rewriteToken });
      progress.push(r.totalBytesRewritten);
    }
    expect(progress).toEqual(['1048576', '2097152', '3145728']);
    expect(r.resource?.name).toBe('cp/rewritten.bin');
    expect((await bucket.file('cp/rewritten.bin').download())[0].equals(data)).toBe(true);
  });

  it('compose concatenates sources; the result has a component count and no MD5', async () => {
    const parts = ['alpha-', 'beta-', 'gamma'];
    for (const [i, p] of parts.entries()) await bucket.file(`compose/part${i}`).save(p, { resumable: false });
    const [composed] = await bucket.combine(
      parts.map((_, i) => `compose/part${i}`),
      bucket.file('compose/whole.txt'),
    );
    const [m] = await composed.getMetadata();
    expect(m.componentCount).toBe(3);
    expect(m.md5Hash).toBeUndefined();
    expect(m.crc32c).toBe(crc32c(Buffer.from(parts.join(''))));
    expect((await composed.download())[0].toString()).toBe('alpha-beta-gamma');
  });

  it('compose checks source generations and destination preconditions', async () => {
    const [m0] = await bucket.file('compose/part0').getMetadata();
    await bucket.file('compose/part0').save('changed-', { resumable: false });
    const stale = bucket.file('compose/part0', { generation: m0.generation as string });
    expect(await status(bucket.combine([stale, 'compose/part1'], 'compose/bad.txt'))).toBe(404);
    expect(await status(bucket.combine(['compose/part0', 'compose/part1'], bucket.file('compose/whole.txt'), { ifGenerationMatch: 0 }))).toBe(412);
    const many = Array.from({ length: 33 }, () => 'compose/part1');
    expect(await status(bucket.combine(many, 'compose/too-many.txt'))).toBe(400);
  });
});
