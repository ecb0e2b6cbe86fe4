import { constants as C } from 'node:fs';
import type { Bucket } from '@google-cloud/storage';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createGcsBackend, type GcsBackend } from '../../src/backend/gcs.js';
import type { BackendFile } from '../../src/core/backend.js';
import { startEmulatorFixture, testBackendOptions, type EmulatorFixture } from '../helpers/gcs-emulator.js';
import { expectCode, makeTemp, rmTemp } from '../helpers/tmp.js';

// The GCS backend against the emulator: the behaviours a local-backend test checks, plus the
// GCS namespace rules (implicit dirs, placeholders, names POSIX cannot show, gcsfuse keys).

let fx: EmulatorFixture;
let raw: Bucket; // the bucket as another tool (gcsfuse, gsutil) sees it
let staging: string;
let b: GcsBackend;
let n = 0;
let prefix: string;

beforeAll(async () => {
  fx = await startEmulatorFixture();
  [raw] = await fx.storage.createBucket('backend-test');
  staging = makeTemp('gcs-staging');
});
afterAll(async () => {
  await fx?.stop();
  rmTemp(staging);
});
beforeEach(async () => {
  prefix = `t${++n}`; // each test works under its own prefix
  b = await createGcsBackend(testBackendOptions(fx.emu.url, 'backend-test', staging, { prefix }));
});
afterEach(async () => b?.close());

const obj = (name: string) => raw.file(`${prefix}/${name}`);
const put = (name: string, data: string | Buffer, metadata?: Record<string, string>) =>
  obj(name).save(data, { resumable: false, ...(metadata ? { metadata: { metadata } } : {}) });
const metaOf = async (name: string) => (await obj(name).getMetadata())[0];

async function writeFile(path: string, data: string | Buffer, mode = 0o644): Promise<void> {
  const f = await b.open(path, { write: true, create: true, truncate: true }, mode);
  const buf = Buffer.from(data);
  await f.write(buf, buf.length, 0);
  await f.close();
}

async function readAll(f: BackendFile): Promise<Buffer> {
  const parts: Buffer[] = [];
  for (let pos = 0; ; ) {
    const buf = Buffer.alloc(7000);
    const got = await f.read(buf, buf.length, pos);
    if (got === 0) break;
    parts.push(buf.subarray(0, got));
    pos += got;
  }
  return Buffer.concat(parts);
}

async function readFile(path: string): Promise<string> {
  const f = await b.open(path, { write: false });
  try {
    return (await readAll(f)).toString();
  } finally {
    await f.close();
  }
}

const names = async (path: string) => (await b.readdir(path)).map((e) => `${e.name}:${e.type}`).sort();

