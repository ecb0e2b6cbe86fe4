import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadBeneath, type Beneath } from '../../src/backend/beneath.js';
import { LocalBackend } from '../../src/backend/local.js';
import { expectCode, isRoot, makeTemp, rmTemp } from '../helpers/tmp.js';

/** A snapshot of everything about a tree that a backend op could change (to prove it did not). */
function snapshot(dir: string): string {
  const out: string[] = [];
  const walk = (p: string) => {
    const st = fs.lstatSync(p, { bigint: true });
    const rel = path.relative(dir, p) || '.';
    let extra = '';
    if (st.isSymbolicLink()) extra = `-> ${fs.readlinkSync(p)}`;
    else if (st.isFile()) extra = fs.readFileSync(p, 'base64');
    out.push(`${rel} mode=${st.mode.toString(8)} uid=${st.uid} gid=${st.gid} size=${st.size} mtime=${st.mtimeNs} nlink=${st.nlink} ${extra}`);
    if (st.isDirectory()) for (const n of fs.readdirSync(p).sort()) walk(path.join(p, n));
  };
  walk(dir);
  return out.join('\n');
}

// Both ways of refusing symlinked parents: openat2 in native/ledgerfs_beneath.c (when built)
// and the realpath check a machine without the addon runs.
const beneath = loadBeneath();
const checks: [string, Beneath | null][] = [['realpath', null]];
if (beneath) checks.unshift(['openat2', beneath]);

it('the openat2 helper loads wherever the addon is built', () => {
  const built = fs.existsSync(new URL('../../native/build/Release/ledgerfs_local.node', import.meta.url));
  expect(beneath !== null).toBe(built && !process.env.LEDGERFS_NO_OPENAT2);
});

describe.each(checks)('LocalBackend (%s): path checks', (_, helper) => {
  let tmp: string;
  let b: LocalBackend;
  beforeEach(() => {
    tmp = makeTemp();
    fs.mkdirSync(path.join(tmp, 'root/a'), { recursive: true });
    fs.writeFileSync(path.join(tmp, 'root/a/f'), 'x');
    b = new LocalBackend(path.join(tmp, 'root'), helper);
  });
  afterEach(() => rmTemp(tmp));

  const bad = ['', 'a', 'a/f', '/a/', '//a', '/a//f', '/./a', '/a/.', '/..', '/a/..', '/a/../a/f', '/../root/a/f', '/a/\0f'];
  it.each(bad)('rejects %j with EINVAL on every op', async (p) => {
    const before = snapshot(tmp);
    await expectCode(b.stat(p), 'EINVAL');
    await expectCode(b.readdir(p), 'EINVAL');
    await expectCode(b.open(p, { write: true, create: true }), 'EINVAL');
    await expectCode(b.mkdir(p, 0o755), 'EINVAL');
    await expectCode(b.unlink(p), 'EINVAL');
    await expectCode(b.rmdir(p), 'EINVAL');
    await expectCode(b.rename(p, '/z'), 'EINVAL');
    await expectCode(b.rename('/a/f', p), 'EINVAL');
    await expectCode(b.symlink('x', p), 'EINVAL');
    await expectCode(b.link('/a/f', p), 'EINVAL');
    await expectCode(b.chmod(p, 0o777), 'EINVAL');
    await expectCode(b.truncate(p, 0), 'EINVAL');
    expect(snapshot(tmp)).toBe(before);
  });

  it('rejects over-long names with ENAMETOOLONG', async () => {
    await expectCode(b.stat('/' + 'n'.repeat(256)), 'ENAMETOOLONG');
  });

  it('accepts names with odd but legal characters', async () => {
    for (const name of ['.hidden', '..x', 'sp ace', 'nl\nname', 'ünï', '-', '\\']) {
      const f = await b.open('/a/' + name, { write: true, create: true, exclusive: true });
      await f.close();
      expect((await b.stat('/a/' + name)).type).toBe('file');
    }
    expect((await b.readdir('/a')).length).toBe(8);
  });
});

