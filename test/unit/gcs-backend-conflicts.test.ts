import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { Bucket } from '@google-cloud/storage';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createGcsBackend, GcsSetupError, type GcsBackend, type GcsConflict } from '../../src/backend/gcs.js';
import { startEmulatorFixture, testBackendOptions, type EmulatorFixture } from '../helpers/gcs-emulator.js';
import { expectCode, makeTemp, rmTemp } from '../helpers/tmp.js';

// Concurrent writers (generation preconditions), retries, lost responses, timeouts, a full
// staging disk, and setup errors.

let fx: EmulatorFixture;
let raw: Bucket; // a second client: another host writing the same bucket
let staging: string;
let b: GcsBackend;
let conflicts: GcsConflict[];
let n = 0;
let prefix: string;

beforeAll(async () => {
  fx = await startEmulatorFixture();
  [raw] = await fx.storage.createBucket('conflict-test');
  staging = makeTemp('gcs-staging');
});
afterAll(async () => {
  await fx?.stop();
  rmTemp(staging);
});
beforeEach(async () => {
  prefix = `t${++n}`;
  conflicts = [];
  b = await createGcsBackend(testBackendOptions(fx.emu.url, 'conflict-test', staging, { prefix, onConflict: (c: GcsConflict) => conflicts.push(c) }));
});
afterEach(async () => {
  await fx.clearFaults();
  await b?.close();
});

const obj = (name: string) => raw.file(`${prefix}/${name}`);
const content = async (name: string) => (await obj(name).download())[0].toString();

async function writeFile(p: string, data: string): Promise<void> {
  const f = await b.open(p, { write: true, create: true, truncate: true });
  await f.write(Buffer.from(data), Buffer.byteLength(data), 0);
  await f.close();
}

describe('another writer changed the object (ifGenerationMatch)', () => {
  it('fsync fails with ESTALE, the other version stays, ours is kept and reported', async () => {
    await writeFile('/doc.txt', 'original');
    const f = await b.open('/doc.txt', { write: true });
    await f.write(Buffer.from('OURS'), 4, 0);
    await obj('doc.txt').save('theirs', { resumable: false }); // another host, meanwhile
    await expectCode(f.sync(false), 'ESTALE');
    expect(await content('doc.txt')).toBe('theirs');
    expect(conflicts).toHaveLength(1);
    const c = conflicts[0] as GcsConflict;
    expect(c).toMatchObject({ reason: 'changed-remotely', path: '/doc.txt', objectName: `${prefix}/doc.txt`, size: 8 });
    expect(BigInt(c.currentGeneration as string)).toBeGreaterThan(BigInt(c.expectedGeneration));
    expect(fs.readFileSync(c.localFile, 'utf8')).toBe('OURSinal');
    expect(c.localFile.startsWith(path.join(staging, 'conflicts'))).toBe(true);
    // Later writes go on into the kept file; close reports the conflict again and keeps it.
    await f.write(Buffer.from('!'), 1, 8);
    await expectCode(f.close(), 'ESTALE');
    expect(fs.readFileSync(c.localFile, 'utf8')).toBe('OURSinal!');
    expect(await content('doc.txt')).toBe('theirs');
    expect(b.conflicts).toHaveLength(1);
  });

  it('a new file deleted by someone else before our upload: ESTALE, data kept', async () => {
    const f = await b.open('/new.txt', { write: true, create: true });
    await f.write(Buffer.from('fresh'), 5, 0);
    await obj('new.txt').delete();
    await expectCode(f.close(), 'ESTALE');
    expect(conflicts[0]?.currentGeneration).toBeUndefined();
    expect(fs.readFileSync(conflicts[0]?.localFile as string, 'utf8')).toBe('fresh');
    expect((await obj('new.txt').exists())[0]).toBe(false);
  });

  it('a metadata change elsewhere (metageneration) also refuses the upload', async () => {
    await writeFile('/m.txt', 'm');
    const f = await b.open('/m.txt', { write: true });
    await f.write(Buffer.from('M'), 1, 0);
    await obj('m.txt').setMetadata({ metadata: { 'goog-reserved-posix-mode': '600' } });
    await expectCode(f.close(), 'ESTALE');
    expect(await content('m.txt')).toBe('m');
  });

  it('two backends (two hosts) racing on one file: one wins, the other gets ESTALE', async () => {
    const other = await createGcsBackend(testBackendOptions(fx.emu.url, 'conflict-test', staging, { prefix }));
    await writeFile('/race.txt', 'base');
    const mine = await b.open('/race.txt', { write: true });
    const theirs = await other.open('/race.txt', { write: true });
    await mine.write(Buffer.from('MINE'), 4, 0);
    await theirs.write(Buffer.from('THEIRS'), 6, 0);
    await theirs.close();
    await expectCode(mine.close(), 'ESTALE');
    expect(await content('race.txt')).toBe('THEIRS');
    expect(other.conflicts).toHaveLength(0);
  });

  it('a reader of a replaced generation gets ESTALE instead of mixing versions', async () => {
    await writeFile('/r.txt', 'version one');
    const f = await b.open('/r.txt', { write: false });
    const buf = Buffer.alloc(7);
    expect(await f.read(buf, 7, 0)).toBe(7);
    await obj('r.txt').save('version two', { resumable: false });
    await expectCode(f.read(buf, 4, 7), 'ESTALE');
    await f.close();
  });

  it('O_EXCL create races are decided by GCS', async () => {
    const other = await createGcsBackend(testBackendOptions(fx.emu.url, 'conflict-test', staging, { prefix }));
    const results = await Promise.allSettled([
      b.open('/excl', { write: true, create: true, exclusive: true }),
      other.open('/excl', { write: true, create: true, exclusive: true }),
    ]);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    const failed = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
    expect((failed.reason as { code: string }).code).toBe('EEXIST');
    for (const r of results) if (r.status === 'fulfilled') await r.value.close();
  });
});