describe('files', () => {
  it('create, write, read back, with mode and mtime kept in gcsfuse/gsutil metadata keys', async () => {
    const t0 = BigInt(Date.now()) * 1_000_000n;
    await writeFile('/hello.txt', 'hello world', 0o640);
    expect(await readFile('/hello.txt')).toBe('hello world');
    const st = await b.stat('/hello.txt');
    expect(st.type).toBe('file');
    expect(st.mode).toBe(C.S_IFREG | 0o640);
    expect(st.size).toBe(11);
    expect(st.mtimeNs).toBeGreaterThanOrEqual(t0 - 1_000_000n);
    const m = await metaOf('hello.txt');
    expect(m.metadata?.['goog-reserved-posix-mode']).toBe('640');
    expect(m.metadata?.gcsfuse_mtime).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$/);
    expect((await obj('hello.txt').download())[0].toString()).toBe('hello world');
  });

  it('a created file exists (empty) at once; writes show in stat through the backend before upload', async () => {
    const f = await b.open('/new.txt', { write: true, create: true }, 0o600);
    expect((await metaOf('new.txt')).size).toBe('0');
    await f.write(Buffer.from('12345'), 5, 0);
    expect((await b.stat('/new.txt')).size).toBe(5);
    expect((await f.stat()).size).toBe(5);
    expect((await metaOf('new.txt')).size).toBe('0'); // not uploaded yet
    await f.sync(false);
    expect((await metaOf('new.txt')).size).toBe('5');
    await f.write(Buffer.from('678'), 3, 5);
    await f.close();
    expect((await obj('new.txt').download())[0].toString()).toBe('12345678');
  });

  it('O_EXCL on an existing file is EEXIST; open without O_CREAT of a missing file is ENOENT', async () => {
    await writeFile('/x', 'x');
    await expectCode(b.open('/x', { write: true, create: true, exclusive: true }), 'EEXIST');
    await expectCode(b.open('/missing', { write: false }), 'ENOENT');
    await expectCode(b.open('/nodir/x', { write: true, create: true }), 'ENOENT');
  });

  it('partial overwrite downloads, patches and re-uploads the object', async () => {
    await writeFile('/p.txt', 'abcdefgh');
    const f = await b.open('/p.txt', { write: true });
    await f.write(Buffer.from('XY'), 2, 3);
    await f.write(Buffer.from('END'), 3, 8);
    await f.close();
    expect(await readFile('/p.txt')).toBe('abcXYfghEND');
  });

  it('ranged reads: any offset, short reads at EOF, 0 past the end', async () => {
    const data = Buffer.from(Array.from({ length: 20_000 }, (_, i) => i % 256));
    await put('r.bin', data);
    const f = await b.open('/r.bin', { write: false });
    const buf = Buffer.alloc(100);
    expect(await f.read(buf, 100, 12_345)).toBe(100);
    expect(buf.equals(data.subarray(12_345, 12_445))).toBe(true);
    expect(await f.read(buf, 100, 19_950)).toBe(50);
    expect(await f.read(buf, 100, 20_000)).toBe(0);
    expect((await readAll(f)).equals(data)).toBe(true);
    await f.close();
  });

  it('O_TRUNC empties an existing file; truncate grows with zeros and shrinks', async () => {
    await writeFile('/t.txt', 'something long');
    const f = await b.open('/t.txt', { write: true, truncate: true });
    await f.close();
    expect(await readFile('/t.txt')).toBe('');
    await writeFile('/t.txt', 'abcdef');
    await b.truncate('/t.txt', 3);
    expect(await readFile('/t.txt')).toBe('abc');
    await b.truncate('/t.txt', 5);
    expect(await readFile('/t.txt')).toBe('abc\0\0');
  });

  it('a large file goes up as a resumable upload in chunks', async () => {
    const data = Buffer.alloc(1536 * 1024 + 77, 'q');
    const puts = (await fx.stats()).byMethod.PUT ?? 0;
    await writeFile('/big.bin', data);
    expect(((await fx.stats()).byMethod.PUT ?? 0) - puts).toBe(7); // 6 full 256 KiB chunks + the rest
    expect((await metaOf('big.bin')).size).toBe(String(data.length));
    expect((await b.stat('/big.bin')).size).toBe(data.length);
  });

  it('unlink removes the object; ENOENT when missing, EISDIR for a directory', async () => {
    await writeFile('/u.txt', 'u');
    await b.unlink('/u.txt');
    expect((await obj('u.txt').exists())[0]).toBe(false);
    await expectCode(b.unlink('/u.txt'), 'ENOENT');
    await b.mkdir('/d', 0o755);
    await expectCode(b.unlink('/d'), 'EISDIR');
  });

  it('an unlinked open file keeps its bytes for its handle', async () => {
    await writeFile('/gone.txt', 'still readable');
    const f = await b.open('/gone.txt', { write: false });
    await b.unlink('/gone.txt');
    expect((await readAll(f)).toString()).toBe('still readable');
    await f.close();
    expect((await obj('gone.txt').exists())[0]).toBe(false);
  });

  it('a read on its way while the object is unlinked, or renamed, reads the same bytes from where they are now', async () => {
    for (const change of [() => b.unlink('/race.txt'), () => b.rename('/race.txt', '/moved.txt')]) {
      await writeFile('/race.txt', 'the old bytes');
      const f = await b.open('/race.txt', { write: false });
      // the read is served after the change: its generation of race.txt is gone by then
      await fx.fault({ status: 0, delayMs: 400, count: 1, method: 'GET', pathPrefix: `/storage/v1/b/backend-test/o/${prefix}/race.txt` });
      const buf = Buffer.alloc(64);
      const reading = f.read(buf, 64, 0);
      await new Promise((r) => setTimeout(r, 50));
      await change();
      expect(buf.subarray(0, await reading).toString()).toBe('the old bytes');
      await f.close();
    }
    expect(await readFile('/moved.txt')).toBe('the old bytes');
  });

  it('a reader opened while a writer had not closed yet keeps its bytes after that close and a rename over the name', async () => {
    // close(2) is the flush; the release of the writer can come after another process's open
    const w = await b.open('/w.txt', { write: true, create: true, truncate: true });
    await w.write(Buffer.from('the written bytes'), 17, 0);
    await w.flush?.();
    const r = await b.open('/w.txt', { write: false });
    await w.close();
    await writeFile('/w.tmp', 'the new bytes');
    await b.rename('/w.tmp', '/w.txt');
    expect((await readAll(r)).toString()).toBe('the written bytes');
    await r.close();
    expect(await readFile('/w.txt')).toBe('the new bytes');
  });
});

