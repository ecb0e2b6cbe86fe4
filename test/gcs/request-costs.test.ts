import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sh, startMount, type TestMount } from '../helpers/mount.js';
import { NEEDS_OWN_EMULATOR } from '../helpers/gcs-external.js';
import { startGcsFixture, type GcsFixture } from './fixture.js';

/**
 * What a small file or a new directory costs in requests on a real mount (issue 19, default
 * mode), read from the emulator's request log. The journal mirror's own uploads (under
 * .ledgerfs/, batched per interval, not per file) are left out of the per-operation counts.
 */
if (NEEDS_OWN_EMULATOR) console.warn(`test/gcs/request-costs.test.ts: ${NEEDS_OWN_EMULATOR}`);
describe.skipIf(!!NEEDS_OWN_EMULATOR)('gcs: requests per small file and per new directory', () => {
  let g: GcsFixture;
  let m: TestMount;
  let tmp: string;
  beforeAll(async () => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ledgerfs-reqcost-'));
    g = await startGcsFixture('ledgerfs-request-costs');
    m = await startMount({ gcs: { emulator: g.emulator, bucket: g.bucket }, // the default cache lifetime (test mounts otherwise use 0.2 s): the costs of a mount as shipped
    args: ['--state', path.join(tmp, 'state'), '--metadata-ttl', '5'] });
  }, 120_000);
  afterAll(async () => {
    await m?.stop();
    await g?.stop();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  /** The requests `fn` made, journal mirror left out, as "METHOD path?query" lines. */
  async function requestsOf(fn: () => void): Promise<string[]> {
    const r0 = await g.requests();
    fn();
    const log = await g.requestLog(r0);
    return log.filter((r) => !decodeURIComponent(r.path + r.query).includes('.ledgerfs/')).map((r) => `${r.method} ${r.path}${r.query}`);
  }

  it('create+write+close of a small file: at most 2 requests, no lookup or metadata patch', async () => {
    fs.mkdirSync(path.join(m.mnt, 'small'));
    const N = 20;
    const reqs = await requestsOf(() => {
      for (let i = 0; i < N; i++) fs.writeFileSync(path.join(m.mnt, 'small', `f${i}.txt`), `file ${i}\n`);
    });
    console.log(`create+write+close x${N}: ${reqs.length} requests (${(reqs.length / N).toFixed(2)}/file)\n  ${reqs.slice(0, 4).join('\n  ')}`);
    expect(reqs.length, reqs.join('\n')).toBeLessThanOrEqual(2 * N);
    expect(reqs.filter((r) => !r.startsWith('POST /upload/')), reqs.join('\n')).toEqual([]);
    // each upload is one request (multipart), not a resumable session
    expect(reqs.every((r) => r.includes('uploadType=multipart')), reqs.join('\n')).toBe(true);
    for (let i = 0; i < N; i++) expect(fs.readFileSync(path.join(m.mnt, 'small', `f${i}.txt`), 'utf8')).toBe(`file ${i}\n`);
    const [obj] = await g.storage.bucket(g.bucket).file('small/f3.txt').download();
    expect(obj.toString()).toBe('file 3\n');
  }, 120_000);

  it('mkdir -p of a new tree: one request per directory below the first (no lookup, no listing)', async () => {
    fs.mkdirSync(path.join(m.mnt, 'tree'));
    const deep = path.join(m.mnt, 'tree', 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h');
    const reqs = await requestsOf(() => fs.mkdirSync(deep, { recursive: true }));
    console.log(`mkdir -p of 8 new directories: ${reqs.length} requests\n  ${reqs.join('\n  ')}`);
    expect(reqs.length, reqs.join('\n')).toBeLessThanOrEqual(8);
    expect(reqs.filter((r) => r.startsWith('GET ')), reqs.join('\n')).toEqual([]);
    expect(fs.statSync(deep).isDirectory()).toBe(true);
    const [exists] = await g.storage.bucket(g.bucket).file('tree/a/b/c/d/e/f/g/h/').exists();
    expect(exists).toBe(true);
  }, 120_000);

  it('tar -x of a small tree: the per-operation breakdown (logged), files at 2 requests', async () => {
    const src = path.join(tmp, 'src');
    for (const d of ['a/b', 'c']) fs.mkdirSync(path.join(src, d), { recursive: true });
    const files = ['a/1', 'a/2', 'a/b/3', 'a/b/4', 'c/5'];
    for (const f of files) fs.writeFileSync(path.join(src, f), `${f}\n`);
    sh(`tar -cf ${tmp}/t.tar -C ${src} .`, tmp);
    fs.mkdirSync(path.join(m.mnt, 'x'));
    const reqs = await requestsOf(() => sh(`tar -xf ${tmp}/t.tar -C x`, m.mnt));
    const kinds = new Map<string, number>();
    for (const r of reqs) {
      const k = r.startsWith('POST /upload/') ? 'upload' : r.startsWith('PATCH') ? 'patch' : r.includes('/o?') ? 'list' : r.split(' ')[0] === 'GET' ? 'get' : r.split(' ')[0] as string;
      kinds.set(k, (kinds.get(k) ?? 0) + 1);
    }
    console.log(`tar -x of 5 files in 4 directories: ${reqs.length} requests: ${JSON.stringify(Object.fromEntries(kinds))}`);
    // two uploads per file (the create, the bytes with their metadata) and one per directory
    expect(kinds.get('upload')).toBe(2 * files.length + 3);
    // tar's fix-ups of each directory (chown, chmod, utimens): one patch each, no lookup before
    // (the placeholder's generation is known from the mkdir) and none after (the patch's answer
    // is the attributes setattr replies with)
    expect(kinds.get('get') ?? 0, reqs.join('\n')).toBe(0);
    expect(kinds.get('list') ?? 0, reqs.join('\n')).toBe(0);
    expect(kinds.get('patch') ?? 0, reqs.join('\n')).toBeLessThanOrEqual(3 * 4);
    for (const f of files) expect(fs.readFileSync(path.join(m.mnt, 'x', f), 'utf8')).toBe(`${f}\n`);
  }, 120_000);
  it('a repeated utime of a file (git freshening an object it already has): the patch alone, no lookup first', async () => {
    fs.mkdirSync(path.join(m.mnt, 'fresh'));
    const f = path.join(m.mnt, 'fresh', 'obj');
    fs.writeFileSync(f, 'blob\n');
    fs.utimesSync(f, new Date(), new Date()); // looked up once: the patch's answer is kept
    const N = 5;
    const reqs = await requestsOf(() => {
      for (let i = 0; i < N; i++) fs.utimesSync(f, new Date(1_700_000_000_000 + i * 1000), new Date(1_700_000_000_000 + i * 1000));
    });
    console.log(`utime x${N} of one file: ${reqs.length} requests\n  ${reqs.slice(0, 4).join('\n  ')}`);
    expect(reqs.filter((r) => !r.startsWith('PATCH ')), reqs.join('\n')).toEqual([]);
    expect(reqs.length).toBe(N);
    expect(fs.statSync(f).mtimeMs).toBe(1_700_000_000_000 + (N - 1) * 1000);
    // another client changes the object meanwhile: the guess fails its precondition, the
    // patch is redone on what is there, and the other client's key is kept
    await g.storage.bucket(g.bucket).file('fresh/obj').setMetadata({ metadata: { other: 'host' } });
    fs.utimesSync(f, new Date(1_800_000_000_000), new Date(1_800_000_000_000));
    const [meta] = await g.storage.bucket(g.bucket).file('fresh/obj').getMetadata();
    expect(meta.metadata?.other).toBe('host');
    expect(fs.statSync(f).mtimeMs).toBe(1_800_000_000_000);
    expect(fs.readFileSync(f, 'utf8')).toBe('blob\n');
  }, 120_000);
  it('a read of a file the cache knows (git add hashing each file): its generation asked, no listing', async () => {
    fs.mkdirSync(path.join(m.mnt, 'known'));
    const N = 5;
    for (let i = 0; i < N; i++) fs.writeFileSync(path.join(m.mnt, 'known', `f${i}`), `content ${i}\n`);
    fs.readdirSync(path.join(m.mnt, 'known')); // listed: every file's type and attributes known
    const reqs = await requestsOf(() => {
      for (let i = 0; i < N; i++) expect(fs.readFileSync(path.join(m.mnt, 'known', `f${i}`), 'utf8')).toBe(`content ${i}\n`);
    });
    console.log(`read of ${N} known files: ${reqs.length} requests\n  ${reqs.slice(0, 4).join('\n  ')}`);
    expect(reqs.filter((r) => r.includes('/o?')), reqs.join('\n')).toEqual([]);
    // close-to-open still holds: each open asks for the current generation
    expect(reqs.filter((r) => r.startsWith('GET ') && !r.includes('alt=media')).length, reqs.join('\n')).toBe(N);
    // a directory made by another client under a known file's name stays the lookup's business
    // once the cache forgets: the hint never turns a directory into a file
    await g.storage.bucket(g.bucket).file('known/f0').delete();
    await g.storage.bucket(g.bucket).file('known/f0/inner').save('x');
    await new Promise((r) => setTimeout(r, 5_500));
    expect(fs.statSync(path.join(m.mnt, 'known', 'f0')).isDirectory()).toBe(true);
  }, 120_000);
  it("stats of a directory's files once its listing expired (git's lstat of every file): a listing, not a lookup per file", async () => {
    fs.mkdirSync(path.join(m.mnt, 'relist'));
    const N = 30;
    for (let i = 0; i < N; i++) fs.writeFileSync(path.join(m.mnt, 'relist', `f${i}`), 'x'.repeat(i));
    expect(fs.readdirSync(path.join(m.mnt, 'relist'))).toHaveLength(N);
    await new Promise((r) => setTimeout(r, 5_500)); // the listing and the attributes expire
    const reqs = await requestsOf(() => {
      for (let i = 0; i < N; i++) expect(fs.lstatSync(path.join(m.mnt, 'relist', `f${i}`)).size).toBe(i);
      expect(fs.existsSync(path.join(m.mnt, 'relist', 'none'))).toBe(false);
    });
    console.log(`lstat of ${N} files after the TTL: ${reqs.length} requests\n  ${reqs.join('\n  ')}`);
    // the directory's own lookup, two lookups of files (a GET and a listing each) that miss,
    // then the third lists the directory: 7 requests for 31 lookups (62 before)
    expect(reqs.filter((r) => r.includes('delimiter=')), reqs.join('\n')).toHaveLength(1);
    expect(reqs.length, reqs.join('\n')).toBeLessThanOrEqual(7);
  }, 120_000);
});
