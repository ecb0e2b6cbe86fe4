import type { Bucket } from '@google-cloud/storage';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createGcsBackend, type GcsBackend, type GcsBackendOptions } from '../../src/backend/gcs.js';
import { DEFAULTS } from '../../src/config/defaults.js';
import { startEmulatorFixture, testBackendOptions, type EmulatorFixture } from '../helpers/gcs-emulator.js';
import { expectCode, makeTemp, rmTemp } from '../helpers/tmp.js';

// A directory rename is journaled as an intent object in the bucket before its first copy. A
// rename stopped after k of n copies (the backend instance is abandoned mid-way, as a killed
// daemon would leave it) is finished, or undone when finishing is impossible, by the next open
// of the workspace; a copy that fails while the owner lives undoes the copies at once.

const BUCKET = 'intent-test';
const N = 40;
let fx: EmulatorFixture;
let raw: Bucket;
let staging: string;
let prefix: string;
let n = 0;
const opened: GcsBackend[] = [];

beforeAll(async () => {
  fx = await startEmulatorFixture();
  [raw] = await fx.storage.createBucket(BUCKET);
  staging = makeTemp('gcs-intent');
});
afterAll(async () => {
  await fx?.stop();
  rmTemp(staging);
});
beforeEach(async () => {
  prefix = `t${++n}`;
  // a directory with a placeholder, N files (some in a subdirectory) of distinct content
  const names = ['src/', ...Array.from({ length: N }, (_, i) => (i % 4 === 0 ? `src/sub/f${i}` : `src/f${i}`))];
  await Promise.all(names.map((nm) => raw.file(`${prefix}/${nm}`).save(nm.endsWith('/') ? '' : `content of ${nm}`, { resumable: false })));
});
afterEach(async () => {
  for (const b of opened.splice(0)) await b.close();
});

async function open(extra: Partial<GcsBackendOptions> = {}): Promise<GcsBackend> {
  const b = await createGcsBackend(testBackendOptions(fx.emu.url, BUCKET, staging, { prefix, ...extra }));
  opened.push(b);
  return b;
}

/** Every object under the test's prefix: name (without the prefix) -> content. */
async function tree(): Promise<Map<string, string>> {
  const [files] = await raw.getFiles({ prefix: `${prefix}/` });
  const out = new Map<string, string>();
  for (const f of files) out.set(f.name.slice(prefix.length + 1), (await f.download())[0].toString());
  return out;
}

const expected = (dir: string) =>
  new Map([[`${dir}/`, ''], ...Array.from({ length: N }, (_, i) => {
    const rel = i % 4 === 0 ? `sub/f${i}` : `f${i}`;
    return [`${dir}/${rel}`, `content of src/${rel}`] as [string, string];
  })]);

/** Start a rename that stops for good after `k` copies; resolves once it has stopped there. */
async function renameStoppedAfter(k: number): Promise<GcsBackend> {
  let reached!: () => void;
  const stopped = new Promise<void>((r) => (reached = r));
  const a = await open({
    renameConcurrency: 1,
    renameHook: (_step, count) => {
      if (count < k) return;
      reached();
      return new Promise<void>(() => undefined); // never returns: the "process" is gone
    },
  });
  void a.rename('/src', '/dst');
  await stopped;
  return a;
}

const intentsLeft = async () => (await raw.getFiles({ prefix: `${prefix}/${DEFAULTS.gcs.renameIntentsPrefix}` }))[0].length;

