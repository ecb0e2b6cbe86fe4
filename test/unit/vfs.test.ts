import { execFileSync } from 'node:child_process';
import { constants as C } from 'node:fs';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LocalBackend } from '../../src/backend/local.js';
import type { Backend, BackendFile } from '../../src/core/backend.js';
import { VfsError } from '../../src/core/errors.js';
import type { Caller, Mutation, MutationStage } from '../../src/core/mutation.js';
import { MutationPipeline } from '../../src/vfs/pipeline.js';
import { Vfs } from '../../src/vfs/vfs.js';
import { expectCode, isRoot, makeTemp, rmTemp } from '../helpers/tmp.js';

const RW = C.O_RDWR;
const RO = C.O_RDONLY;
const WO = C.O_WRONLY;
const CREAT = C.O_CREAT;
const EXCL = C.O_EXCL;
const TRUNC = C.O_TRUNC;

/** LocalBackend that counts the backend files it opens and how many are still open. */
function counting(b: LocalBackend): { backend: Backend; opens: () => number; live: () => number } {
  let opens = 0;
  let live = 0;
  const wrap = (f: BackendFile): BackendFile => {
    let closed = false;
    return {
      get writable() { return f.writable; },
      read: (...a) => f.read(...a),
      write: (...a) => f.write(...a),
      truncate: (...a) => f.truncate(...a),
      stat: () => f.stat(),
      sync: (d) => f.sync(d),
      close: async () => {
        if (!closed) live--;
        closed = true;
        await f.close();
      },
    };
  };
  const backend = new Proxy(b, {
    get(target, prop, recv) {
      if (prop === 'open') {
        return async (...args: Parameters<Backend['open']>) => {
          const f = await target.open(...args);
          opens++;
          live++;
          return wrap(f);
        };
      }
      const v = Reflect.get(target, prop, recv);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
  return { backend, opens: () => opens, live: () => live };
}

async function readAll(vfs: Vfs, fh: number, max = 1 << 16): Promise<string> {
  const buf = Buffer.alloc(max);
  const n = await vfs.read(fh, buf, max, 0);
  return buf.subarray(0, n).toString();
}

async function write(vfs: Vfs, fh: number, text: string, pos: number): Promise<number> {
  const b = Buffer.from(text);
  return vfs.write(fh, b, b.length, pos);
}

describe('Vfs over LocalBackend', () => {
  let tmp: string;
  let root: string;
  let vfs: Vfs;
  let count: ReturnType<typeof counting>;
  const host = (p: string) => path.join(root, p);

  beforeEach(() => {
    tmp = makeTemp();
    root = path.join(tmp, 'root');
    fs.mkdirSync(root);
    count = counting(new LocalBackend(root));
    vfs = new Vfs(count.backend);
  });
  afterEach(async () => {
    await vfs.closeAll();
    rmTemp(tmp);
  });

  it('create, write, read, fgetattr, release; data reaches the backend', async () => {
    const fh = await vfs.create('/a', 0o644, WO | CREAT);
    expect(await write(vfs, fh, 'hello', 0)).toBe(5);
    expect(await write(vfs, fh, ' world', 5)).toBe(6);
    expect((await vfs.fgetattr(fh)).size).toBe(11);
    expect(fs.readFileSync(host('a'), 'utf8')).toBe('hello world');
    await vfs.release(fh);
    expect(vfs.openHandleCount).toBe(0);
    expect(count.live()).toBe(0);
    const r = await vfs.open('/a', RO);
    expect(await readAll(vfs, r)).toBe('hello world');
    await expectCode(write(vfs, r, 'x', 0), 'EBADF');
    await vfs.release(r);
    await expectCode(vfs.release(r), 'EBADF');
    await expectCode(() => vfs.read(r, Buffer.alloc(1), 1, 0), 'EBADF');
    await expectCode(() => vfs.fgetattr(r), 'EBADF');
  });

  it('create with O_EXCL on an existing (and on an open) file is EEXIST', async () => {
    fs.writeFileSync(host('a'), 'x');
    await expectCode(vfs.create('/a', 0o644, WO | CREAT | EXCL), 'EEXIST');
    const fh = await vfs.open('/a', RO);
    await expectCode(vfs.create('/a', 0o644, WO | CREAT | EXCL), 'EEXIST');
    // without O_EXCL create of an open file joins the open state
    const fh2 = await vfs.create('/a', 0o644, WO | CREAT);
    await write(vfs, fh2, 'y', 1);
    expect(await readAll(vfs, fh)).toBe('xy');
    await vfs.release(fh);
    await vfs.release(fh2);
  });

  it('create mode is kept (minus umask); mkdir mode too', async () => {
    const fh = await vfs.create('/m', 0o100640, WO | CREAT);
    await vfs.release(fh);
    expect((await vfs.getattr('/m')).mode & 0o7777).toBe(0o640 & ~process.umask());
    await vfs.mkdir('/d', 0o700);
    expect((await vfs.getattr('/d')).mode & 0o7777).toBe(0o700);
    expect((await vfs.getattr('/d')).type).toBe('dir');
  });

  it('open with O_TRUNC truncates; O_RDONLY|O_TRUNC does not write', async () => {
    fs.writeFileSync(host('a'), 'content');
    const r = await vfs.open('/a', RO | TRUNC);
    expect(await readAll(vfs, r)).toBe('content');
    const w = await vfs.open('/a', WO | TRUNC);
    expect(fs.readFileSync(host('a'), 'utf8')).toBe('');
    expect(await readAll(vfs, r)).toBe('');
    await vfs.release(r);
    await vfs.release(w);
  });

  it('open of a missing file is ENOENT; of a directory for writing EISDIR', async () => {
    await expectCode(vfs.open('/nope', RO), 'ENOENT');
    await vfs.mkdir('/d', 0o755);
    await expectCode(vfs.open('/d', RW), 'EISDIR');
    expect(vfs.openHandleCount).toBe(0);
  });

  it('truncate by path and ftruncate, shrinking and growing, with and without open handles', async () => {
    fs.writeFileSync(host('a'), '0123456789');
    await vfs.truncate('/a', 4);
    expect(fs.readFileSync(host('a'), 'utf8')).toBe('0123');
    const fh = await vfs.open('/a', RW);
    await vfs.ftruncate(fh, 8);
    expect(fs.readFileSync(host('a'))).toEqual(Buffer.from('0123\0\0\0\0'));
    await vfs.truncate('/a', 2); // through the open state
    expect(await readAll(vfs, fh)).toBe('01');
    expect((await vfs.fgetattr(fh)).size).toBe(2);
    await vfs.release(fh);
    // ftruncate through a read-only handle falls back to the path (Linux allows it)
    const r = await vfs.open('/a', RO);
    await vfs.ftruncate(r, 1);
    expect(fs.readFileSync(host('a'), 'utf8')).toBe('0');
    await vfs.release(r);
    await expectCode(vfs.truncate('/nope', 0), 'ENOENT');
  });

  it('all handles on one path share one open-file state and see each other at once', async () => {
    fs.writeFileSync(host('a'), '');
    const r = await vfs.open('/a', RO);
    const w1 = await vfs.open('/a', WO);
    const w2 = await vfs.open('/a', RW);
    expect(count.live()).toBe(1); // one backend file, upgraded from read-only to read-write
    await write(vfs, w1, 'AAAA', 0);
    expect(await readAll(vfs, r)).toBe('AAAA');
    expect(await readAll(vfs, w2)).toBe('AAAA');
    await write(vfs, w2, 'bb', 1);
    expect(await readAll(vfs, r)).toBe('AbbA');
    expect((await vfs.fgetattr(r)).size).toBe(4);
    await vfs.release(w1);
    // the read-only handle still cannot write even though the shared state can
    await expectCode(write(vfs, r, 'x', 0), 'EBADF');
    await write(vfs, w2, 'Z', 4);
    await vfs.release(w2);
    expect(await readAll(vfs, r)).toBe('AbbAZ');
    expect(count.live()).toBe(1);
    await vfs.release(r);
    expect(count.live()).toBe(0);
    expect(count.opens()).toBe(2);
  });

  it('an open racing the release of the last handle on the same path gets a working handle', async () => {
    fs.writeFileSync(host('a'), 'data');
    const first = await vfs.open('/a', RO);
    // the open finds the shared state at once but takes its handle only after an await; the
    // release (same batch of kernel requests) closes that state's backend file meanwhile
    const opening = vfs.open('/a', RO);
    await vfs.release(first);
    const second = await opening;
    expect(await readAll(vfs, second)).toBe('data');
    await vfs.release(second);
    expect(count.live()).toBe(0);
  });

  it('unlink while open: handles keep reading and writing the old node; the name is free', async () => {
    fs.writeFileSync(host('a'), 'old');
    const fh = await vfs.open('/a', RW);
    const r = await vfs.open('/a', RO);
    await vfs.unlink('/a');
    expect(fs.existsSync(host('a'))).toBe(false);
    await expectCode(vfs.getattr('/a'), 'ENOENT');
    await write(vfs, fh, 'OLD!', 0);
    expect(await readAll(vfs, r)).toBe('OLD!');
    const st = await vfs.fgetattr(fh);
    expect(st.nlink).toBe(0);
    expect(st.size).toBe(4);
    await vfs.ftruncate(fh, 2);
    expect(await readAll(vfs, r)).toBe('OL');
    // a new file with the same name is a different node with its own state
    const n = await vfs.create('/a', 0o644, RW | CREAT | EXCL);
    await write(vfs, n, 'new', 0);
    expect(await readAll(vfs, r)).toBe('OL');
    expect(await readAll(vfs, n)).toBe('new');
    const again = await vfs.open('/a', RO);
    expect(await readAll(vfs, again)).toBe('new');
    for (const h of [fh, r, n, again]) await vfs.release(h);
    expect(count.live()).toBe(0);
    expect(fs.readdirSync(root)).toEqual(['a']);
  });

  it('rename of an open file: handles follow it, the new name joins the state, the old name is free', async () => {
    fs.writeFileSync(host('a'), 'one');
    const fh = await vfs.open('/a', RW);
    await vfs.rename('/a', '/b');
    await write(vfs, fh, 'ONE', 0);
    expect(fs.readFileSync(host('b'), 'utf8')).toBe('ONE');
    const opens = count.opens();
    const fh2 = await vfs.open('/b', RO);
    expect(count.opens()).toBe(opens); // joined the existing state under its new name
    expect(await readAll(vfs, fh2)).toBe('ONE');
    await vfs.truncate('/b', 1);
    expect(await readAll(vfs, fh)).toBe('O');
    // the old name is free for a new file with its own state
    const fa = await vfs.create('/a', 0o644, RW | CREAT | EXCL);
    expect(await readAll(vfs, fa)).toBe('');
    for (const h of [fh, fh2, fa]) await vfs.release(h);
    expect(count.live()).toBe(0);
  });

  it('rename of a directory with open files inside: handles follow, deep paths rebase', async () => {
    await vfs.mkdir('/d', 0o755);
    await vfs.mkdir('/d/sub', 0o755);
    await vfs.mkdir('/dd', 0o755); // a sibling whose name extends "/d": must not move
    const f1 = await vfs.create('/d/f', 0o644, RW | CREAT);
    const f2 = await vfs.create('/d/sub/g', 0o644, RW | CREAT);
    const f3 = await vfs.create('/dd/h', 0o644, RW | CREAT);
    await vfs.rename('/d', '/e');
    await write(vfs, f1, 'f1', 0);
    await write(vfs, f2, 'f2', 0);
    await write(vfs, f3, 'f3', 0);
    expect(fs.readFileSync(host('e/f'), 'utf8')).toBe('f1');
    expect(fs.readFileSync(host('e/sub/g'), 'utf8')).toBe('f2');
    expect(fs.readFileSync(host('dd/h'), 'utf8')).toBe('f3');
    const opens = count.opens();
    const g = await vfs.open('/e/sub/g', RO);
    const h = await vfs.open('/dd/h', RO);
    expect(count.opens()).toBe(opens);
    expect(await readAll(vfs, g)).toBe('f2');
    // and once more, into a new parent
    await vfs.mkdir('/p', 0o755);
    await vfs.rename('/e/sub', '/p/moved');
    await write(vfs, f2, 'F2', 0);
    expect(fs.readFileSync(host('p/moved/g'), 'utf8')).toBe('F2');
    const g2 = await vfs.open('/p/moved/g', RO);
    expect(count.opens()).toBe(opens);
    // nothing open at the old places: new files there get fresh states
    await vfs.mkdir('/d', 0o755);
    const fresh = await vfs.create('/d/f', 0o644, RW | CREAT | EXCL);
    expect(await readAll(vfs, fresh)).toBe('');
    for (const x of [f1, f2, f3, g, h, g2, fresh]) await vfs.release(x);
    expect(count.live()).toBe(0);
  });

  it('rename over an open file: the old handle keeps the old content; opening the name gives the new one', async () => {
    fs.writeFileSync(host('target'), 'old content');
    fs.writeFileSync(host('src'), 'new content');
    const old = await vfs.open('/target', RW);
    await vfs.rename('/src', '/target');
    expect(await readAll(vfs, old)).toBe('old content');
    const now = await vfs.open('/target', RO);
    expect(await readAll(vfs, now)).toBe('new content');
    // writing through the old handle does not touch the new file
    await write(vfs, old, 'OLD', 0);
    expect(await readAll(vfs, now)).toBe('new content');
    expect(fs.readFileSync(host('target'), 'utf8')).toBe('new content');
    await vfs.release(old);
    await vfs.release(now);
    expect(count.live()).toBe(0);
  });

  it('rename over an open file while the source is open too', async () => {
    fs.writeFileSync(host('a'), 'A');
    fs.writeFileSync(host('b'), 'B');
    const ha = await vfs.open('/a', RW);
    const hb = await vfs.open('/b', RW);
    await vfs.rename('/a', '/b');
    const hb2 = await vfs.open('/b', RO);
    expect(await readAll(vfs, hb2)).toBe('A');
    await write(vfs, ha, 'a', 1);
    expect(await readAll(vfs, hb2)).toBe('Aa');
    expect(await readAll(vfs, hb)).toBe('B');
    for (const h of [ha, hb, hb2]) await vfs.release(h);
    expect(count.live()).toBe(0);
  });

  it('libfuse .fuse_hidden rename of an open file: a real unlink, the hidden name aliases the open state', async () => {
    // libfuse 2 without hard_remove renames a file unlinked while open to .fuse_hidden<16 hex>,
    // asks getattr on that name (fstat), and unlinks it after the last close.
    await vfs.mkdir('/d', 0o755);
    fs.writeFileSync(host('d/f'), 'data');
    const fh = await vfs.open('/d/f', RW);
    const hidden = '/d/.fuse_hidden0000000200000001';
    await expectCode(vfs.getattr(hidden), 'ENOENT'); // libfuse probes for a free name first
    await vfs.rename('/d/f', hidden);
    expect(fs.readdirSync(host('d'))).toEqual([]); // never in the backend
    expect(await vfs.readdir('/d')).toEqual([]);
    let st = await vfs.getattr(hidden);
    expect([st.nlink, st.size]).toEqual([0, 4]);
    await write(vfs, fh, 'DATA!', 0);
    // the directory moves: libfuse now names the hidden node under the new path
    await vfs.rename('/d', '/e');
    const moved = '/e/.fuse_hidden0000000200000001';
    st = await vfs.getattr(moved);
    expect(st.size).toBe(5);
    await expectCode(vfs.getattr(hidden), 'ENOENT');
    // reopening by the hidden name (e.g. /proc/self/fd/N) joins the same state
    const again = await vfs.open(moved, RO);
    expect(await readAll(vfs, again)).toBe('DATA!');
    await vfs.release(again);
    // the name is free for a new file
    fs.writeFileSync(host('e/f'), 'new');
    await vfs.release(fh);
    await vfs.unlink(moved); // libfuse after the last close: nothing left to do in the backend
    await expectCode(vfs.getattr(moved), 'ENOENT');
    expect(fs.readdirSync(host('e'))).toEqual(['f']);
    expect(count.live()).toBe(0);
  });

  it('a .fuse_hidden-like rename of a file that is not open is an ordinary rename', async () => {
    fs.writeFileSync(host('f'), 'x');
    await vfs.rename('/f', '/.fuse_hidden0000000200000001');
    expect(fs.readdirSync(root)).toEqual(['.fuse_hidden0000000200000001']);
    await vfs.unlink('/.fuse_hidden0000000200000001');
    expect(fs.readdirSync(root)).toEqual([]);
  });

  it('hiddenRenameOfReleasedIsUnlink (libfuse 3): hiding a file already released unlinks it; the later unlink of the hidden name is a no-op', async () => {
    const v3 = new Vfs(count.backend, { hiddenRenameOfReleasedIsUnlink: true });
    fs.writeFileSync(host('f'), 'x');
    const fh = await v3.open('/f', RW);
    await v3.release(fh); // answered before libfuse dropped its count: it still thinks f is open
    const hidden = '/.fuse_hidden0000000300000001';
    await v3.rename('/f', hidden);
    expect(fs.readdirSync(root)).toEqual([]);
    await expectCode(v3.getattr(hidden), 'ENOENT');
    await v3.unlink(hidden); // libfuse's own cleanup after its last release, if it comes
    await expectCode(v3.unlink(hidden), 'ENOENT'); // remembered once only
    expect(count.live()).toBe(0);
  });

  it('rename rules: into itself EINVAL, ENOTEMPTY, EISDIR, ENOTDIR, ENOENT; same name is a no-op', async () => {
    await vfs.mkdir('/d', 0o755);
    await vfs.mkdir('/d/sub', 0o755);
    await expectCode(vfs.rename('/d', '/d/sub/x'), 'EINVAL');
    await expectCode(vfs.rename('/d', '/d/x'), 'EINVAL');
    await vfs.mkdir('/d2', 0o755); // "/d2" is not inside "/d"
    await vfs.rename('/d2', '/d2x');
    await vfs.mkdir('/e', 0o755);
    await expectCode(vfs.rename('/e', '/d'), 'ENOTEMPTY');
    fs.writeFileSync(host('f'), 'f');
    await expectCode(vfs.rename('/f', '/e'), 'EISDIR');
    await expectCode(vfs.rename('/e', '/f'), 'ENOTDIR');
    await expectCode(vfs.rename('/missing', '/x'), 'ENOENT');
    await expectCode(vfs.rename('/f', '/missing/x'), 'ENOENT');
    await vfs.rename('/f', '/f');
    expect(fs.readFileSync(host('f'), 'utf8')).toBe('f');
    // hard links to the same file: POSIX says rename does nothing
    await vfs.link('/f', '/g');
    await vfs.rename('/f', '/g');
    expect(fs.existsSync(host('f'))).toBe(true);
  });

  it('rename across file systems is EXDEV and changes nothing', async (ctx) => {
    if (!isRoot()) ctx.skip();
    fs.mkdirSync(host('other'));
    fs.writeFileSync(host('f'), 'f');
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', host('other')]);
    try {
      const fh = await vfs.open('/f', RW);
      await expectCode(vfs.rename('/f', '/other/f'), 'EXDEV');
      await expectCode(vfs.link('/f', '/other/f'), 'EXDEV');
      await write(vfs, fh, 'F', 0);
      const again = await vfs.open('/f', RO);
      expect(await readAll(vfs, again)).toBe('F');
      await vfs.release(fh);
      await vfs.release(again);
    } finally {
      execFileSync('umount', ['-l', host('other')]);
    }
  });

  it('mkdir, rmdir, readdir, ENOTEMPTY, ENOTDIR, EEXIST', async () => {
    await vfs.mkdir('/d', 0o755);
    await expectCode(vfs.mkdir('/d', 0o755), 'EEXIST');
    await vfs.mkdir('/d/e', 0o755);
    await vfs.release(await vfs.create('/d/f', 0o644, WO | CREAT));
    expect((await vfs.readdir('/d')).sort()).toEqual(['e', 'f']);
    expect(await vfs.readdir('/')).toEqual(['d']);
    await expectCode(vfs.rmdir('/d'), 'ENOTEMPTY');
    await expectCode(vfs.rmdir('/d/f'), 'ENOTDIR');
    await expectCode(vfs.readdir('/d/f'), 'ENOTDIR');
    await expectCode(vfs.unlink('/d/e'), 'EISDIR');
    await vfs.rmdir('/d/e');
    await vfs.unlink('/d/f');
    await vfs.rmdir('/d');
    expect(await vfs.readdir('/')).toEqual([]);
  });

  it('symlink and readlink (relative, absolute, dangling); symlinks are not followed', async () => {
    fs.writeFileSync(host('f'), 'data');
    await vfs.symlink('f', '/rel');
    await vfs.symlink('/abs/path/that/is/not/here', '/abs');
    await vfs.symlink('../../..', '/up');
    expect(await vfs.readlink('/rel')).toBe('f');
    expect(await vfs.readlink('/abs')).toBe('/abs/path/that/is/not/here');
    expect(await vfs.readlink('/up')).toBe('../../..');
    const st = await vfs.getattr('/rel');
    expect(st.type).toBe('symlink');
    expect(st.size).toBe(1);
    await expectCode(vfs.readlink('/f'), 'EINVAL');
    await expectCode(vfs.symlink('x', '/rel'), 'EEXIST');
    await expectCode(vfs.open('/rel', RO), 'ELOOP');
    await expectCode(vfs.readdir('/up'), 'ENOTDIR');
    expect(fs.readlinkSync(host('up'))).toBe('../../..');
  });

  it('link: two names, one node; a write through one is visible through the other', async () => {
    fs.writeFileSync(host('a'), 'one');
    await vfs.link('/a', '/b');
    expect((await vfs.getattr('/a')).nlink).toBe(2);
    expect((await vfs.getattr('/b')).ino).toBe((await vfs.getattr('/a')).ino);
    const fa = await vfs.open('/a', RW);
    const fb = await vfs.open('/b', RO);
    await write(vfs, fa, 'ONE', 0);
    expect(await readAll(vfs, fb)).toBe('ONE');
    await vfs.unlink('/a');
    expect((await vfs.getattr('/b')).nlink).toBe(1);
    expect(await readAll(vfs, fb)).toBe('ONE');
    await vfs.release(fa);
    await vfs.release(fb);
    await expectCode(vfs.link('/b', '/b'), 'EEXIST');
    await expectCode(vfs.link('/nope', '/c'), 'ENOENT');
    await vfs.mkdir('/d', 0o755);
    await expectCode(vfs.link('/d', '/d2'), 'EPERM');
  });

  it('chmod, chown (-1 keeps), utimens with nanosecond values (kept to the microsecond)', async () => {
    fs.writeFileSync(host('f'), '');
    await vfs.chmod('/f', 0o100600);
    expect((await vfs.getattr('/f')).mode).toBe(0o100600);
    await vfs.chmod('/f', 0o2755);
    expect((await vfs.getattr('/f')).mode & 0o7777).toBe(0o2755);
    if (isRoot()) {
      await vfs.chown('/f', 1234, 5678);
      await vfs.chown('/f', 0xffffffff, 42);
      let st = await vfs.getattr('/f');
      expect([st.uid, st.gid]).toEqual([1234, 42]);
      await vfs.chown('/f', 99, -1);
      st = await vfs.getattr('/f');
      expect([st.uid, st.gid]).toEqual([99, 42]);
    }
    const at = 981173106_123456789n; // 2001-02-03 04:05:06.123456789
    const mt = 1700000000_000001999n;
    await vfs.utimens('/f', { atimeNs: at, mtimeNs: mt });
    const st = await vfs.getattr('/f');
    expect(st.atimeNs / 1000n).toBe(at / 1000n);
    expect(st.mtimeNs / 1000n).toBe(mt / 1000n);
    await vfs.utimens('/f', { atimeNs: undefined, mtimeNs: 'now' });
    const st2 = await vfs.getattr('/f');
    expect(st2.atimeNs).toBe(st.atimeNs);
    expect(Number(st2.mtimeNs / 1_000_000n)).toBeGreaterThan(Date.now() - 5000);
    // symlinks: chmod is refused (Linux has no lchmod), utimens and chown touch the link
    await vfs.symlink('f', '/l');
    await expectCode(vfs.chmod('/l', 0o777), 'EOPNOTSUPP');
    await vfs.utimens('/l', { mtimeNs: at, atimeNs: at });
    expect((await vfs.getattr('/l')).mtimeNs / 1000n).toBe(at / 1000n);
    expect((await vfs.getattr('/f')).mtimeNs).toBe(st2.mtimeNs);
    await expectCode(vfs.chmod('/nope', 0o644), 'ENOENT');
    await expectCode(vfs.utimens('/nope', { mtimeNs: 'now' }), 'ENOENT');
  });

  it('statfs reports the backend file system', async () => {
    const s = await vfs.statfs('/');
    const ref = fs.statfsSync(root);
    expect(s.bsize).toBe(ref.bsize);
    expect(s.blocks).toBe(ref.blocks);
    expect(s.namemax).toBe(255);
    expect(s.bavail).toBeLessThanOrEqual(s.blocks);
  });

  it('rejects malformed paths with EINVAL before reaching the backend', async () => {
    for (const p of ['', 'rel', '/a/', '/a/../b', '/./a', '//a', '/..']) {
      // (some of these throw synchronously; the FUSE adapter turns either into an errno)
      await expectCode(() => vfs.getattr(p), 'EINVAL');
      await expectCode(() => vfs.readdir(p), 'EINVAL');
      await expectCode(() => vfs.open(p, RO), 'EINVAL');
      await expectCode(() => vfs.create(p, 0o644, WO | CREAT), 'EINVAL');
      await expectCode(() => vfs.mkdir(p, 0o755), 'EINVAL');
      await expectCode(() => vfs.rename('/x', p), 'EINVAL');
      await expectCode(() => vfs.unlink(p), 'EINVAL');
    }
    expect(fs.readdirSync(root)).toEqual([]);
  });

  it('closeAll releases every handle and closes every backend file', async () => {
    fs.writeFileSync(host('a'), 'a');
    await vfs.open('/a', RO);
    await vfs.open('/a', RW);
    await vfs.create('/b', 0o644, RW | CREAT);
    expect(vfs.openHandleCount).toBe(3);
    await vfs.closeAll();
    expect(vfs.openHandleCount).toBe(0);
    expect(count.live()).toBe(0);
  });
});

describe('Vfs mutation pipeline', () => {
  let tmp: string;
  let vfs: Vfs;
  let log: string[];
  beforeEach(() => {
    tmp = makeTemp();
    log = [];
    const stage: MutationStage = {
      name: 'recorder',
      async run<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
        if (m.path.startsWith('/deny') || m.target?.startsWith('/deny')) {
          log.push(`deny ${m.op} ${m.path}`);
          throw new VfsError(m.op === 'rename' ? 'EXDEV' : 'EACCES', 'denied by test policy');
        }
        log.push(`${m.op} ${m.path}${m.target ? ' ' + m.target : ''}${m.firstInSession ? ' first' : ''}`);
        return apply();
      },
      async endWriteSession(p: string | null, _c: Caller, reason: 'fsync' | 'close') {
        log.push(`end ${p} ${reason}`);
      },
    };
    vfs = new Vfs(new LocalBackend(tmp), { pipeline: new MutationPipeline([stage]) });
  });
  afterEach(async () => {
    await vfs.closeAll();
    rmTemp(tmp);
  });

  it('write sessions: first write flagged once; fsync and last close end the session at the current path', async () => {
    const fh = await vfs.create('/a', 0o644, RW | CREAT);
    await write(vfs, fh, 'x', 0);
    await write(vfs, fh, 'y', 1);
    await vfs.fsync(fh, false);
    await write(vfs, fh, 'z', 2);
    await vfs.rename('/a', '/b');
    const fh2 = await vfs.open('/b', RO);
    await vfs.release(fh);
    await vfs.release(fh2);
    expect(log).toEqual([
      'create /a', 'write /a first', 'write /a', 'end /a fsync', 'write /a first',
      'rename /a /b', 'end /b close',
    ]);
  });

  it('a write session of a file unlinked while open ends with path null', async () => {
    const fh = await vfs.create('/a', 0o644, RW | CREAT);
    await vfs.unlink('/a');
    await write(vfs, fh, 'x', 0);
    await vfs.release(fh);
    expect(log.length).toBe(4);
    expect(log[2]).toMatch(/^write .*first$/); // (the write's path of an unlinked file is the journal's call)
    expect([log[0], log[1], log[3]]).toEqual(['create /a', 'unlink /a', 'end null close']);
  });

  it('a refused mutation never reaches the backend', async () => {
    fs.writeFileSync(path.join(tmp, 'f'), 'f');
    await expectCode(vfs.rename('/f', '/deny'), 'EXDEV');
    await expectCode(vfs.mkdir('/deny', 0o755), 'EACCES');
    await expectCode(vfs.create('/deny', 0o644, WO | CREAT), 'EACCES');
    await expectCode(vfs.symlink('x', '/deny'), 'EACCES');
    expect(fs.readdirSync(tmp)).toEqual(['f']);
    expect(vfs.openHandleCount).toBe(0);
  });
});
