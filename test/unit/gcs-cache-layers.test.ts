import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { GcsBackend } from '../../src/backend/gcs.js';
import { DEFAULTS } from '../../src/config/index.js';
import { ContentCache } from '../../src/backend/layers/content-cache.js';
import { MetadataCacheLayer } from '../../src/backend/layers/metadata-cache.js';
import { ReadCacheLayer } from '../../src/backend/layers/read-cache.js';
import { ForwardingLayer } from '../../src/backend/layers/forward.js';
import type { Backend, BackendFile, OpenMode } from '../../src/core/backend.js';
import { FakeClock } from '../../src/core/clock.js';
import { gcsBackendPerTest } from '../helpers/gcs-emulator.js';
import { expectCode } from '../helpers/tmp.js';

// The cache layers around the GCS backend, against the emulator; what reaches GCS is read from
// the emulator's request counter. `ctx.raw` is the bucket as another host sees it.

const ctx = gcsBackendPerTest('layers-test');
let gcs: GcsBackend;
let tmp: string;
beforeEach(() => {
  gcs = ctx.b;
  tmp = ctx.tmp;
});

const put = (name: string, data: string | Buffer) => ctx.raw.file(`${ctx.prefix}/${name}`).save(data, { resumable: false });
const requests = async () => (await ctx.fx.stats()).requests;
/** requests `fn` makes */
async function cost(fn: () => Promise<unknown>): Promise<number> {
  const r0 = await requests();
  await fn();
  return (await requests()) - r0;
}

async function readAll(f: BackendFile, chunk = 64 * 1024): Promise<Buffer> {
  const parts: Buffer[] = [];
  for (let pos = 0; ; ) {
    const buf = Buffer.alloc(chunk);
    const got = await f.read(buf, buf.length, pos);
    if (got === 0) break;
    parts.push(buf.subarray(0, got));
    pos += got;
  }
  return Buffer.concat(parts);
}

async function writeFile(b: Backend, p: string, data: string): Promise<void> {
  const f = await b.open(p, { write: true, create: true, truncate: true }, 0o644);
  await f.write(Buffer.from(data), data.length, 0);
  await f.close();
}

/** Until the layer has fetched a tree page (walks run in the background). */
async function walked(c: MetadataCacheLayer, pages = 1): Promise<void> {
  for (let i = 0; i < 500 && c.treePages < pages; i++) await new Promise((r) => setTimeout(r, 10));
}