describe('retries', () => {
  it('503s on lookups, listings, uploads and reads are retried transparently', async () => {
    const before = b.retries;
    await fx.fault([
      { status: 503, count: 2, method: 'GET', pathPrefix: `/storage/v1/b/conflict-test/o/${prefix}/f.txt` },
      { status: 503, count: 2, method: 'POST', pathPrefix: '/upload/' },
    ]);
    await writeFile('/f.txt', 'survived');
    await fx.fault([
      { status: 429, count: 1, method: 'GET', pathPrefix: '/storage/v1/b/conflict-test/o' },
      { status: 502, count: 1, method: 'DELETE' },
    ]);
    const f = await b.open('/f.txt', { write: false });
    const buf = Buffer.alloc(20);
    await fx.fault({ status: 503, count: 2, method: 'GET', pathPrefix: `/storage/v1/b/conflict-test/o/${prefix}` });
    expect(await f.read(buf, 20, 0)).toBe(8);
    await f.close();
    expect(buf.subarray(0, 8).toString()).toBe('survived');
    await b.rename('/f.txt', '/g.txt');
    expect((await b.readdir('/')).map((e) => e.name)).toEqual(['g.txt']);
    expect(b.retries - before).toBeGreaterThanOrEqual(8);
  });

  it('a lost upload response (applied, then 503) is recognized on retry, not taken for a conflict', async () => {
    await writeFile('/lost.txt', 'v1');
    const f = await b.open('/lost.txt', { write: true });
    await f.write(Buffer.from('v2'), 2, 0);
    await fx.fault({ status: 503, when: 'after', method: 'POST', pathPrefix: '/upload/' });
    await f.close();
    expect(await content('lost.txt')).toBe('v2');
    expect(conflicts).toHaveLength(0);
  });

  it('lost responses of delete, copy and metadata patch are recognized too', async () => {
    await writeFile('/a', 'a');
    await fx.fault({ status: 503, when: 'after', method: 'PATCH' });
    await b.chmod('/a', 0o600);
    await fx.fault({ status: 503, when: 'after', method: 'POST', pathPrefix: `/storage/v1/b/conflict-test/o/${prefix}` });
    await fx.fault({ status: 503, when: 'after', method: 'DELETE' });
    await b.rename('/a', '/b');
    expect(await content('b')).toBe('a');
    expect((await obj('a').exists())[0]).toBe(false);
    expect((await b.stat('/b')).mode & 0o7777).toBe(0o600);
  });

  it('a resumable upload continues its session after a failed chunk', async () => {
    const data = 'z'.repeat(1300 * 1024);
    await fx.fault({ status: 503, count: 1, method: 'PUT', pathPrefix: '/upload/' });
    const puts = (await fx.stats()).byMethod.PUT ?? 0;
    await writeFile('/big', data);
    expect(await content('big')).toBe(data);
    // 6 chunks, one failed and resent, plus one status query to learn where to resume.
    expect(((await fx.stats()).byMethod.PUT ?? 0) - puts).toBe(8);
  });

  it('a slow response beyond the request timeout is abandoned and retried', async () => {
    const quick = await createGcsBackend(testBackendOptions(fx.emu.url, 'conflict-test', staging, { prefix, requestTimeoutMs: 300 }));
    await writeFile('/slow.txt', 'slow');
    await fx.fault({ status: 0, delayMs: 1000, count: 1, method: 'GET', pathPrefix: `/storage/v1/b/conflict-test/o/${prefix}/slow.txt` });
    const t0 = Date.now();
    expect((await quick.stat('/slow.txt')).size).toBe(4);
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(quick.retries).toBeGreaterThanOrEqual(1);
  });

  it('gives up with EIO when GCS stays unavailable', async () => {
    const brief = await createGcsBackend(testBackendOptions(fx.emu.url, 'conflict-test', staging, { prefix, retryAttempts: 3 }));
    await fx.fault({ status: 503, count: -1, method: 'GET' });
    await expectCode(brief.stat('/anything'), 'EIO');
    expect(brief.retries).toBeGreaterThanOrEqual(2);
  });

  it('an upload that fails at close is kept, not dropped', async () => {
    const brief = await createGcsBackend(testBackendOptions(fx.emu.url, 'conflict-test', staging, { prefix, retryAttempts: 2, onConflict: (c: GcsConflict) => conflicts.push(c) }));
    const f = await brief.open('/unsaved.txt', { write: true, create: true });
    await f.write(Buffer.from('precious'), 8, 0);
    await fx.fault({ status: 503, count: -1, method: 'POST', pathPrefix: '/upload/' });
    await expectCode(f.close(), 'EIO');
    expect(conflicts).toHaveLength(1);
    expect(conflicts[0]?.reason).toBe('upload-failed');
    expect(fs.readFileSync(conflicts[0]?.localFile as string, 'utf8')).toBe('precious');
  });

  it('fsync that fails with EIO has kept the bytes already, and nothing uploads them once GCS is back (issue 21)', async () => {
    const brief = await createGcsBackend(testBackendOptions(fx.emu.url, 'conflict-test', staging, { prefix, retryAttempts: 2, onConflict: (c: GcsConflict) => conflicts.push(c) }));
    await writeFile('/kept.txt', 'old');
    const f = await brief.open('/kept.txt', { write: true });
    await f.write(Buffer.from('NEW'), 3, 0);
    await fx.fault({ status: 503, count: -1, method: 'POST', pathPrefix: '/upload/' });
    await expectCode(f.sync(false), 'EIO');
    expect(conflicts).toHaveLength(1);
    expect(conflicts[0]).toMatchObject({ reason: 'upload-failed', path: '/kept.txt' });
    expect(fs.readFileSync(conflicts[0]?.localFile as string, 'utf8')).toBe('NEW');
    await fx.clearFaults(); // GCS is back: the handle still does not upload, and says why
    await expectCode(f.sync(false), 'EIO');
    await expectCode(f.close(), 'EIO');
    expect(await content('kept.txt')).toBe('old');
    expect(conflicts).toHaveLength(1);
    expect(fs.readFileSync(conflicts[0]?.localFile as string, 'utf8')).toBe('NEW');
  });

  it('an upload whose last attempt landed with its answer lost is a success, not EIO (issue 21)', async () => {
    const brief = await createGcsBackend(testBackendOptions(fx.emu.url, 'conflict-test', staging, { prefix, retryAttempts: 2, onConflict: (c: GcsConflict) => conflicts.push(c) }));
    const f = await brief.open('/lost.txt', { write: true, create: true });
    await f.write(Buffer.from('landed'), 6, 0);
    // attempt 1: refused before it takes effect; attempt 2 (the last): applied, answer lost
    await fx.fault([
      { status: 503, count: 1, method: 'POST', pathPrefix: '/upload/' },
      { status: 503, count: 1, method: 'POST', pathPrefix: '/upload/', when: 'after' },
    ]);
    await f.close();
    expect(await content('lost.txt')).toBe('landed');
    expect(conflicts).toHaveLength(0);
  });
});

