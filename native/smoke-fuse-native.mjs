#!/usr/bin/env node
// End-to-end smoke test of the patched fuse-native (native/FUSE_NATIVE_PATCH.md): mounts a small
// in-memory filesystem at a fresh temp dir and drives it with real tools in child processes.
//   node native/smoke-fuse-native.mjs        (root or a user allowed to mount FUSE; needs /dev/fuse)
// Checks: nanosecond timestamps both ways (touch -d / stat), atime and mtime set separately
// (UTIME_OMIT), touch without -d (UTIME_NOW), create flags (O_EXCL), 64-bit st_ino and statvfs,
// attrTimeout 0 honoured, big writes, data read back intact. Always unmounts and removes the dir.
import { createRequire } from 'node:module';
import { execFile as execFileCb, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const require = createRequire(import.meta.url);
const Fuse = require('fuse-native');
const execFile = promisify(execFileCb);

const UTIME_NOW = 0x3fffffff;
const UTIME_OMIT = 0x3ffffffe;
const O_EXCL = 0o200;
const O_CREAT = 0o100;

// ---- a tiny in-memory filesystem (paths are flat names under /) ----
const nowNs = () => BigInt(Date.now()) * 1_000_000n;
const files = new Map(); // name -> { mode, data, atimeNs, mtimeNs, ctimeNs, ino }
let nextIno = 2n ** 40n + 1n; // > 32 bits on purpose: st_ino is 64-bit now (visible with use_ino)
const rootNs = nowNs();
const seen = { createFlags: [], utimens: [], writeSizes: [], readSizes: [], readPaths: [] };
const handles = new Map(); // fd -> file (open files keep working after unlink: nullPathOk)
let nextFd = 10;
function openFd(f) {
  const fd = nextFd++;
  handles.set(fd, f);
  return fd;
}

function attrOf(f) {
  return {
    mode: f.mode, uid: 0, gid: 0, size: f.data.length, nlink: 1, ino: f.ino,
    blksize: 4096, blocks: Math.ceil(f.data.length / 512),
    atimeNs: f.atimeNs, mtimeNs: f.mtimeNs, ctimeNs: f.ctimeNs,
  };
}
function lookup(p) {
  return files.get(p.slice(1));
}
function setTime(sec, nsec) {
  if (nsec === UTIME_OMIT) return undefined;
  if (nsec === UTIME_NOW) return nowNs();
  return BigInt(sec) * 1_000_000_000n + BigInt(nsec);
}

const ops = {
  getattr(p, cb) {
    if (p === '/') return cb(0, { mode: 0o40755, size: 4096, nlink: 2, ino: 1, atimeNs: rootNs, mtimeNs: rootNs, ctimeNs: rootNs });
    const f = lookup(p);
    return f ? cb(0, attrOf(f)) : cb(Fuse.ENOENT);
  },
  fgetattr(p, fd, cb) {
    const f = handles.get(fd) ?? lookup(p);
    return f ? cb(0, attrOf(f)) : cb(Fuse.ENOENT);
  },
  readdir(p, cb) {
    if (p !== '/') return cb(Fuse.ENOTDIR);
    return cb(0, [...files.keys()]);
  },
  statfs(p, cb) {
    // > 32-bit counts: 2^33 blocks of 4 KiB = 32 TiB, 5e9 inodes.
    cb(0, { bsize: 4096, frsize: 4096, blocks: 2 ** 33, bfree: 2 ** 33 - 7, bavail: 2 ** 32 + 5, files: 5e9, ffree: 5e9 - 3, favail: 5e9 - 3, namemax: 255 });
  },
  create(p, mode, flags, cb) {
    seen.createFlags.push({ path: p, flags });
    if (typeof cb !== 'function') throw new Error('create did not get (path, mode, flags, cb)');
    const t = nowNs();
    const f = { mode, data: Buffer.alloc(0), atimeNs: t, mtimeNs: t, ctimeNs: t, ino: nextIno++ };
    files.set(p.slice(1), f);
    cb(0, openFd(f));
  },
  open(p, flags, cb) {
    const f = lookup(p);
    return f ? cb(0, openFd(f)) : cb(Fuse.ENOENT);
  },
  release(p, fd, cb) {
    handles.delete(fd);
    cb(0);
  },
  utimens(p, aSec, aNsec, mSec, mNsec, cb) {
    seen.utimens.push([p, aSec, aNsec, mSec, mNsec]);
    const f = lookup(p);
    if (!f) return cb(Fuse.ENOENT);
    const a = setTime(aSec, aNsec);
    const m = setTime(mSec, mNsec);
    if (a !== undefined) f.atimeNs = a;
    if (m !== undefined) f.mtimeNs = m;
    f.ctimeNs = nowNs();
    cb(0);
  },
  truncate(p, size, cb) {
    const f = lookup(p);
    if (!f) return cb(Fuse.ENOENT);
    const d = Buffer.alloc(size);
    f.data.copy(d, 0, 0, Math.min(size, f.data.length));
    f.data = d;
    cb(0);
  },
  ftruncate(p, fd, size, cb) { ops.truncate(p, size, cb); },
  write(p, fd, buf, len, pos, cb) {
    seen.writeSizes.push(len);
    const f = handles.get(fd);
    if (!f) return cb(Fuse.ENOENT);
    if (pos + len > f.data.length) {
      const d = Buffer.alloc(pos + len);
      f.data.copy(d);
      f.data = d;
    }
    buf.copy(f.data, pos, 0, len); // copy out: buf is zero-copy and detached after cb
    // reply asynchronously, as a real backend would
    setImmediate(() => cb(len));
  },
  read(p, fd, buf, len, pos, cb) {
    seen.readSizes.push(len);
    seen.readPaths.push(p);
    const f = handles.get(fd);
    if (!f) return cb(Fuse.ENOENT);
    if (pos >= f.data.length) return cb(0);
    const n = f.data.copy(buf, 0, pos, Math.min(f.data.length, pos + len));
    Promise.resolve().then(() => cb(n));
  },
  unlink(p, cb) {
    return files.delete(p.slice(1)) ? cb(0) : cb(Fuse.ENOENT);
  },
};

// ---- checks ----
const results = [];
let failed = 0;
function check(name, ok, detail) {
  results.push(`${ok ? 'ok  ' : 'FAIL'} ${name}${detail ? `: ${detail}` : ''}`);
  if (!ok) failed++;
}
const env = { ...process.env, TZ: 'UTC', LC_ALL: 'C' };
const sh = async (cmd, args) => (await execFile(cmd, args, { env, maxBuffer: 1 << 20 })).stdout.trim();

const base = mkdtempSync(join(tmpdir(), 'fuse-native-smoke-'));
const mnt = join(base, 'm');
mkdirSync(mnt);
const fuse = new Fuse(mnt, ops, {
  timeout: false,
  attrTimeout: 0,
  entryTimeout: 0,
  extraOptions: ['big_writes', 'max_write=1048576', 'use_ino', 'hard_remove'],
  nullPathOk: true,
});
let mounted = false;

try {
  await new Promise((res, rej) => fuse.mount((e) => (e ? rej(e) : res())));
  mounted = true;
  const f = join(mnt, 'f');

  // 1. nanosecond mtime/atime through utimens and back through getattr
  await sh('touch', ['-d', '2001-02-03 04:05:06.123456789', f]);
  const y = await sh('stat', ['-c', '%y|%x', f]);
  check('touch -d ns -> stat %y', y === '2001-02-03 04:05:06.123456789 +0000|2001-02-03 04:05:06.123456789 +0000', y);
  const last = seen.utimens.at(-1);
  check('utimens got both times, exact', last && last[1] === 981173106 && last[2] === 123456789 && last[3] === 981173106 && last[4] === 123456789, JSON.stringify(last));

  // 2. atime and mtime separately (UTIME_OMIT passes through)
  await sh('touch', ['-a', '-d', '2002-03-04 05:06:07.111111111', f]);
  await sh('touch', ['-m', '-d', '2003-04-05 06:07:08.222222222', f]);
  const xy = await sh('stat', ['-c', '%x|%y', f]);
  check('touch -a / touch -m keep the other time', xy === '2002-03-04 05:06:07.111111111 +0000|2003-04-05 06:07:08.222222222 +0000', xy);
  const [ua, um] = seen.utimens.slice(-2);
  check('UTIME_OMIT raw in nsec', ua?.[4] === UTIME_OMIT && um?.[2] === UTIME_OMIT, JSON.stringify([ua, um]));

  // 3. touch without -d: UTIME_NOW raw in nsec
  await sh('touch', [f]);
  const un = seen.utimens.at(-1);
  check('UTIME_NOW raw in nsec', un?.[2] === UTIME_NOW && un?.[4] === UTIME_NOW, JSON.stringify(un));
  const age = Date.now() / 1000 - Number(await sh('stat', ['-c', '%Y', f]));
  check('touch (now) sets mtime to now', age >= -1 && age < 10, `${age.toFixed(2)} s old`);

  // 4. attrTimeout 0 honoured: a change behind the kernel's back shows at once
  files.get('f').mtimeNs = 1234567890987654321n;
  const y2 = await sh('stat', ['-c', '%y', f]);
  check('attrTimeout 0 (no attr cache)', y2 === '2009-02-13 23:31:30.987654321 +0000', y2);

  // 5. create flags
  await sh('python3', ['-c', `import os; fd=os.open(${JSON.stringify(join(mnt, 'x'))}, os.O_CREAT|os.O_WRONLY|os.O_EXCL, 0o640); os.close(fd)`]);
  const cx = seen.createFlags.find((c) => c.path === '/x');
  check('create gets flags with O_EXCL', !!cx && (cx.flags & O_EXCL) !== 0, cx && `flags=0o${cx.flags.toString(8)}`);
  let eexist = '';
  try {
    await sh('python3', ['-c', `import os; os.open(${JSON.stringify(join(mnt, 'x'))}, os.O_CREAT|os.O_WRONLY|os.O_EXCL)`]);
  } catch (e) {
    eexist = String(e.stderr);
  }
  check('second O_EXCL create fails EEXIST', /FileExistsError/.test(eexist));
  check('create flags include O_CREAT', !!cx && (cx.flags & O_CREAT) !== 0);

  // 6. 64-bit st_ino (use_ino) and statvfs
  const ino = await sh('stat', ['-c', '%i', join(mnt, 'x')]);
  check('64-bit st_ino', BigInt(ino) > 2n ** 32n, ino);
  const sf = await sh('stat', ['-f', '-c', '%S %b %f %a %c %d', mnt]);
  check('64-bit statvfs (stat -f)', sf === `4096 ${2 ** 33} ${2 ** 33 - 7} ${2 ** 32 + 5} 5000000000 4999999997`, sf);
  const df = await sh('df', ['-B1', '--output=size,avail', mnt]);
  check('df sees 32 TiB', df.split('\n')[1]?.trim().split(/\s+/)[0] === String(2 ** 33 * 4096), df.replace(/\n/g, ' / '));

  // 7. big writes, data intact through zero-copy buffers
  const src = join(base, 'src.bin');
  const data = randomBytes(8 << 20);
  writeFileSync(src, data);
  seen.writeSizes.length = 0;
  await sh('dd', [`if=${src}`, `of=${join(mnt, 'big')}`, 'bs=1M', 'status=none']);
  const ws = seen.writeSizes;
  const maxW = Math.max(...ws);
  check('dd bs=1M arrives in big writes (> 4 KiB)', maxW > 4096, `${ws.length} write calls, max ${maxW} B, first ${ws.slice(0, 3).join(',')}`);
  check('written bytes intact', Buffer.compare(files.get('big').data, data) === 0);
  seen.readSizes.length = 0;
  await sh('cmp', [src, join(mnt, 'big')]);
  check('read back intact (cmp)', true, `${seen.readSizes.length} read calls, max ${Math.max(...seen.readSizes)} B`);
  await sh('rm', [join(mnt, 'big')]);
  check('unlink', !files.has('big'));

  // 8. nullPathOk + hard_remove: an open file keeps working after unlink (path === null)
  seen.readPaths.length = 0;
  const u = join(mnt, 'u');
  const got = await sh('python3', ['-c', `import os,sys; p=sys.argv[1]; fd=os.open(p, os.O_CREAT|os.O_RDWR, 0o600); os.write(fd, b'still here'); os.unlink(p); print(os.path.exists(p), os.pread(fd, 10, 0).decode()); os.close(fd)`, u]);
  check('read after unlink (nullPathOk)', got === 'False still here' && seen.readPaths.includes(null), `${got}; read paths ${JSON.stringify(seen.readPaths)}`);
} catch (e) {
  check('unexpected error', false, e.stack || String(e));
} finally {
  if (mounted) {
    await new Promise((res) => fuse.unmount((e) => {
      if (e) check('fuse.unmount', false, e.message);
      res();
    }));
  }
  try {
    execFileSync('fusermount', ['-uz', mnt], { stdio: 'ignore' }); // fallback; fails when already unmounted
  } catch {}
  rmSync(base, { recursive: true, force: true });
}

console.log(results.join('\n'));
console.log(`${results.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
