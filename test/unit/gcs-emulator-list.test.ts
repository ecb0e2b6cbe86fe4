import type { Bucket, File } from '@google-cloud/storage';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulatorFixture, type EmulatorFixture } from '../helpers/gcs-emulator.js';

// objects.list as GCS documents it, through bucket.getFiles({autoPaginate: false}).

let fx: EmulatorFixture;
let bucket: Bucket;

const NAMES = [
  'a.txt',
  'dir/',
  'dir/one.txt',
  'dir/two.txt',
  'dir/sub/',
  'dir/sub/deep.txt',
  'dir/zeta/x',
  'dir//double',
  'other/x',
  'other/y/z',
  'z-last',
  'é-accent', // sorts after ASCII by UTF-8 bytes
  '\u{1F600}-emoji', // a surrogate pair in JS: after U+FF5A in UTF-8 byte order, before it in UTF-16
  '\uFF5A-fullwidth',
];

beforeAll(async () => {
  fx = await startEmulatorFixture();
  [bucket] = await fx.storage.createBucket('list-test');
  for (const n of NAMES) await bucket.file(n).save(n.endsWith('/') ? '' : n, { resumable: false });
});
afterAll(async () => fx?.stop());

interface Page {
  items: string[];
  prefixes: string[];
  next?: string;
}

async function page(q: Record<string, unknown>): Promise<Page> {
  const [files, , resp] = await bucket.getFiles({ ...q, autoPaginate: false });
  const r = resp as { prefixes?: string[]; nextPageToken?: string };
  return { items: files.map((f: File) => f.name), prefixes: r.prefixes ?? [], ...(r.nextPageToken ? { next: r.nextPageToken } : {}) };
}

async function all(q: Record<string, unknown>): Promise<{ items: string[]; prefixes: string[]; pages: number }> {
  const out = { items: [] as string[], prefixes: [] as string[], pages: 0 };
  let token: string | undefined;
  do {
    const p = await page({ ...q, ...(token ? { pageToken: token } : {}) });
    out.items.push(...p.items);
    out.prefixes.push(...p.prefixes);
    out.pages++;
    token = p.next;
  } while (token);
  return out;
}

describe('objects.list', () => {
  it('without delimiter: every object, in UTF-8 byte order', async () => {
    const p = await page({});
    expect(p.items).toEqual([...NAMES].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y))));
    expect(p.prefixes).toEqual([]);
    expect(p.items.slice(-3)).toEqual(['é-accent', '\uFF5A-fullwidth', '\u{1F600}-emoji']);
  });

  it('prefix filters by name', async () => {
    expect((await page({ prefix: 'dir/s' })).items).toEqual(['dir/sub/', 'dir/sub/deep.txt']);
  });

  it('delimiter: direct children as items, deeper names summarized as distinct prefixes', async () => {
    const root = await page({ delimiter: '/' });
    expect(root.items).toEqual(['a.txt', 'z-last', 'é-accent', '\uFF5A-fullwidth', '\u{1F600}-emoji']);
    expect(root.prefixes).toEqual(['dir/', 'other/']);
    const dir = await page({ prefix: 'dir/', delimiter: '/' });
    expect(dir.items).toEqual(['dir/', 'dir/one.txt', 'dir/two.txt']);
    expect(dir.prefixes).toEqual(['dir//', 'dir/sub/', 'dir/zeta/']);
  });

  it('includeTrailingDelimiter also returns the placeholder objects that end a prefix', async () => {
    const dir = await page({ prefix: 'dir/', delimiter: '/', includeTrailingDelimiter: true });
    expect(dir.items).toEqual(['dir/', 'dir/one.txt', 'dir/sub/', 'dir/two.txt']);
    expect(dir.prefixes).toEqual(['dir//', 'dir/sub/', 'dir/zeta/']);
  });

  it('maxResults pages through items and prefixes together, without repeats or gaps', async () => {
    const first = await page({ delimiter: '/', maxResults: 2 });
    expect(first.items.length + first.prefixes.length).toBe(2);
    expect(first.next).toBeDefined();
    const paged = await all({ delimiter: '/', maxResults: 1 });
    expect(paged.items).toEqual(['a.txt', 'z-last', 'é-accent', '\uFF5A-fullwidth', '\u{1F600}-emoji']);
    expect(paged.prefixes).toEqual(['dir/', 'other/']);
    expect(paged.pages).toBe(7);
    const flat = await all({ maxResults: 3 });
    expect(flat.items).toEqual((await page({})).items);
    expect(flat.pages).toBe(Math.ceil(NAMES.length / 3));
    const deep = await all({ prefix: 'dir/', delimiter: '/', maxResults: 2 });
    expect(deep.items).toEqual(['dir/', 'dir/one.txt', 'dir/two.txt']);
    expect(deep.prefixes).toEqual(['dir//', 'dir/sub/', 'dir/zeta/']);
  });

  it('the last page has no nextPageToken; an empty listing is empty', async () => {
    expect((await page({ prefix: 'z', maxResults: 5 })).next).toBeUndefined();
    expect(await page({ prefix: 'nothing-here/' })).toEqual({ items: [], prefixes: [] });
  });

  it('startOffset (inclusive) and endOffset (exclusive)', async () => {
    expect((await page({ startOffset: 'dir/sub', endOffset: 'other/y' })).items).toEqual(['dir/sub/', 'dir/sub/deep.txt', 'dir/two.txt', 'dir/zeta/x', 'other/x']);
  });

  it('a bad page token is a 400', async () => {
    await expect(page({ pageToken: '!!!' })).rejects.toMatchObject({ code: 400 });
  });
});