describe('one host, several processes (durability journal): no conflict with itself', () => {
  let j: GcsBackend;
  beforeEach(async () => {
    j = await createGcsBackend(testBackendOptions(fx.emu.url, 'conflict-test', staging, { prefix: `${prefix}-j`, durability: 'journal', spoolDir: path.join(staging, `spool-${prefix}`), onConflict: (c: GcsConflict) => conflicts.push(c) }));
  });
  afterEach(async () => {
    await j?.close();
  });

  // the program closes (the kernel's release of its handle comes later, carrying what changed
  // after the flush) and unlinks at once; found by a writer and a second process's utime/chmod
  it('an unlink right after a close waits for the version the release is putting in the queue', async () => {
    for (let round = 0; round < 5; round++) {
      const f = await j.open('/a', { write: true, create: true, truncate: true });
      await f.write(Buffer.from('one'), 3, 0);
      await f.flush();
      await f.write(Buffer.from('two'), 3, 3);
      const closing = f.close();
      await j.unlink('/a');
      await closing;
      expect(await j.uploads?.drain(10_000)).toBe(true);
      expect(conflicts).toEqual([]);
      expect((await raw.file(`${prefix}-j/a`).exists())[0]).toBe(false);
    }
  });
});

describe('setup errors', () => {
  it('a missing bucket is named', async () => {
    const err = await createGcsBackend(testBackendOptions(fx.emu.url, 'no-such-bucket', staging)).catch((e: Error) => e);
    expect(err).toBeInstanceOf(GcsSetupError);
    expect((err as Error).message).toBe('GCS bucket "no-such-bucket" does not exist (or is not visible with these credentials)');
  });

  it('credentials that may list objects but not read the bucket\'s metadata mount (roles/storage.objectAdmin has no storage.buckets.get)', async () => {
    await fx.fault([{ status: 403, count: -1, method: 'GET', path: '/storage/v1/b/conflict-test' }]);
    const ok = await createGcsBackend(testBackendOptions(fx.emu.url, 'conflict-test', staging, { prefix: 'no-bucket-get' }));
    try {
      const f = await ok.open('/made.txt', { write: true, create: true });
      await f.write(Buffer.from('x'), 1, 0);
      await f.close();
      await expect(ok.ping(5000)).resolves.toBeUndefined();
    } finally {
      await ok.close();
    }
  });

  it('credentials that may not list objects are told which permission a mount needs', async () => {
    await fx.fault([{ status: 403, count: -1, method: 'GET', path: '/storage/v1/b/conflict-test/o' }]);
    const err = await createGcsBackend(testBackendOptions(fx.emu.url, 'conflict-test', staging)).catch((e: Error) => e);
    expect(err).toBeInstanceOf(GcsSetupError);
    expect((err as Error).message).toMatch(/^access to GCS bucket "conflict-test" was refused \(403\): a mount needs storage\.objects\.list on it/);
  });

  it('unusable credentials say how to provide them', async () => {
    const keyFile = path.join(staging, 'missing-key.json');
    const err = await createGcsBackend(testBackendOptions(fx.emu.url, 'conflict-test', staging, { keyFile })).catch((e: Error) => e);
    expect(err).toBeInstanceOf(GcsSetupError);
    expect((err as Error).message).toMatch(/no usable Google Cloud credentials for bucket "conflict-test": check that the key file .*missing-key\.json exists/);
  });

  it('an unreachable endpoint is reported as such', async () => {
    const err = await createGcsBackend(testBackendOptions('http://127.0.0.1:1', 'conflict-test', staging)).catch((e: Error) => e);
    expect((err as Error).message).toMatch(/GCS bucket "conflict-test" could not be reached: .*ECONNREFUSED/);
  });
});

