import { createHook } from 'node:async_hooks';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { fdOps } from '../../src/backend/fd-ops.js';
import { ContentCache } from '../../src/backend/layers/content-cache.js';
import { waitUntil } from '../helpers/sandbox.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * The content cache creates each file on the thread pool. Created on the event loop, a small
 * file cost about 0.5 ms there on an ext4 /tmp (a metadata write), per object a program wrote
 * or read through a GCS mount: in journal mode 2.9 s of the daemon's 8.5 s of busy time during
 * a tar -x of 3,000 files, with every FUSE request waiting behind it.
 */
describe('ContentCache fills', () => {
  let tmp: string;
  let cache: ContentCache;
  beforeEach(() => {
    tmp = makeTemp('content-fill');
    cache = new ContentCache({ dir: path.join(tmp, 'content'), maxBytes: 1 << 20, maxObjectBytes: 1 << 16 });
  });
  afterEach(() => {
    cache.close();
    rmTemp(tmp);
  });

  const parts = () => (fs.existsSync(cache.dir) ? fs.readdirSync(cache.dir) : []);
  /** the local file a version is kept in (undefined: not on the disk) */
  const fileOf = (c: ContentCache, version: string) => {
    const kept = c.get(version);
    return kept && 'file' in kept ? kept.file : undefined;
  };

  it('fill() creates its file without a synchronous call; the bytes are kept once written', async () => {
    cache.fill('warm#0', 1)?.abandon(); // (the cache's own directory is made once, on first use)
    const openSync = vi.spyOn(fs, 'openSync');
    let f;
    try {
      f = cache.fill('a#1', 5);
      expect(openSync, 'no file created on the event loop').not.toHaveBeenCalled();
    } finally {
      openSync.mockRestore();
    }
    expect(f).toBeDefined();
    await f?.add(0, Buffer.from('hello'));
    const file = fileOf(cache, 'a#1');
    expect(file && fs.readFileSync(file, 'utf8')).toBe('hello');
  });

  it('put() keeps a version in the background', async () => {
    cache.put('b#7', Buffer.from('bytes'));
    await waitUntil(() => cache.has('b#7'), 5000);
    expect(fs.readFileSync(fileOf(cache, 'b#7') as string, 'utf8')).toBe('bytes');
  });

  it('a fill abandoned before its file exists leaves nothing behind, and later adds keep nothing', async () => {
    const f = cache.fill('c#2', 3);
    f?.abandon();
    await f?.add(0, Buffer.from('abc'));
    await waitUntil(() => parts().length === 0, 5000);
    expect(parts(), cache.dir).toEqual([]);
    expect(cache.has('c#2')).toBe(false);
  });

  it('a gap abandons the fill and removes its file', async () => {
    const f = cache.fill('d#3', 6);
    await f?.add(0, Buffer.from('ab'));
    await f?.add(4, Buffer.from('ef'));
    await f?.add(2, Buffer.from('cd'));
    await waitUntil(() => parts().length === 0, 5000);
    expect(parts()).toEqual([]);
    expect(cache.has('d#3')).toBe(false);
  });
  it.skipIf(!fdOps())('the copies put() within a few milliseconds are written in one thread-pool job', async () => {
    const batched = new ContentCache({ dir: path.join(tmp, 'batched'), maxBytes: 1 << 20, maxObjectBytes: 1 << 16, copyBatchMs: 300 });
    const jobs: string[] = [];
    const hook = createHook({ init: (_id, type) => void ((type.startsWith('ledgerfs:') || type.startsWith('FSREQ')) && jobs.push(type)) });
    hook.enable();
    try {
      for (let i = 0; i < 10; i++) batched.put(`v#${i}`, Buffer.from(`copy ${i}`));
      await new Promise((r) => setImmediate(r));
      batched.put('v#10', Buffer.from('copy 10')); // a later turn, within the window: same batch
      await waitUntil(() => batched.has('v#10'), 5000);
    } finally {
      hook.disable();
    }
    expect(jobs).toEqual(['ledgerfs:writeNewFiles']);
    for (let i = 0; i <= 10; i++) expect(fs.readFileSync(fileOf(batched, `v#${i}`) as string, 'utf8')).toBe(`copy ${i}`);
    batched.close();
  });

  describe('with a memory tier (memoryBytes)', () => {
    let mem: ContentCache;
    beforeEach(() => {
      mem = new ContentCache({ dir: path.join(tmp, 'mem'), maxBytes: 1 << 20, maxObjectBytes: 1 << 16, copyBatchMs: 0, memoryBytes: 12 + 2 * 256 });
    });
    afterEach(() => mem.close());
    const memParts = () => (fs.existsSync(mem.dir) ? fs.readdirSync(mem.dir) : []);

    it('put() keeps the latest copies in memory and creates no file for them', async () => {
      const bytes = Buffer.from('hello!');
      mem.put('m#1', bytes);
      expect(mem.has('m#1')).toBe(true);
      await new Promise((r) => setTimeout(r, 50)); // past the copy batch's timer
      expect(memParts(), 'no file for a copy still in memory').toEqual([]);
      const kept = mem.get('m#1');
      expect(kept && 'data' in kept && kept.data.toString()).toBe('hello!');
      expect(mem.hits).toBe(1);
    });

    it('a copy pushed out of memory by newer ones goes to the disk, whole', async () => {
      mem.put('m#1', Buffer.from('first!'));
      mem.put('m#2', Buffer.from('second'));
      mem.put('m#3', Buffer.from('third!')); // 3 x (6 bytes + 256 for the entry) > 12 + 2 x 256: m#1 leaves memory
      await waitUntil(() => fileOf(mem, 'm#1') !== undefined, 5000);
      expect(fs.readFileSync(fileOf(mem, 'm#1') as string, 'utf8')).toBe('first!');
      for (const v of ['m#2', 'm#3']) expect(mem.get(v)).toHaveProperty('data');
      expect(memParts()).toHaveLength(1);
    });

    it('a copy larger than the memory tier goes to the disk at once', async () => {
      mem.put('big#1', Buffer.alloc(600, 'more than the tier '));
      await waitUntil(() => fileOf(mem, 'big#1') !== undefined, 5000);
      expect(fs.readFileSync(fileOf(mem, 'big#1') as string, 'utf8')).toBe(Buffer.alloc(600, 'more than the tier ').toString());
    });

    it('a small copy that is a slice of a larger buffer is kept in memory of its own, not the whole buffer', () => {
      const big = Buffer.alloc(8192, 'x');
      mem.put('slice#1', big.subarray(100, 110));
      const kept = mem.get('slice#1');
      expect(kept && 'data' in kept && kept.data.toString()).toBe('xxxxxxxxxx');
      expect(kept && 'data' in kept && kept.data.buffer.byteLength).toBeLessThan(8192);
    });

    it('close() drops the copies in memory without writing them', async () => {
      mem.put('m#1', Buffer.from('abc'));
      mem.close();
      await new Promise((r) => setTimeout(r, 50));
      expect(mem.get('m#1')).toBeUndefined();
      expect(memParts()).toEqual([]);
    });
  });

  it('put() of a copy after close() keeps nothing and leaves no file behind', async () => {
    cache.put('late#1', Buffer.from('late bytes'));
    cache.close();
    await new Promise((r) => setTimeout(r, 100));
    expect(cache.get('late#1')).toBeUndefined();
    expect(parts()).toEqual([]);
  });
});