describe('directory rename intent', () => {
  it('stopped after 17 of 41 copies: the next open finishes it, wholly at the destination', async () => {
    const a = await renameStoppedAfter(17);
    const mid = await tree();
    expect([...mid.keys()].filter((k) => k.startsWith('dst/'))).toHaveLength(17); // half in both places
    expect(await intentsLeft()).toBe(1);
    await a.close(); // the owner is gone
    const b = await open();
    expect(b.recoveredRenames).toEqual([expect.objectContaining({ from: '/src', to: '/dst', outcome: 'completed', objects: N + 1, leftInPlace: [] })]);
    expect(await tree()).toEqual(expected('dst'));
    expect(await intentsLeft()).toBe(0);
    expect((await b.stat('/dst/sub')).type).toBe('dir');
    await expectCode(b.stat('/src'), 'ENOENT');
  });

  it('stopped after every copy, before any delete: finished', async () => {
    const a = await renameStoppedAfter(N + 1);
    await a.close();
    const b = await open();
    expect(b.recoveredRenames[0]?.outcome).toBe('completed');
    expect(await tree()).toEqual(expected('dst'));
  });

  it('stopped mid-way, then a source not yet copied changed: undone, wholly at the source with the new content', async () => {
    const a = await renameStoppedAfter(10);
    await a.close();
    const mid = await tree();
    const uncopied = [...expected('src').keys()].find((k) => !mid.has(k.replace(/^src\//, 'dst/'))) as string;
    await raw.file(`${prefix}/${uncopied}`).save('changed by another host', { resumable: false });
    const b = await open();
    expect(b.recoveredRenames[0]).toMatchObject({ outcome: 'undone', from: '/src', to: '/dst' });
    const want = expected('src');
    want.set(uncopied, 'changed by another host');
    expect(await tree()).toEqual(want);
    expect(await intentsLeft()).toBe(0);
  });

  it('onto an empty directory with a placeholder of its own: undone, that placeholder comes back as it was', async () => {
    await raw.file(`${prefix}/dst/`).save('', { resumable: false, metadata: { metadata: { 'goog-reserved-posix-mode': '700' } } });
    const a = await renameStoppedAfter(1); // the source's placeholder (listed first) has replaced the destination's
    await a.close();
    expect((await raw.file(`${prefix}/dst/`).getMetadata())[0].metadata?.['goog-reserved-posix-mode']).toBeUndefined();
    await raw.file(`${prefix}/src/f1`).delete(); // a source vanished before its copy: finishing is impossible
    const b = await open();
    expect(b.recoveredRenames[0]?.outcome).toBe('undone');
    const want = expected('src');
    want.delete('src/f1');
    want.set('dst/', '');
    expect(await tree()).toEqual(want);
    expect((await b.stat('/dst')).mode & 0o7777).toBe(0o700);
  });

  it('onto an empty directory with a placeholder of its own: finished', async () => {
    await raw.file(`${prefix}/dst/`).save('', { resumable: false });
    const a = await renameStoppedAfter(3);
    await a.close();
    const b = await open();
    expect(b.recoveredRenames[0]?.outcome).toBe('completed');
    expect(await tree()).toEqual(expected('dst'));
  });

  it("a live owner's intent is left alone by another opener", async () => {
    const a = await renameStoppedAfter(5);
    const other = await open();
    expect(other.recoveredRenames).toEqual([]);
    expect(await intentsLeft()).toBe(1);
    await a.close();
    const b = await open();
    expect(b.recoveredRenames[0]?.outcome).toBe('completed');
    expect(await tree()).toEqual(expected('dst'));
  });

  it('an intent object this version cannot read is reported and left alone, never a reason to refuse an open', async () => {
    const junk = `${prefix}/${DEFAULTS.gcs.renameIntentsPrefix}junk.json`;
    await raw.file(junk).save('{"v": 1, "fromKey": "elsewhere/"', { resumable: false });
    const b = await open();
    expect(b.recoveredRenames).toEqual([expect.objectContaining({ id: junk, outcome: 'unreadable' })]);
    expect(await intentsLeft()).toBe(1);
    expect(await tree()).toEqual(new Map([...expected('src'), [junk.slice(prefix.length + 1), '{"v": 1, "fromKey": "elsewhere/"']]));
  });

  it('a finished rename leaves no intent: the next open has nothing to settle', async () => {
    const b = await open();
    await b.rename('/src', '/dst');
    expect(await intentsLeft()).toBe(0);
    expect(await tree()).toEqual(expected('dst'));
    expect((await open()).recoveredRenames).toEqual([]);
  });

  it('a copy that fails while the owner lives (a source changed meanwhile) undoes the copies at once: ESTALE, wholly at the source', async () => {
    let changed = '';
    const b = await open({
      renameConcurrency: 1,
      renameHook: async (_step, count) => {
        if (count !== 8) return;
        changed = `${prefix}/src/f${N - 1}`; // copied last: its generation is gone before its turn
        await raw.file(changed).save('changed meanwhile', { resumable: false });
      },
    });
    await expectCode(b.rename('/src', '/dst'), 'ESTALE');
    const want = expected('src');
    want.set(changed.slice(prefix.length + 1), 'changed meanwhile');
    expect(await tree()).toEqual(want);
    expect(await intentsLeft()).toBe(0);
  });
});