describe('MetadataCacheLayer', () => {
  let c: MetadataCacheLayer;
  let clock: FakeClock;
  beforeEach(() => {
    clock = new FakeClock();
    c = new MetadataCacheLayer(gcs, { ttlMs: 400, maxEntries: 1000, maxListings: 100, clock });
  });

  it('answers a repeated stat, and a repeated miss, without asking GCS', async () => {
    await put('a.txt', 'hello');
    expect(await cost(() => c.stat('/a.txt'))).toBeGreaterThan(0);
    expect(await cost(() => c.stat('/a.txt'))).toBe(0);
    expect((await c.stat('/a.txt')).size).toBe(5);
    await expectCode(c.stat('/nope'), 'ENOENT');
    expect(await cost(() => expectCode(c.stat('/nope'), 'ENOENT'))).toBe(0);
  });

  it('a listing fills every entry\'s attributes and answers lookups of names it lacks', async () => {
    await Promise.all(['d/x', 'd/y', 'd/sub/z'].map((k) => put(k, k)));
    expect((await c.readdir('/d')).map((e) => e.name).sort()).toEqual(['sub', 'x', 'y']);
    await walked(c); // the page of the tree below /d (it has a subdirectory), in the background
    const free = await cost(async () => {
      expect((await c.stat('/d/x')).size).toBe(3);
      expect((await c.stat('/d/sub')).type).toBe('dir');
      await expectCode(c.stat('/d/absent'), 'ENOENT');
      expect(await c.readdir('/d')).toHaveLength(3);
    });
    expect(free).toBe(0);
  });

  it("a cached directory takes its new mtime/ctime when an entry changes through the layer, without asking GCS", async () => {
    await c.mkdir('/td', 0o755);
    const before = await c.stat('/td');
    await new Promise((r) => setTimeout(r, 5));
    await writeFile(c, '/td/f', 'x');
    const after = await cost(() => c.stat('/td'));
    const a = await c.stat('/td');
    expect(after).toBe(0);
    expect(a.mtimeNs).toBeGreaterThan(before.mtimeNs);
    expect(a.ctimeNs).toBeGreaterThan(before.ctimeNs);
    expect(a.mtimeNs).toBe((await gcs.stat('/td')).mtimeNs);
    await c.unlink('/td/f');
    expect((await c.stat('/td')).mtimeNs).toBeGreaterThan(a.mtimeNs);
  });

  it('every mutation through the layer updates what it cached; nothing stale is served', async () => {
    await put('d/x', 'x');
    await c.readdir('/d');
    await expectCode(c.stat('/d/new'), 'ENOENT');
    await writeFile(c, '/d/new', 'fresh');
    expect((await c.stat('/d/new')).size).toBe(5);
    expect((await c.readdir('/d')).map((e) => e.name).sort()).toEqual(['new', 'x']);
    await c.mkdir('/d/dir', 0o755);
    await c.symlink('x', '/d/link');
    expect((await c.readdir('/d')).map((e) => `${e.name}:${e.type}`).sort()).toEqual(['dir:dir', 'link:symlink', 'new:file', 'x:file']);
    expect(await c.readlink('/d/link')).toBe('x');
    await c.chmod('/d/x', 0o600);
    expect((await c.stat('/d/x')).mode & 0o777).toBe(0o600);
    await c.rename('/d/new', '/d/dir/moved');
    await expectCode(c.stat('/d/new'), 'ENOENT');
    expect((await c.stat('/d/dir/moved')).size).toBe(5);
    await c.rename('/d/dir', '/e');
    await expectCode(c.stat('/d/dir/moved'), 'ENOENT');
    expect((await c.readdir('/e')).map((e) => e.name)).toEqual(['moved']);
    await c.unlink('/d/x');
    await expectCode(c.stat('/d/x'), 'ENOENT');
    expect((await c.readdir('/d')).map((e) => e.name)).toEqual(['link']);
  });

  it('a file open for writing is never answered from the cache; its new size shows at once', async () => {
    await put('w.txt', 'abc');
    await c.stat('/w.txt');
    const f = await c.open('/w.txt', { write: true });
    await f.write(Buffer.from('abcdef'), 6, 0);
    expect((await c.stat('/w.txt')).size).toBe(6);
    await f.close();
    expect((await c.stat('/w.txt')).size).toBe(6);
  });

  it('a new directory is known empty, and a closed file\'s new attributes are known: tar-like creates ask less', async () => {
    await c.mkdir('/t', 0o755);
    expect(await cost(() => expectCode(c.stat('/t/f'), 'ENOENT'))).toBe(0);
    await writeFile(c, '/t/f', 'data');
    expect(await cost(async () => expect((await c.stat('/t/f')).size).toBe(4))).toBe(0);
    expect((await c.readdir('/t')).map((e) => e.name)).toEqual(['f']);
  });

  it("a link the store refuses whole (EPERM) keeps the directory's listing: git's link-then-rename of each object asks nothing", async () => {
    await c.mkdir('/g', 0o755);
    await writeFile(c, '/g/tmp_obj_1', 'blob');
    await expectCode(c.link('/g/tmp_obj_1', '/g/ab12'), 'EPERM');
    expect(await cost(() => expectCode(c.stat('/g/ab12'), 'ENOENT'))).toBe(0);
    expect(await cost(() => expectCode(c.stat('/g/tmp_obj_2'), 'ENOENT'))).toBe(0);
    await c.rename('/g/tmp_obj_1', '/g/ab12');
    expect((await c.readdir('/g')).map((e) => e.name)).toEqual(['ab12']);
  });

  it('a file unlinked or renamed over while open is not brought back by its close', async () => {
    await put('u.txt', 'u');
    const f = await c.open('/u.txt', { write: true });
    await f.write(Buffer.from('more'), 4, 0);
    await c.unlink('/u.txt');
    await f.close();
    await expectCode(c.stat('/u.txt'), 'ENOENT');
    await put('v.txt', 'v');
    await put('w.txt', 'www');
    const g = await c.open('/v.txt', { write: true });
    await g.write(Buffer.from('vv'), 2, 0);
    await c.rename('/w.txt', '/v.txt');
    await g.close();
    expect((await c.stat('/v.txt')).size).toBe(3);
  });

  it('a change by another client shows after the TTL, not before', async () => {
    await put('o.txt', 'one');
    expect((await c.stat('/o.txt')).size).toBe(3);
    await expectCode(c.stat('/other'), 'ENOENT');
    await put('o.txt', 'three');
    await put('other', 'x');
    expect((await c.stat('/o.txt')).size).toBe(3);
    await expectCode(c.stat('/other'), 'ENOENT');
    clock.advance(399);
    expect((await c.stat('/o.txt')).size).toBe(3);
    await expectCode(c.stat('/other'), 'ENOENT');
    clock.advance(2);
    expect((await c.stat('/o.txt')).size).toBe(5);
    expect((await c.stat('/other')).size).toBe(1);
  });

  it('an open that finds another client\'s version drops the cached attributes at once (close-to-open); an unchanged one keeps them', async () => {
    await put('o.txt', 'OLD CON');
    expect((await c.stat('/o.txt')).size).toBe(7);
    const same = await c.open('/o.txt', { write: false });
    await same.close();
    expect(await cost(() => c.stat('/o.txt'))).toBe(0);
    await put('o.txt', 'NEW CONTENT, longer than before');
    expect((await c.stat('/o.txt')).size).toBe(7); // within the TTL, no open: the cache answers
    const f = await c.open('/o.txt', { write: false });
    expect((await c.stat('/o.txt')).size).toBe(31);
    expect((await readAll(f)).toString()).toBe('NEW CONTENT, longer than before');
    await f.close();
  });

  it('listing a directory with subdirectories walks the tree below it: their listings and lookups ask nothing, until the TTL', async () => {
    await Promise.all(['w/a/1', 'w/a/2', 'w/b/c/3', 'w/b/4', 'w/top'].map((k) => put(k, k)));
    expect((await c.readdir('/w')).map((e) => e.name).sort()).toEqual(['a', 'b', 'top']);
    await walked(c);
    const free = await cost(async () => {
      expect((await c.readdir('/w/a')).map((e) => e.name).sort()).toEqual(['1', '2']);
      expect((await c.readdir('/w/b')).map((e) => e.name).sort()).toEqual(['4', 'c']);
      expect((await c.readdir('/w/b/c')).map((e) => e.name)).toEqual(['3']);
      expect((await c.stat('/w/b/c/3')).size).toBe(7);
      await expectCode(c.stat('/w/b/c/nope'), 'ENOENT');
    });
    expect(free).toBe(0);
    expect(c.treePages).toBe(1);
    // the TTL holds for what a walk filled as for any listing
    await put('w/a/new', 'n');
    expect((await c.readdir('/w/a')).map((e) => e.name).sort()).toEqual(['1', '2']);
    clock.advance(401);
    expect((await c.readdir('/w/a')).map((e) => e.name).sort()).toEqual(['1', '2', 'new']);
  });

  it('a walk page that was on its way while a mutation ran fills nothing; with a TTL of 0 there is no walk', async () => {
    await Promise.all(['v/s/gone', 'v/s/kept', 'v/t/x'].map((k) => put(k, k)));
    await c.readdir('/v'); // starts the walk
    await c.unlink('/v/s/gone');
    expect((await c.readdir('/v/s')).map((e) => e.name)).toEqual(['kept']);
    const off = new MetadataCacheLayer(gcs, { ttlMs: 0, maxEntries: 1000, maxListings: 100 });
    expect(await cost(() => off.readdir('/v'))).toBe(1);
    await new Promise((r) => setTimeout(r, 50));
    expect(off.treePages).toBe(0);
  });

  it('lookups that keep missing in a directory listed before: it is listed again, and the rest are answered from that', async () => {
    // more names than a directory listed at its first miss has
    const more = Array.from({ length: DEFAULTS.gcsCache.relistFirstMissMaxEntries }, (_, i) => `m/z${i}`);
    await Promise.all(['m/a', 'm/b', 'm/c', 'm/d', 'm/e', ...more].map((k) => put(k, k)));
    await c.readdir('/m');
    clock.advance(500); // the listing and the attributes expire
    await c.stat('/m/a');
    await c.stat('/m/b');
    expect(c.relists).toBe(0);
    await c.stat('/m/c'); // the third miss lists the directory
    expect(c.relists).toBe(1);
    expect(await cost(async () => {
      expect((await c.stat('/m/d')).size).toBe(3);
      await expectCode(c.stat('/m/nope'), 'ENOENT');
    })).toBe(0);
    // misses of names a fresh listing holds (files just written: their attributes are not in
    // it) are looked up one by one: listing again would not answer them
    for (const n of ['w1', 'w2', 'w3', 'w4']) await writeFile(c, `/m/${n}`, n);
    for (const n of ['w1', 'w2', 'w3', 'w4']) {
      c['nodes'].delete(`/m/${n}`);
      expect((await c.stat(`/m/${n}`)).size).toBe(2);
    }
    expect(c.relists).toBe(1);
  });

  it('a small directory listed before is listed again at its first miss (one request, where a lookup makes two)', async () => {
    await Promise.all(['s/a', 's/b', 's/c'].map((k) => put(k, k)));
    await c.mkdir('/s/objects', 0o755); // new and empty, as git's objects/xx
    await writeFile(c, '/s/objects/one', '1');
    await c.readdir('/s');
    await walked(c);
    clock.advance(500); // the listings expire
    expect(await cost(() => expectCode(c.stat('/s/objects/tmp_1'), 'ENOENT'))).toBe(1);
    expect(await cost(() => expectCode(c.stat('/s/nope'), 'ENOENT'))).toBe(1);
    expect(c.relists).toBe(2);
    expect(await cost(async () => {
      expect((await c.stat('/s/objects/one')).size).toBe(1);
      expect((await c.stat('/s/b')).size).toBe(3);
      await expectCode(c.stat('/s/objects/tmp_2'), 'ENOENT');
    })).toBe(0);
    // another host's object shows once the listing expires
    await put('s/objects/theirs', 'xy');
    clock.advance(500);
    expect((await c.stat('/s/objects/theirs')).size).toBe(2);
  });

  it('a listing made for lookups while a change in its directory runs stores nothing; a change elsewhere does not spoil it', async () => {
    // large enough to be listed at the third miss, not the first
    const more = Array.from({ length: DEFAULTS.gcsCache.relistFirstMissMaxEntries }, (_, i) => `n/z${i}`);
    await Promise.all(['n/a', 'n/b', 'n/c', 'n/gone', 'o/x', ...more].map((k) => put(k, k)));
    // the listing's answer is held until the unlink is done: it still names /n/gone
    let open!: () => void;
    const held = new Promise<void>((r) => (open = r));
    let listed!: () => void;
    const wasListed = new Promise<void>((r) => (listed = r));
    const gated = new (class extends ForwardingLayer {
      hold = false;
      override async readdirPlus(p: string) {
        const r = await gcs.readdirPlus(p);
        if (this.hold) {
          listed();
          await held;
        }
        return r;
      }
    })(gcs);
    c = new MetadataCacheLayer(gated, { ttlMs: 400, maxEntries: 1000, maxListings: 100, clock });
    await c.readdir('/n');
    clock.advance(500);
    await c.stat('/n/a');
    await c.stat('/n/b');
    gated.hold = true;
    const listing = c.stat('/n/c'); // lists /n
    await wasListed;
    await c.unlink('/n/gone');
    open();
    gated.hold = false;
    await listing;
    await expectCode(c.stat('/n/gone'), 'ENOENT');
    expect((await c.readdir('/n')).map((e) => e.name).filter((n) => !n.startsWith('z')).sort()).toEqual(['a', 'b', 'c']);
    clock.advance(500);
    await c.stat('/n/a');
    await c.stat('/n/b');
    const again = c.stat('/n/c');
    await c.utimens('/o/x', { mtimeNs: 1_000_000_000n });
    await again;
    expect(c.relists).toBe(2);
    expect(await cost(() => c.stat('/n/b'))).toBe(0);
  });

  it('a lookup in flight while a mutation runs does not store its stale answer', async () => {
    await put('r.txt', 'r');
    const slow = c.stat('/r.txt'); // in flight
    await c.unlink('/r.txt');
    await slow.catch(() => undefined);
    await expectCode(c.stat('/r.txt'), 'ENOENT');
  });
});