describe.each(checks)('LocalBackend (%s): containment (never leaves its root)', (_, helper) => {
  let tmp: string;
  let root: string;
  let outside: string;
  let b: LocalBackend;
  beforeEach(() => {
    tmp = makeTemp();
    root = path.join(tmp, 'root');
    outside = path.join(tmp, 'outside');
    fs.mkdirSync(path.join(root, 'sub'), { recursive: true });
    fs.mkdirSync(path.join(outside, 'dir'), { recursive: true });
    fs.writeFileSync(path.join(outside, 'passwd'), 'root:x:0:0\n');
    fs.writeFileSync(path.join(outside, 'dir/inner'), 'inner\n');
    fs.writeFileSync(path.join(root, 'inside.txt'), 'inside\n');
    fs.symlinkSync(outside, path.join(root, 'evil')); // ln -s <outside> evil
    fs.symlinkSync(outside, path.join(root, 'sub/evil2')); // deeper
    fs.symlinkSync(path.join(outside, 'passwd'), path.join(root, 'evilfile')); // to a file outside
    fs.symlinkSync('/etc', path.join(root, 'etc')); // the classic
    b = new LocalBackend(root, helper);
  });
  afterEach(() => rmTemp(tmp));

  const through = ['/evil/passwd', '/sub/evil2/passwd', '/evil/dir/inner', '/evil/dir'];

  it.each(through)('refuses every op through a symlinked parent: %s', async (p) => {
    const before = snapshot(outside);
    await expectCode(b.stat(p), 'EACCES');
    await expectCode(b.readdir(p), 'EACCES');
    await expectCode(b.readlink(p), 'EACCES');
    await expectCode(b.open(p, { write: false }), 'EACCES');
    await expectCode(b.open(p, { write: true }), 'EACCES');
    await expectCode(b.open(p, { write: true, create: true, truncate: true }), 'EACCES');
    await expectCode(b.open(p + '-new', { write: true, create: true }), 'EACCES');
    await expectCode(b.unlink(p), 'EACCES');
    await expectCode(b.rmdir(p), 'EACCES');
    await expectCode(b.rename(p, '/stolen'), 'EACCES');
    await expectCode(b.rename('/inside.txt', p), 'EACCES');
    await expectCode(b.link(p, '/stolen'), 'EACCES');
    await expectCode(b.link('/inside.txt', p + '-ln'), 'EACCES');
    await expectCode(b.symlink('x', p + '-sym'), 'EACCES');
    await expectCode(b.mkdir(p + '-d', 0o755), 'EACCES');
    await expectCode(b.chmod(p, 0o777), 'EACCES');
    await expectCode(b.chown(p, 1234, 1234), 'EACCES');
    await expectCode(b.utimens(p, { mtimeNs: 0n, atimeNs: 0n }), 'EACCES');
    await expectCode(b.truncate(p, 0), 'EACCES');
    await expectCode(b.statfs(p), 'EACCES');
    expect(snapshot(outside)).toBe(before);
    expect(fs.existsSync(path.join(root, 'stolen'))).toBe(false);
  });

  it('refuses reads of /etc/passwd through `ln -s /etc etc`', async () => {
    await expectCode(b.stat('/etc/passwd'), 'EACCES');
    await expectCode(b.open('/etc/passwd', { write: false }), 'EACCES');
    await expectCode(b.readdir('/etc/ssh'), 'EACCES');
  });

  it('never follows a symlink as the last component', async () => {
    const before = snapshot(outside);
    // stat and readlink describe the link itself
    const st = await b.stat('/evil');
    expect(st.type).toBe('symlink');
    expect(await b.readlink('/evil')).toBe(outside);
    // listing a symlink to a directory must not list the target (it is not a directory here)
    await expectCode(b.readdir('/evil'), 'ENOTDIR');
    await expectCode(b.readdir('/etc'), 'ENOTDIR');
    await expectCode(b.open('/evilfile', { write: false }), 'ELOOP');
    await expectCode(b.open('/evilfile', { write: true, truncate: true }), 'ELOOP');
    await expectCode(b.open('/evilfile', { write: true, create: true }), 'ELOOP');
    await expectCode(b.truncate('/evilfile', 0), 'ELOOP');
    await expectCode(b.chmod('/evilfile', 0o777), 'EOPNOTSUPP');
    await expectCode(b.chmod('/evil', 0o777), 'EOPNOTSUPP');
    await expectCode(b.statfs('/evil'), 'ELOOP');
    // ops on the link itself are fine and stay inside
    await b.chown('/evilfile', 4321, 4321); // lchown
    await b.utimens('/evilfile', { mtimeNs: 1_000_000_000_000_000_000n }); // lutimes
    expect((await b.stat('/evilfile')).uid).toBe(isRoot() ? 4321 : expect.any(Number));
    await b.rename('/evilfile', '/moved-link');
    await b.link('/moved-link', '/hardlinked-link'); // link(2) does not follow
    expect((await b.stat('/hardlinked-link')).type).toBe('symlink');
    await b.unlink('/moved-link');
    await b.unlink('/hardlinked-link');
    await b.unlink('/evil');
    await expectCode(b.rmdir('/sub/evil2'), 'ENOTDIR');
    expect(snapshot(outside)).toBe(before);
  });

  it('refuses a parent that is a symlink even when it points inside the root', async () => {
    fs.symlinkSync('sub', path.join(root, 'alias'));
    fs.writeFileSync(path.join(root, 'sub/f'), 'f');
    await expectCode(b.stat('/alias/f'), 'EACCES');
    expect((await b.stat('/sub/f')).size).toBe(1);
  });

  it('refuses a symlink swapped in for a directory after the backend was opened', async () => {
    fs.mkdirSync(path.join(root, 'swap'));
    fs.writeFileSync(path.join(root, 'swap/f'), 'mine');
    expect((await b.stat('/swap/f')).size).toBe(4);
    fs.rmSync(path.join(root, 'swap'), { recursive: true });
    fs.symlinkSync(outside, path.join(root, 'swap'));
    await expectCode(b.stat('/swap/passwd'), 'EACCES');
    await expectCode(b.unlink('/swap/passwd'), 'EACCES');
    expect(fs.existsSync(path.join(outside, 'passwd'))).toBe(true);
  });

  it('a root given through a symlink is resolved once, at construction', async () => {
    fs.symlinkSync(root, path.join(tmp, 'rootlink'));
    const b2 = new LocalBackend(path.join(tmp, 'rootlink'), helper);
    expect(b2.location).toBe(fs.realpathSync(root));
    expect((await b2.stat('/inside.txt')).size).toBe(7);
    await expectCode(b2.stat('/evil/passwd'), 'EACCES');
  });
});