describe('staging disk full', () => {
  let small: string | undefined;
  beforeAll(() => {
    // A 1 MiB tmpfs as the staging dir; needs root (CI runs as root), skipped otherwise.
    const dir = makeTemp('gcs-small-staging');
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', dir], { stdio: 'ignore' });
      small = dir;
    } catch {
      rmTemp(dir);
    }
  });
  afterAll(() => {
    if (small) {
      execFileSync('umount', [small]);
      rmTemp(small);
    }
  });

  it('a write that does not fit gives ENOSPC to the writer, and nothing reaches the bucket', async (ctx) => {
    if (!small) ctx.skip();
    const tiny = await createGcsBackend(testBackendOptions(fx.emu.url, 'conflict-test', small as string, { prefix }));
    try {
      const f = await tiny.open('/huge', { write: true, create: true });
      const chunk = Buffer.alloc(256 * 1024, 1);
      let code: string | undefined;
      for (let i = 0; i < 8 && !code; i++) {
        await f.write(chunk, chunk.length, i * chunk.length).catch((e: { code: string }) => (code = e.code));
      }
      expect(code).toBe('ENOSPC');
      await f.truncate(0); // the writer gives up on it
      await f.close();
      expect((await obj('huge').getMetadata())[0].size).toBe('0');
    } finally {
      await tiny.close(); // its emptied staging file, kept open for reuse, goes (the tmpfs is unmounted next)
    }
  });
});
