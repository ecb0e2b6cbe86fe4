import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { Storage, type Bucket } from '@google-cloud/storage';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpStatus, isPreconditionFailed, isTransient } from '../../src/backend/gcs/errors.js';
import { crc32cOf, JsonApi } from '../../src/backend/gcs/json-api.js';
import { startEmulatorFixture, type EmulatorFixture } from '../helpers/gcs-emulator.js';

// The small-object uploads sent on the JSON API directly (json-api.ts): what lands in the
// bucket is what was sent, with its metadata, and failures take the shapes errors.ts and the
// retry policy read (a status for HTTP answers, a transient code for a dead connection).

let fx: EmulatorFixture;
let bucket: Bucket;
let api: JsonApi;
beforeAll(async () => {
  fx = await startEmulatorFixture({ retries: false });
  [bucket] = await fx.storage.createBucket('json-api-test');
  api = new JsonApi(fx.storage, 'json-api-test', { authenticate: false, requestTimeoutMs: 10_000 });
});
afterAll(async () => {
  api?.close();
  await fx?.stop();
});

describe('JsonApi.multipartUpload', () => {
  it('uploads binary bytes (boundary-like content too) with metadata, and answers the object resource', async () => {
    const data = Buffer.concat([randomBytes(5000), Buffer.from('\r\n--x--\r\n'), Buffer.alloc(3)]);
    const r = await api.multipartUpload('dir/a b+ü.bin', data, { ifGenerationMatch: 0n, metadata: { 'goog-reserved-posix-mode': '640' } });
    expect(r.name).toBe('dir/a b+ü.bin');
    expect(r.size).toBe(String(data.length));
    const [got] = await bucket.file('dir/a b+ü.bin').download();
    expect(got.equals(data)).toBe(true);
    const [meta] = await bucket.file('dir/a b+ü.bin').getMetadata();
    expect(meta.metadata).toEqual({ 'goog-reserved-posix-mode': '640' });
    expect(meta.generation).toBe(r.generation);
    expect(meta.crc32c).toBe(r.crc32c);
  });

  it('an empty object and a content type', async () => {
    const r = await api.multipartUpload('empty.json', Buffer.alloc(0), { ifGenerationMatch: 0n, contentType: 'application/json', metadata: {} });
    expect(r.size).toBe('0');
    expect(r.contentType).toBe('application/json');
  });

  it('a failed precondition is a 412 the backend recognises; a matching one replaces the object', async () => {
    const first = await api.multipartUpload('p', Buffer.from('one'), { ifGenerationMatch: 0n, metadata: {} });
    const err = await api.multipartUpload('p', Buffer.from('two'), { ifGenerationMatch: 0n, metadata: {} }).catch((e: unknown) => e);
    expect(httpStatus(err)).toBe(412);
    expect(isPreconditionFailed(err)).toBe(true);
    expect(isTransient(err)).toBe(false);
    await api.multipartUpload('p', Buffer.from('two'), { ifGenerationMatch: BigInt(first.generation as string), ifMetagenerationMatch: 1n, metadata: {} });
    expect((await bucket.file('p').download())[0].toString()).toBe('two');
  });

  it('a 503 is transient (retried), a missing bucket is a 404', async () => {
    await fx.fault({ status: 503, count: 1, pathPrefix: '/upload/' });
    const err = await api.multipartUpload('q', Buffer.from('x'), { ifGenerationMatch: 0n, metadata: {} }).catch((e: unknown) => e);
    expect(httpStatus(err)).toBe(503);
    expect(isTransient(err)).toBe(true);
    const other = new JsonApi(fx.storage, 'no-such-bucket', { authenticate: false, requestTimeoutMs: 10_000 });
    try {
      expect(httpStatus(await other.multipartUpload('q', Buffer.from('x'), { ifGenerationMatch: 0n, metadata: {} }).catch((e: unknown) => e))).toBe(404);
    } finally {
      other.close();
    }
  });

  it('bytes changed on the way are refused by the checksum the upload carries: nothing lands', async () => {
    // a proxy that flips one byte of the object's data as it passes (the request's length kept)
    const emu = new URL(fx.emu.url);
    const srv = net.createServer((c) => {
      const up = net.connect(Number(emu.port), emu.hostname);
      c.on('data', (d: Buffer) => up.write(Buffer.from(d.toString('latin1').replace('PAYLOAD-M', 'PAYLOAD-N'), 'latin1')));
      up.pipe(c);
      c.on('error', () => up.destroy());
      up.on('error', () => c.destroy());
      c.on('close', () => up.destroy());
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const port = (srv.address() as net.AddressInfo).port;
    const through = new JsonApi(new Storage({ apiEndpoint: `http://127.0.0.1:${port}`, projectId: 't' }), 'json-api-test', { authenticate: false, requestTimeoutMs: 5_000 });
    try {
      const data = Buffer.concat([randomBytes(3000), Buffer.from('PAYLOAD-MARKER'), randomBytes(1000)]);
      const err = await through.multipartUpload('corrupted', data, { ifGenerationMatch: 0n, metadata: {} }).catch((e: unknown) => e);
      expect(httpStatus(err)).toBe(400);
      expect(String((err as Error).message)).toMatch(/CRC32C/);
      expect((await bucket.file('corrupted').exists())[0]).toBe(false);
      // the same bytes unchanged land, with the checksum GCS computed equal to ours
      const ok = await through.multipartUpload('intact', Buffer.from('no marker here'), { ifGenerationMatch: 0n, metadata: {} });
      expect(ok.crc32c).toBe(crc32cOf(Buffer.from('no marker here')));
    } finally {
      through.close();
      await new Promise((r) => srv.close(r));
    }
  });

  it('a connection that is refused or dropped is transient', async () => {
    const srv = net.createServer((s) => s.destroy());
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const port = (srv.address() as net.AddressInfo).port;
    const dropped = new JsonApi(new Storage({ apiEndpoint: `http://127.0.0.1:${port}`, projectId: 't' }), 'b', { authenticate: false, requestTimeoutMs: 5_000 });
    try {
      const err = await dropped.multipartUpload('k', Buffer.from('x'), { ifGenerationMatch: 0n, metadata: {} }).catch((e: unknown) => e);
      expect(httpStatus(err)).toBeUndefined();
      expect(isTransient(err)).toBe(true);
    } finally {
      dropped.close();
      await new Promise((r) => srv.close(r));
    }
  });
});

describe('JsonApi credentials', () => {
  // google-auth-library 9 answers getRequestHeaders() with a plain object, 10 with a fetch
  // Headers (whose entries Object.assign does not see): either must reach the request.
  for (const [kind, make, want] of [
    ['a plain object', () => ({ Authorization: 'Bearer t-plain' }), 'Bearer t-plain'],
    ['a fetch Headers', () => new Headers({ Authorization: 'Bearer t-headers' }), 'Bearer t-headers'],
  ] as const) {
    it(`sends the client's Authorization header given as ${kind}`, async () => {
      const http = await import('node:http');
      let seen: string | undefined;
      const server = http.createServer((req, res) => {
        seen = req.headers.authorization;
        req.resume().on('end', () => res.setHeader('Content-Type', 'application/json').end('{"name":"x"}'));
      });
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      const port = (server.address() as net.AddressInfo).port;
      const storage = { apiEndpoint: `http://127.0.0.1:${port}`, authClient: { getRequestHeaders: async () => make() } } as unknown as Storage;
      const authed = new JsonApi(storage, 'b', { authenticate: true, requestTimeoutMs: 5_000 });
      try {
        await authed.multipartUpload('x', Buffer.from('x'), { ifGenerationMatch: 0n, metadata: {} });
        expect(seen).toBe(want);
      } finally {
        authed.close();
        server.close();
      }
    });
  }
});