describe('LocalBackend: basics', () => {
  let tmp: string;
  let b: LocalBackend;
  beforeEach(() => {
    tmp = makeTemp();
    b = new LocalBackend(tmp);
  });
  afterEach(() => rmTemp(tmp));

  it('refuses a missing or non-directory root', () => {
    expect(() => new LocalBackend(path.join(tmp, 'nope'))).toThrow(/not usable/);
    fs.writeFileSync(path.join(tmp, 'file'), '');
    expect(() => new LocalBackend(path.join(tmp, 'file'))).toThrow(/not a directory/);
  });

  it('keeps nanosecond-ish times to the microsecond (Node utimes takes a double)', async () => {
    const f = await b.open('/t', { write: true, create: true });
    await f.close();
    // values chosen so that naive seconds-as-double conversion lands one microsecond low
    const samples = [981173106123456789n, 1700000000000001000n, 1234567890123457000n, 1000000000000007000n, 4102444800999999999n, 1000n, -4999999n, -86400123456789n];
    for (const ns of samples) {
      await b.utimens('/t', { atimeNs: ns - 5_000_000_000n, mtimeNs: ns });
      const st = await b.stat('/t');
      expect(st.mtimeNs / 1000n, `mtime for ${ns}`).toBe(ns / 1000n);
      expect(st.atimeNs / 1000n, `atime for ${ns}`).toBe((ns - 5_000_000_000n) / 1000n);
    }
  });

  it('utimens: undefined leaves a time alone, now sets the current time', async () => {
    const f = await b.open('/t', { write: true, create: true });
    await f.close();
    await b.utimens('/t', { atimeNs: 1_000_000_000_000_000_000n, mtimeNs: 2_000_000_000_000_000_000n });
    await b.utimens('/t', { mtimeNs: 1_500_000_000_000_000_000n });
    let st = await b.stat('/t');
    expect(st.atimeNs).toBe(1_000_000_000_000_000_000n);
    expect(st.mtimeNs).toBe(1_500_000_000_000_000_000n);
    const t0 = BigInt(Date.now() - 2000) * 1_000_000n;
    await b.utimens('/t', { atimeNs: 'now' });
    st = await b.stat('/t');
    expect(st.atimeNs > t0).toBe(true);
    expect(st.mtimeNs).toBe(1_500_000_000_000_000_000n);
  });

  it('files: open/create flags, read/write at offsets, truncate, stat', async () => {
    await expectCode(b.open('/f', { write: false }), 'ENOENT');
    const f = await b.open('/f', { write: true, create: true, exclusive: true }, 0o640);
    expect(f.writable).toBe(true);
    await expectCode(b.open('/f', { write: true, create: true, exclusive: true }), 'EEXIST');
    expect(await f.write(Buffer.from('hello world'), 11, 0)).toBe(11);
    expect(await f.write(Buffer.from('XY'), 2, 20)).toBe(2); // hole
    const st = await f.stat();
    expect(st.size).toBe(22);
    expect(st.mode & 0o777).toBe(0o640 & ~process.umask());
    const buf = Buffer.alloc(30);
    expect(await f.read(buf, 30, 0)).toBe(22);
    expect(buf.subarray(0, 22)).toEqual(Buffer.concat([Buffer.from('hello world'), Buffer.alloc(9), Buffer.from('XY')]));
    await f.truncate(5);
    expect((await b.stat('/f')).size).toBe(5);
    await f.sync(false);
    await f.sync(true);
    await f.close();
    await f.close(); // idempotent
    const r = await b.open('/f', { write: false });
    expect(r.writable).toBe(false);
    await expectCode(r.write(Buffer.from('x'), 1, 0), 'EBADF');
    await r.close();
    const t = await b.open('/f', { write: true, truncate: true });
    expect((await t.stat()).size).toBe(0);
    await t.close();
    await b.truncate('/f', 4096);
    expect((await b.stat('/f')).size).toBe(4096);
    await expectCode(b.truncate('/nope', 1), 'ENOENT');
  });

  it('directories, rename rules, links, symlinks, modes, owners', async () => {
    await b.mkdir('/d', 0o750);
    expect((await b.stat('/d')).mode & 0o777).toBe(0o750 & ~process.umask());
    await expectCode(b.mkdir('/d', 0o755), 'EEXIST');
    await expectCode(b.mkdir('/x/y', 0o755), 'ENOENT');
    await (await b.open('/d/f', { write: true, create: true })).close();
    await expectCode(b.rmdir('/d'), 'ENOTEMPTY');
    await expectCode(b.rmdir('/d/f'), 'ENOTDIR');
    await expectCode(b.unlink('/d'), 'EISDIR');
    await expectCode(b.rename('/d', '/d/sub'), 'EINVAL');
    await b.mkdir('/e', 0o755);
    await b.rename('/d', '/e'); // over an empty dir
    await expectCode(b.stat('/d'), 'ENOENT');
    await b.mkdir('/g', 0o755);
    await expectCode(b.rename('/g', '/e'), 'ENOTEMPTY');
    await expectCode(b.rename('/g', '/e/f'), 'ENOTDIR');
    await expectCode(b.rename('/e/f', '/g'), 'EISDIR');
    await b.link('/e/f', '/g/hard');
    expect((await b.stat('/e/f')).nlink).toBe(2);
    await expectCode(b.link('/g', '/g2'), 'EPERM');
    await b.symlink('../e/f', '/g/sym');
    expect(await b.readlink('/g/sym')).toBe('../e/f');
    await expectCode(b.readlink('/e/f'), 'EINVAL');
    await expectCode(b.symlink('x', '/g/sym'), 'EEXIST');
    await b.chmod('/e/f', 0o4755);
    expect((await b.stat('/e/f')).mode & 0o7777).toBe(0o4755);
    if (isRoot()) {
      await b.chown('/e/f', 1000, 2000);
      const st = await b.stat('/e/f');
      expect([st.uid, st.gid]).toEqual([1000, 2000]);
    }
    const names = (await b.readdir('/g')).map((e) => `${e.name}:${e.type}`).sort();
    expect(names).toEqual(['hard:file', 'sym:symlink']);
    const s = await b.statfs('/');
    expect(s.bsize).toBeGreaterThan(0);
    expect(s.blocks).toBeGreaterThan(0);
    expect(s.namemax).toBe(255);
  });

  it('rename across file systems answers EXDEV (tmpfs mounted inside the backend)', async (ctx) => {
    if (!isRoot()) ctx.skip();
    const inner = path.join(tmp, 'tmpfs');
    fs.mkdirSync(inner);
    await (await b.open('/f', { write: true, create: true })).close();
    const { execFileSync } = await import('node:child_process');
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', inner]);
    try {
      await expectCode(b.rename('/f', '/tmpfs/f'), 'EXDEV');
      await expectCode(b.link('/f', '/tmpfs/f'), 'EXDEV');
      expect((await b.stat('/f')).type).toBe('file');
    } finally {
      execFileSync('umount', ['-l', inner]);
    }
  });
});
