import fs from 'node:fs';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { GcsBackend } from '../../src/backend/gcs.js';
import { gcsBackendPerTest } from '../helpers/gcs-emulator.js';

// Uploads of an open file: writes that arrive while an upload runs are not lost, concurrent
// syncs do not race each other into a false conflict, and attributes set while the file has
// changes to upload travel with that upload (tar: write, futimens, fchown, fchmod, close).

const ctx = gcsBackendPerTest('uploads-test');
let b: GcsBackend;
beforeEach(() => {
  b = ctx.b;
});

const content = async (name: string) => (await ctx.raw.file(`${ctx.prefix}/${name}`).download())[0].toString();

describe('GcsFile uploads', () => {
  it('a write made while an upload runs is uploaded by the next sync, not dropped', async () => {
    const f = await b.open('/a', { write: true, create: true }, 0o644);
    await f.write(Buffer.from('one '), 4, 0);
    await ctx.fx.fault({ status: 0, delayMs: 300, count: 1, pathPrefix: '/upload/' }); // a slow upload
    const first = f.sync(false);
    await new Promise((r) => setTimeout(r, 100));
    await f.write(Buffer.from('two'), 3, 4); // lands while the upload is in flight
    await first;
    await f.sync(false);
    await f.close();
    expect(await content('a')).toBe('one two');
  });

  it('a written file is staged without a synchronous create (the event loop does not wait for the disk)', async () => {
    const f = await b.open('/staged', { write: true, create: true }, 0o644);
    const openSync = vi.spyOn(fs, 'openSync');
    try {
      await f.write(Buffer.from('staged bytes'), 12, 0);
      expect(openSync).not.toHaveBeenCalled();
    } finally {
      openSync.mockRestore();
    }
    await f.close();
    expect(await content('staged')).toBe('staged bytes');
  });

  it('two syncs at once make one upload after the other, no false conflict', async () => {
    const f = await b.open('/c', { write: true, create: true }, 0o644);
    await f.write(Buffer.from('data'), 4, 0);
    await Promise.all([f.sync(false), f.sync(false), f.sync(false)]);
    await f.close();
    expect(b.conflicts).toEqual([]);
    expect(await content('c')).toBe('data');
  });

  it('chmod, chown and utimens of a file with changes to upload go with the upload: one generation, no patch', async () => {
    const f = await b.open('/t', { write: true, create: true }, 0o600);
    await f.write(Buffer.from('tar member'), 10, 0);
    const before = await ctx.fx.stats();
    await b.utimens('/t', { mtimeNs: 981173106_123456789n });
    await b.chown('/t', 1234, 5678);
    await b.chmod('/t', 0o640);
    const st = await b.stat('/t');
    expect(st.mode & 0o777).toBe(0o640);
    expect([st.uid, st.gid, st.mtimeNs]).toEqual([1234, 5678, 981173106_123456789n]);
    expect((await ctx.fx.stats()).requests - before.requests).toBe(0);
    await f.close();
    const [meta] = await ctx.raw.file(`${ctx.prefix}/t`).getMetadata();
    expect(meta.metageneration).toBe('1');
    expect(meta.metadata).toMatchObject({ 'goog-reserved-posix-mode': '640', 'goog-reserved-posix-uid': '1234', 'gcsfuse_mtime': '2001-02-03T04:05:06.123456789Z' });
    expect((await b.stat('/t')).mtimeNs).toBe(981173106_123456789n);
  });
});
