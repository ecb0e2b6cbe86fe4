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
/** A promise and whether it has settled yet (a held request keeps it open). */
function settles<T>(p: Promise<T>): { p: Promise<T>; settled: boolean } {
  const s = { p, settled: false };
  p.then(() => (s.settled = true), () => (s.settled = true));
  return s;
}
/** The emulator's requests since `since`, once `enough` holds of them or `op` has settled (polled, not slept on). */
async function logUntil(since: number, enough: (rs: Logged[]) => boolean, op: { settled: boolean }): Promise<Logged[]> {
  let rs = await log(since);
  for (let i = 0; i < 400 && !enough(rs) && !op.settled; i++) {
    await sleep(10);
    rs = await log(since);
  }
  return rs;
}
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
    const parentList = (r: Logged) => r.method === 'GET' && decodeURIComponent(r.query).includes(`prefix=${ctx.prefix}/d/&`);
    const done = settles(b.unlink('/d/a'));
    // the delete is held for 1.5 s: the parent's listing reaches the emulator meanwhile
    const during = await logUntil(r0, (rs) => rs.some((r) => r.method === 'DELETE') && rs.some(parentList), done);
    expect(during.some(parentList), JSON.stringify(during)).toBe(true);
    expect(done.settled, 'the unlink finished before its parent was listed').toBe(false);
    await done.p;
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
    const listOf = (key: string) => (r: Logged) => r.method === 'GET' && decodeURIComponent(r.query).includes(`prefix=${key}&`);
    const done = settles(b.rmdir('/p/d'));
    const during = await logUntil(r0, (rs) => rs.filter(listOf(`${ctx.prefix}/p/d/`)).length >= 2, done);
    expect(during.filter(listOf(`${ctx.prefix}/p/d/`)).length, JSON.stringify(during)).toBe(2); // the probe and the emptiness check
    expect(done.settled, 'the rmdir finished before its listings were seen').toBe(false);
    await ctx.fx.fault({ status: 0, delayMs: 1500, count: 1, method: 'DELETE' });
    await done.p;
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
