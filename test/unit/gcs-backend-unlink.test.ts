import { setTimeout as sleep } from 'node:timers/promises';
import { beforeEach, describe, expect, it } from 'vitest';
import type { GcsBackend } from '../../src/backend/gcs.js';
import { gcsBackendPerTest } from '../helpers/gcs-emulator.js';

// unlink and rmdir ask whether the parent outlives its last entry beside the delete, not after
// it, and rmdir lists the directory beside its lookup (rm -rf: one round trip less per file, two
// per directory); a directory still never vanishes with its last entry.

const ctx = gcsBackendPerTest('unlink-test');
let b: GcsBackend;
beforeEach(() => {
  b = ctx.b;
});
interface Logged { seq: number; method: string; path: string; query: string }
const log = async (since: number): Promise<Logged[]> => ((await (await fetch(`${ctx.fx.emu.url}/_emulator/requests?since=${since}`)).json()) as { requests: Logged[] }).requests;
const requests = async () => (await ctx.fx.stats()).requests;
async function write(p: string) {
  const f = await b.open(p, { write: true, create: true }, 0o644);
  await f.write(Buffer.from('x'), 1, 0);
  await f.close();
}

describe('GCS unlink', () => {
  it('in a directory with a placeholder: the listing of the parent goes out while the delete is in flight, and nothing follows the delete', async () => {
    await b.mkdir('/d', 0o755);
    await write('/d/a');
    await write('/d/b');
    await ctx.fx.fault({ status: 0, delayMs: 1500, count: 1, method: 'DELETE' });
    const r0 = await requests();
    const done = b.unlink('/d/a');
    // the delete is held for 1.5 s: what reached the emulator meanwhile
    let during: Logged[] = [];
    for (let i = 0; i < 40 && !during.some((r) => r.method === 'DELETE'); i++) {
      await sleep(25);
      during = await log(r0);
    }
    await sleep(300);
    during = await log(r0);
    const parentList = (r: Logged) => r.method === 'GET' && decodeURIComponent(r.query).includes(`prefix=${ctx.prefix}/d/&`);
    expect(during.some(parentList), JSON.stringify(during)).toBe(true);
    await done;
    const all = await log(r0);
    // the lookup (object + probe), the delete, the parent's listing: no second listing after
    expect(all.filter(parentList).length, JSON.stringify(all)).toBe(1);
    expect(all.length, JSON.stringify(all)).toBe(4);
    expect((await b.readdir('/d')).map((e) => e.name)).toEqual(['b']);
  });

  it('the last file of a directory without a placeholder: the directory stays (a placeholder is written)', async () => {
    await ctx.raw.file(`${ctx.prefix}/i/a`).save('x');
    await b.unlink('/i/a');
    expect((await b.stat('/i')).type).toBe('dir');
    expect((await ctx.raw.file(`${ctx.prefix}/i/`).exists())[0]).toBe(true);
  });

  it('the last two files of a directory without a placeholder, unlinked at once: the directory stays', async () => {
    await ctx.raw.file(`${ctx.prefix}/j/a`).save('x');
    await ctx.raw.file(`${ctx.prefix}/j/b`).save('x');
    await Promise.all([b.unlink('/j/a'), b.unlink('/j/b')]);
    expect((await b.stat('/j')).type).toBe('dir');
    expect(await b.readdir('/j')).toEqual([]);
  });

  it('rmdir: the emptiness listing goes out with the lookup, the parent listing with the delete', async () => {
    await b.mkdir('/p', 0o755);
    await b.mkdir('/p/d', 0o755);
    await b.mkdir('/p/e', 0o755);
    const r0 = await requests();
    // hold the lookup's object GET: the listings must not wait for it
    await ctx.fx.fault({ status: 0, delayMs: 1500, count: 1, method: 'GET', pathPrefix: `/storage/v1/b/unlink-test/o/${ctx.prefix}/p/d` });
    const done = b.rmdir('/p/d');
    await sleep(700);
    const during = await log(r0);
    const listOf = (key: string) => (r: Logged) => r.method === 'GET' && decodeURIComponent(r.query).includes(`prefix=${key}&`);
    expect(during.filter(listOf(`${ctx.prefix}/p/d/`)).length, JSON.stringify(during)).toBe(2); // the probe and the emptiness check
    await ctx.fx.fault({ status: 0, delayMs: 1500, count: 1, method: 'DELETE' });
    await done;
    const all = await log(r0);
    expect(all.filter(listOf(`${ctx.prefix}/p/`)).length, JSON.stringify(all)).toBe(1);
    expect(all.length, JSON.stringify(all)).toBe(5);
    expect((await b.readdir('/p')).map((e) => e.name)).toEqual(['e']);
    await expect(b.rmdir('/p')).rejects.toMatchObject({ code: 'ENOTEMPTY' });
    await b.rmdir('/p/e');
    await b.rmdir('/p');
    await expect(b.stat('/p')).rejects.toMatchObject({ code: 'ENOENT' });
  });
});