describe('directories', () => {
  it('mkdir writes a dir/ placeholder carrying the mode; EEXIST, ENOENT and ENOTDIR as POSIX', async () => {
    await b.mkdir('/d', 0o750);
    const m = await metaOf('d/');
    expect(m.size).toBe('0');
    expect(m.metadata?.['goog-reserved-posix-mode']).toBe('750');
    const st = await b.stat('/d');
    expect(st.type).toBe('dir');
    expect(st.mode).toBe(C.S_IFDIR | 0o750);
    await expectCode(b.mkdir('/d', 0o755), 'EEXIST');
    await writeFile('/f', 'f');
    await expectCode(b.mkdir('/f', 0o755), 'EEXIST');
    await expectCode(b.mkdir('/nope/sub', 0o755), 'ENOENT');
    await expectCode(b.mkdir('/f/sub', 0o755), 'ENOTDIR');
  });

  it('readdirTree: every directory a page of the flat listing holds completely, each exactly as readdirPlus lists it', async () => {
    await b.mkdir('/t', 0o755);
    await b.mkdir('/t/empty', 0o700);
    await b.symlink('../x', '/t/link');
    const odd = ['t/a//b', 't/dot/./y', 't/dup', 't/dup/z', 't/ph/', 't/ph/f', `t/${'l'.repeat(300)}/f`, 't/deep/1/2/3/f'];
    const filler = Array.from({ length: 1_100 }, (_, i) => `t/many/m${i % 40}/f${i}`);
    let next = 0;
    await Promise.all(Array.from({ length: 32 }, async () => {
      while (next < odd.length + filler.length) {
        const name = [...odd, ...filler][next++] as string;
        await put(name, name.endsWith('/') ? '' : 'x');
      }
    }));
    const seen = new Map<string, string[]>();
    let token: string | undefined;
    let pages = 0;
    do {
      const page = await b.readdirTree('/t', token);
      pages++;
      for (const [dir, entries] of page.dirs) {
        expect(seen.has(dir), dir).toBe(false);
        const want = await b.readdirPlus(dir);
        const key = (e: { name: string; type: string; attr?: { size: number; mode: number } }) => `${e.name}:${e.type}:${e.attr?.size}:${e.attr?.mode}`;
        expect(entries.map(key).sort(), dir).toEqual(want.map(key).sort());
        seen.set(dir, entries.map((e) => e.name));
      }
      token = page.nextPageToken;
      if (token) expect(page.last).toMatch(/^\/t\//);
    } while (token);
    expect(pages).toBe(2);
    // a directory split by the page boundary is in neither page; everything else is
    expect([...seen.keys()].filter((d) => !d.startsWith('/t/many'))).toEqual(expect.arrayContaining(['/t/empty', '/t/a', '/t/dot', '/t/dup', '/t/ph', '/t/deep', '/t/deep/1/2/3']));
    expect(seen.get('/t/dup')).toEqual(['z']);
    expect(seen.get('/t/a')).toEqual([]);
    expect(seen.has('/t')).toBe(false); // spans both pages
    expect([...seen.keys()].filter((d) => /^\/t\/many\/m\d+$/.test(d)).length).toBeGreaterThanOrEqual(38);
  }, 60_000);

  it('readdir lists files, placeholder dirs, implicit dirs and symlinks, across pages', async () => {
    await b.mkdir('/d', 0o755);
    await writeFile('/d/a.txt', 'a');
    await b.symlink('a.txt', '/d/link');
    await put('d/implicit/deep/file', 'x');
    for (let i = 0; i < 30; i++) await put(`d/many/f${String(i).padStart(2, '0')}`, '');
    expect(await names('/d')).toEqual(['a.txt:file', 'implicit:dir', 'link:symlink', 'many:dir']);
    expect((await b.readdir('/d/many')).length).toBe(30);
    expect(await names('/')).toEqual(['d:dir']);
    await expectCode(b.readdir('/d/a.txt'), 'ENOTDIR');
    await expectCode(b.readdir('/missing'), 'ENOENT');
  });

  it('rmdir: ENOTEMPTY, ENOTDIR, ENOENT; an empty directory goes', async () => {
    await b.mkdir('/d', 0o755);
    await writeFile('/d/x', 'x');
    await expectCode(b.rmdir('/d'), 'ENOTEMPTY');
    await expectCode(b.rmdir('/d/x'), 'ENOTDIR');
    await expectCode(b.rmdir('/zz'), 'ENOENT');
    await b.unlink('/d/x');
    await b.rmdir('/d');
    await expectCode(b.stat('/d'), 'ENOENT');
    expect((await obj('d/').exists())[0]).toBe(false);
  });

  it('objects hidden from the view (a "//" run) still make a directory non-empty', async () => {
    await b.mkdir('/d', 0o755);
    await put('d//hidden', 'h');
    expect(await b.readdir('/d')).toEqual([]);
    await expectCode(b.rmdir('/d'), 'ENOTEMPTY');
  });
});

describe('GCS namespace rules', () => {
  it('implicit directories: a common prefix is a directory without any placeholder', async () => {
    await put('imp/a/b.txt', 'b');
    expect((await b.stat('/imp')).type).toBe('dir');
    expect((await b.stat('/imp/a')).mode).toBe(C.S_IFDIR | 0o755);
    expect(await names('/imp')).toEqual(['a:dir']);
    expect(await readFile('/imp/a/b.txt')).toBe('b');
  });

  it('with implicitDirs off, only placeholders make directories (gcsfuse default)', async () => {
    await put('imp/a/b.txt', 'b');
    await put('exp/', '');
    await put('exp/c.txt', 'c');
    const strict = await createGcsBackend(testBackendOptions(fx.emu.url, 'backend-test', staging, { prefix, implicitDirs: false }));
    await expectCode(strict.stat('/imp'), 'ENOENT');
    expect((await strict.stat('/exp')).type).toBe('dir');
    expect((await strict.readdir('/')).map((e) => e.name).sort()).toEqual(['exp']);
  });

  it('removing the last entry of an implicit directory keeps the directory (a placeholder is written)', async () => {
    await put('imp/only.txt', 'x');
    await b.unlink('/imp/only.txt');
    expect((await b.stat('/imp')).type).toBe('dir');
    expect((await obj('imp/').exists())[0]).toBe(true);
    await put('imp2/sub/x', 'x');
    await b.rename('/imp2/sub', '/moved');
    expect((await b.stat('/imp2')).type).toBe('dir');
  });

  it('an object and a prefix with the same name: the directory wins and shows once', async () => {
    await put('dup', 'i am a file');
    await put('dup/inner.txt', 'inner');
    expect((await b.stat('/dup')).type).toBe('dir');
    expect(await names('/')).toEqual(['dup:dir']);
    expect(await names('/dup')).toEqual(['inner.txt:file']);
    await expectCode(b.open('/dup', { write: false }), 'EISDIR');
    expect((await obj('dup').download())[0].toString()).toBe('i am a file'); // untouched
  });

  it('names POSIX cannot show are left out of listings: empty, ".", ".." components, > 255 bytes', async () => {
    await put('n/ok.txt', 'ok');
    await put('n//empty-component', 'x');
    await put('n/./dot', 'x');
    await put('n/../dotdot', 'x');
    await put(`n/${'l'.repeat(256)}`, 'x');
    expect(await names('/n')).toEqual(['ok.txt:file']);
  });

  it('reads mtime and mode written by gcsfuse and gsutil', async () => {
    await put('fuse.txt', 'x', { gcsfuse_mtime: '2021-03-04T05:06:07.123456789Z', 'goog-reserved-posix-mode': '600', 'goog-reserved-posix-uid': '1234', 'goog-reserved-posix-gid': '5678' });
    await put('gsutil.txt', 'x', { 'goog-reserved-file-mtime': '1600000000' });
    const a = await b.stat('/fuse.txt');
    expect(a.mtimeNs).toBe(BigInt(Date.parse('2021-03-04T05:06:07Z')) * 1_000_000n + 123_456_789n);
    expect(a.mode).toBe(C.S_IFREG | 0o600);
    expect([a.uid, a.gid]).toEqual([1234, 5678]);
    expect((await b.stat('/gsutil.txt')).mtimeNs).toBe(1_600_000_000n * 1_000_000_000n);
  });

  it('objects without POSIX metadata get defaults and their update time', async () => {
    await put('plain.txt', 'xyz');
    const st = await b.stat('/plain.txt');
    expect(st.mode).toBe(C.S_IFREG | 0o644);
    expect(st.size).toBe(3);
    const m = await metaOf('plain.txt');
    expect(st.mtimeNs).toBe(BigInt(Date.parse(m.updated as string)) * 1_000_000n);
  });

  it('the prefix is the root: nothing outside it is visible', async () => {
    await raw.file('outside.txt').save('o', { resumable: false });
    await put('inside.txt', 'i');
    expect(await names('/')).toEqual(['inside.txt:file']);
    await expectCode(b.stat('/outside.txt'), 'ENOENT');
  });
});

describe('symlinks', () => {
  it('an empty object with gcsfuse_symlink_target; readlink; no following on open', async () => {
    await b.symlink('../some/where', '/ln');
    const m = await metaOf('ln');
    expect(m.size).toBe('0');
    expect(m.metadata?.gcsfuse_symlink_target).toBe('../some/where');
    const st = await b.stat('/ln');
    expect(st.type).toBe('symlink');
    expect(st.mode).toBe(C.S_IFLNK | 0o777);
    expect(st.size).toBe('../some/where'.length);
    expect(await b.readlink('/ln')).toBe('../some/where');
    await expectCode(b.open('/ln', { write: false }), 'ELOOP');
    await expectCode(b.symlink('x', '/ln'), 'EEXIST');
    await writeFile('/f', 'f');
    await expectCode(b.readlink('/f'), 'EINVAL');
    await expectCode(b.chmod('/ln', 0o700), 'EOPNOTSUPP');
  });

  it('reads symlinks gcsfuse made', async () => {
    await put('fuse-link', '', { gcsfuse_symlink_target: 'target.txt' });
    expect(await b.readlink('/fuse-link')).toBe('target.txt');
    expect(await names('/')).toEqual(['fuse-link:symlink']);
  });
});

describe('rename', () => {
  it('moves a file (copy + delete), keeping content, mode and mtime; replaces a file', async () => {
    await writeFile('/a.txt', 'A', 0o600);
    await b.utimens('/a.txt', { mtimeNs: 1_234_567_890_123_456_789n });
    await writeFile('/b.txt', 'B');
    await b.rename('/a.txt', '/b.txt');
    await expectCode(b.stat('/a.txt'), 'ENOENT');
    expect(await readFile('/b.txt')).toBe('A');
    const st = await b.stat('/b.txt');
    expect(st.mode).toBe(C.S_IFREG | 0o600);
    expect(st.mtimeNs).toBe(1_234_567_890_123_456_789n);
  });

  it('type and existence errors as POSIX', async () => {
    await writeFile('/f', 'f');
    await b.mkdir('/d', 0o755);
    await b.mkdir('/full', 0o755);
    await writeFile('/full/x', 'x');
    await expectCode(b.rename('/nope', '/x'), 'ENOENT');
    await expectCode(b.rename('/f', '/d'), 'EISDIR');
    await expectCode(b.rename('/d', '/f'), 'ENOTDIR');
    await expectCode(b.rename('/d', '/full'), 'ENOTEMPTY');
    await expectCode(b.rename('/f', '/nodir/f'), 'ENOENT');
    await expectCode(b.rename('/d', '/d/inside'), 'EINVAL');
  });

  it('a directory whose deepest object name would pass 1024 bytes at the new name: ENAMETOOLONG, nothing moved', async () => {
    const c = 'c'.repeat(200);
    const deep = `d/${c}/${c}/${c}/${c}/${'f'.repeat(1022 - `${prefix}/d/`.length - 4 * 201)}`; // 1022 bytes with the prefix
    await put(deep, 'deep');
    await expectCode(b.rename('/d', '/dddd'), 'ENAMETOOLONG');
    expect(await readFile(`/${deep}`)).toBe('deep');
    await expectCode(b.stat('/dddd'), 'ENOENT');
    const [left] = await raw.getFiles({ prefix: `${prefix}/` });
    expect(left.map((f) => f.name)).toEqual([`${prefix}/${deep}`]); // no copy, no intent left over
    await b.rename('/d', '/e'); // the same length: fine
    expect(await readFile(`/e/${deep.slice(2)}`)).toBe('deep');
  });

  it('moves a directory tree object by object: placeholders, implicit subdirs, symlinks, hidden names', async () => {
    await b.mkdir('/src', 0o700);
    await writeFile('/src/one.txt', '1');
    await b.mkdir('/src/sub', 0o755);
    await writeFile('/src/sub/two.txt', '2');
    await put('src/implicit/three.txt', '3');
    await put('src//hidden', 'h');
    await b.symlink('one.txt', '/src/ln');
    await b.mkdir('/dst', 0o755); // an empty directory may be replaced
    await b.rename('/src', '/dst');
    await expectCode(b.stat('/src'), 'ENOENT');
    expect(await names('/dst')).toEqual(['implicit:dir', 'ln:symlink', 'one.txt:file', 'sub:dir']);
    expect(await readFile('/dst/sub/two.txt')).toBe('2');
    expect(await readFile('/dst/implicit/three.txt')).toBe('3');
    expect(await b.readlink('/dst/ln')).toBe('one.txt');
    expect((await b.stat('/dst')).mode).toBe(C.S_IFDIR | 0o700);
    expect((await obj('dst//hidden').download())[0].toString()).toBe('h'); // nothing left behind or lost
    const [left] = await raw.getFiles({ prefix: `${prefix}/src` });
    expect(left.map((f) => f.name)).toEqual([]);
  });

  it('an open file follows its rename, and its later writes land at the new name', async () => {
    await b.mkdir('/d', 0o755);
    await writeFile('/d/f.txt', 'first');
    const f = await b.open('/d/f.txt', { write: true });
    await f.write(Buffer.from('FIRST'), 5, 0);
    await b.rename('/d', '/e');
    await f.write(Buffer.from('!'), 1, 5);
    await f.close();
    expect(await readFile('/e/f.txt')).toBe('FIRST!');
    await expectCode(b.stat('/d/f.txt'), 'ENOENT');
  });
});

describe('attributes', () => {
  it('chmod, chown and utimens patch metadata, keep other keys, and bump only the metageneration', async () => {
    await writeFile('/f', 'f');
    await obj('f').setMetadata({ metadata: { foreign: 'kept' } });
    const before = await metaOf('f');
    await b.chmod('/f', 0o4755);
    await b.chown('/f', 1001, 1002);
    await b.utimens('/f', { mtimeNs: 1_700_000_000_987_654_321n, atimeNs: 1_600_000_000_000_000_000n });
    const st = await b.stat('/f');
    expect(st.mode).toBe(C.S_IFREG | 0o4755);
    expect([st.uid, st.gid]).toEqual([1001, 1002]);
    expect(st.mtimeNs).toBe(1_700_000_000_987_654_321n);
    expect(st.atimeNs).toBe(1_600_000_000_000_000_000n);
    const m = await metaOf('f');
    expect(m.generation).toBe(before.generation);
    expect(Number(m.metageneration)).toBe(Number(before.metageneration) + 3);
    expect(m.metadata).toMatchObject({
      foreign: 'kept',
      'goog-reserved-posix-mode': '4755',
      'goog-reserved-posix-uid': '1001',
      'goog-reserved-posix-gid': '1002',
      gcsfuse_mtime: '2023-11-14T22:13:20.987654321Z',
      'goog-reserved-file-atime': '1600000000',
    });
  });

  it('a server that makes a new generation on a metadata patch: the open handle takes it from the response, its upload is no conflict', async () => {
    // GCS keeps the generation on a patch; some compatible servers do not (issue 21)
    const store = fx.emu.store;
    const original = store.updateMetadata.bind(store);
    store.updateMetadata = (o, apply) => {
      const r = original(o, apply);
      r.generation += 1000n;
      return r;
    };
    try {
      await writeFile('/p', 'old');
      const f = await b.open('/p', { write: true });
      await b.chmod('/p', 0o600);
      await b.utimens('/p', { mtimeNs: 7_000_000_000n });
      const buf = Buffer.from('new bytes');
      await f.write(buf, buf.length, 0);
      await f.close(); // ESTALE when the handle kept the generation it opened
      expect(await readFile('/p')).toBe('new bytes');
      expect((await b.stat('/p')).mode & 0o7777).toBe(0o600);
    } finally {
      store.updateMetadata = original;
    }
  });

  it('utimens "now", and leaves an unspecified time alone', async () => {
    await writeFile('/f', 'f');
    await b.utimens('/f', { mtimeNs: 5_000_000_000n });
    const t0 = BigInt(Date.now()) * 1_000_000n;
    await b.utimens('/f', { atimeNs: 'now' });
    const st = await b.stat('/f');
    expect(st.mtimeNs).toBe(5_000_000_000n);
    expect(st.atimeNs).toBeGreaterThanOrEqual((t0 / 1_000_000_000n) * 1_000_000_000n);
  });

  it('chmod of an implicit directory writes a placeholder that carries the mode', async () => {
    await put('imp/x', 'x');
    await b.chmod('/imp', 0o711);
    expect((await b.stat('/imp')).mode).toBe(C.S_IFDIR | 0o711);
    expect((await metaOf('imp/')).metadata?.['goog-reserved-posix-mode']).toBe('711');
  });

  it('chmod of a file open for writing survives its upload', async () => {
    await writeFile('/f', 'f');
    const h = await b.open('/f', { write: true });
    await h.write(Buffer.from('more'), 4, 1);
    await b.chmod('/f', 0o600);
    await h.close();
    expect((await b.stat('/f')).mode).toBe(C.S_IFREG | 0o600);
    expect(await readFile('/f')).toBe('fmore');
  });

  it('copyOut: the live generation, or the staged bytes of a file being written here', async () => {
    const fsMod = await import('node:fs');
    const pathMod = await import('node:path');
    await writeFile('/c.txt', 'remote bytes');
    const out = pathMod.join(staging, `copyout-${prefix}`);
    await b.copyOut('/c.txt', out);
    expect(fsMod.readFileSync(out, 'utf8')).toBe('remote bytes');
    const h = await b.open('/c.txt', { write: true });
    await h.write(Buffer.from('LOCAL'), 5, 0);
    await b.copyOut('/c.txt', out);
    expect(fsMod.readFileSync(out, 'utf8')).toBe('LOCALe bytes');
    await h.close();
    fsMod.rmSync(out);
    await expectCode(b.copyOut('/missing', out), 'ENOENT');
  });

  it('hard links are refused; statfs reports large numbers', async () => {
    expect(b.capabilities.hardLinks).toBe(false);
    await writeFile('/f', 'f');
    await expectCode(b.link('/f', '/g'), 'EPERM');
    const s = await b.statfs('/');
    expect(s.namemax).toBe(255);
    expect(s.bavail).toBeGreaterThan(1e9);
  });
});

describe('through the Vfs', () => {
  it('create, write, fsync, shared handles, rename and unlink behave as on a local disk', async () => {
    const { Vfs } = await import('../../src/vfs/vfs.js');
    const vfs = new Vfs(b);
    await vfs.mkdir('/w', 0o755);
    const fh = await vfs.create('/w/a.txt', 0o644, C.O_RDWR | C.O_CREAT);
    await vfs.write(fh, Buffer.from('hello'), 5, 0);
    expect((await vfs.getattr('/w/a.txt')).size).toBe(5);
    const reader = await vfs.open('/w/a.txt', C.O_RDONLY);
    const buf = Buffer.alloc(10);
    expect(await vfs.read(reader, buf, 10, 0)).toBe(5); // the shared state: reads what was written
    await vfs.fsync(fh, false);
    expect((await metaOf('w/a.txt')).size).toBe('5');
    await vfs.rename('/w/a.txt', '/w/b.txt');
    await vfs.write(fh, Buffer.from('!'), 1, 5);
    await vfs.release(reader);
    await vfs.release(fh);
    expect(await vfs.readdir('/w')).toEqual(['b.txt']);
    expect(await readFile('/w/b.txt')).toBe('hello!');
    await vfs.unlink('/w/b.txt');
    expect(await vfs.readdir('/w')).toEqual([]);
    expect((await vfs.getattr('/w')).type).toBe('dir');
    await vfs.closeAll();
  });
});

describe('setup', () => {
  it('an endpoint that takes the request and never answers: a sentence naming the bucket within setupTimeoutMs', async () => {
    await fx.fault({ status: 0, delayMs: 8000, count: 1, method: 'GET', pathPrefix: '/storage/v1/b/backend-test' });
    const t0 = Date.now();
    await expect(createGcsBackend(testBackendOptions(fx.emu.url, 'backend-test', staging, { prefix, setupTimeoutMs: 500 }))).rejects.toThrow(
      /^GCS bucket "backend-test" could not be reached: no answer from http:\/\/127\.0\.0\.1:\d+ within 0\.5 s$/,
    );
    expect(Date.now() - t0).toBeLessThan(4000);
    await fx.clearFaults();
  });
});

describe('objects stored with contentEncoding gzip (gsutil cp -Z, gcloud storage cp --gzip-local-all)', () => {
  // GCS serves such an object compressed to a request that accepts gzip (a Range counting in the
  // stored bytes) and decompressed, whole, to any other. The size every listing and stat shows
  // is the stored size, so the file's bytes are the stored bytes, at every offset.
  const text = Buffer.from('a line of a log that compresses well\n'.repeat(4000));
  async function putGzip(name: string): Promise<Buffer> {
    await obj(name).save(text, { resumable: false, gzip: true });
    const [stored] = await obj(name).download({ decompress: false, validation: false });
    expect(stored.length).toBeLessThan(text.length);
    return stored;
  }

  it('a read gives the stored bytes, as many as stat says, from any offset', async () => {
    const stored = await putGzip('log.txt.gz');
    expect((await b.stat('/log.txt.gz')).size).toBe(stored.length);
    const f = await b.open('/log.txt.gz', { write: false });
    try {
      expect(await readAll(f)).toEqual(stored);
      const buf = Buffer.alloc(100);
      expect(await f.read(buf, 100, 50)).toBe(100);
      expect(buf).toEqual(stored.subarray(50, 150));
    } finally {
      await f.close();
    }
  });

  it('copyOut and a write on it start from the stored bytes', async () => {
    const fsMod = await import('node:fs');
    const pathMod = await import('node:path');
    const stored = await putGzip('c.gz');
    const out = pathMod.join(staging, `copyout-gz-${prefix}`);
    await b.copyOut('/c.gz', out);
    expect(fsMod.readFileSync(out)).toEqual(stored);
    fsMod.rmSync(out);
    const h = await b.open('/c.gz', { write: true });
    await h.write(Buffer.from('!'), 1, stored.length);
    await h.close();
    const [now] = await obj('c.gz').download({ decompress: false, validation: false });
    expect(now).toEqual(Buffer.concat([stored, Buffer.from('!')]));
  });
});