describe('ReadCacheLayer and ContentCache', () => {
  let cache: ContentCache;
  let r: ReadCacheLayer;
  beforeEach(() => {
    cache = new ContentCache({ dir: path.join(tmp, 'content'), maxBytes: 10_000, maxObjectBytes: 8_000 });
    r = new ReadCacheLayer(gcs, { readAheadMinBytes: 256 * 1024, readAheadMaxBytes: 1024 * 1024, content: cache });
  });
  afterEach(() => cache.close());

  it('sequential reads fetch ahead in growing ranged reads, not one request per read', async () => {
    const data = Buffer.alloc(3 * 1024 * 1024 + 5, 0).map((_, i) => i % 251);
    await put('big.bin', data);
    const f = await r.open('/big.bin', { write: false });
    let got: Buffer = Buffer.alloc(0);
    const reads = await cost(async () => {
      got = await readAll(f, 64 * 1024);
    });
    await f.close();
    expect(got.equals(data)).toBe(true);
    // 49 reads of 64 KiB; windows of 256 KiB, 512 KiB, then 1 MiB
    expect(reads).toBeLessThanOrEqual(6);
  });

  it('a read is answered as soon as its bytes are in, before the rest of its window arrives', async () => {
    const data = Buffer.alloc(2 * 1024 * 1024, 0).map((_, i) => (i * 7) % 253);
    await put('stream.bin', data);
    // the real GCS file underneath, with the pieces after the first 128 KiB of each ranged read
    // held back until released
    let release!: () => void;
    const held = new Promise<void>((res) => (release = res));
    const gated = new (class extends ForwardingLayer {
      override async open(p: string, mode: OpenMode): Promise<BackendFile> {
        const f = await gcs.open(p, mode);
        const readParts = f.readParts?.bind(f) as NonNullable<BackendFile['readParts']>;
        return Object.assign(Object.create(f) as BackendFile, {
          readParts: async (pos: number, len: number, onData: (d: Buffer, at: number) => void) => {
            const late: Array<[Buffer, number]> = [];
            const n = await readParts(pos, len, (d, at) => (at - pos < 128 * 1024 ? onData(d, at) : late.push([d, at])));
            await held;
            for (const [d, at] of late) onData(d, at);
            return n;
          },
        });
      }
    })(gcs);
    const layer = new ReadCacheLayer(gated, { readAheadMinBytes: 1024 * 1024, readAheadMaxBytes: 1024 * 1024 });
    const f = await layer.open('/stream.bin', { write: false });
    const buf = Buffer.alloc(64 * 1024);
    expect(await f.read(buf, buf.length, 0)).toBe(buf.length);
    expect(buf.equals(data.subarray(0, buf.length))).toBe(true);
    // the rest of the window waits for its pieces; released, the reads go on in order
    const later = f.read(Buffer.alloc(64 * 1024), 64 * 1024, 512 * 1024);
    let settled = false;
    void later.then(() => (settled = true));
    await new Promise((res) => setTimeout(res, 50));
    expect(settled).toBe(false);
    release();
    expect(await later).toBe(64 * 1024);
    const all = await readAll(f, 100_000);
    await f.close();
    expect(all.equals(data)).toBe(true);
  });

  it('a window whose fetch failed is fetched again by the next read, not failed forever', async () => {
    const data = Buffer.alloc(600 * 1024, 0).map((_, i) => i % 241);
    await put('flaky.bin', data);
    const f = await r.open('/flaky.bin', { write: false });
    // more failures than the backend's retries: the first read fails
    await ctx.fx.fault({ status: 503, count: 20, method: 'GET', pathPrefix: `/storage/v1/b/layers-test/o/${ctx.prefix}/flaky.bin` });
    const buf = Buffer.alloc(64 * 1024);
    await expectCode(f.read(buf, buf.length, 0), 'EIO');
    await ctx.fx.clearFaults();
    expect((await readAll(f)).equals(data)).toBe(true);
    await f.close();
  });

  it('random reads go to GCS as asked and still read right', async () => {
    const data = Buffer.from('0123456789'.repeat(1000));
    await put('rand.bin', data);
    const f = await r.open('/rand.bin', { write: false });
    const buf = Buffer.alloc(10);
    expect(await f.read(buf, 10, 5000)).toBe(10);
    expect(buf.toString()).toBe('0123456789');
    expect(await f.read(buf, 10, 123)).toBe(10);
    expect(buf.toString()).toBe('3456789012');
    await f.close();
  });

  it('an object read once is read from the local cache next time, until its generation changes', async () => {
    await put('c.txt', 'cached content');
    const f1 = await r.open('/c.txt', { write: false });
    expect((await readAll(f1)).toString()).toBe('cached content');
    await f1.close();
    // the copy is written in the background; wait for it
    for (let i = 0; i < 100 && !cache.has(f1.version as string); i++) await new Promise((res) => setTimeout(res, 10));
    const f2 = await r.open('/c.txt', { write: false });
    expect(await cost(async () => expect((await readAll(f2)).toString()).toBe('cached content'))).toBe(0);
    await f2.close();
    expect(cache.hits).toBe(1);
    await put('c.txt', 'new generation');
    const f3 = await r.open('/c.txt', { write: false });
    expect((await readAll(f3)).toString()).toBe('new generation');
    await f3.close();
  });

  it('keeps at most its byte limit, evicting the least recently used object', async () => {
    for (const k of ['a', 'b', 'c']) {
      await put(k, k.repeat(4000));
      const f = await r.open(`/${k}`, { write: false });
      await readAll(f);
      await f.close();
      // the copy is written in the background; wait for it
      for (let i = 0; i < 200 && !cache.has(f.version as string); i++) await new Promise((res) => setTimeout(res, 10));
    }
    // evicted files are removed asynchronously
    for (let i = 0; i < 200 && fs.readdirSync(cache.dir).length > 2; i++) await new Promise((res) => setTimeout(res, 10));
    const files = fs.readdirSync(cache.dir);
    expect(files).toHaveLength(2);
    const f = await r.open('/a', { write: false });
    expect(await cost(() => readAll(f))).toBeGreaterThan(0); // 'a' went first
    await f.close();
  });

  it('objects above the per-object limit are not kept', async () => {
    await put('huge', 'h'.repeat(9000));
    const f = await r.open('/huge', { write: false });
    await readAll(f);
    await f.close();
    expect(fs.existsSync(cache.dir) ? fs.readdirSync(cache.dir) : []).toEqual([]); // made on first use
  });
});
