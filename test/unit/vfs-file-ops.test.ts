import fs, { constants as C } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fdOps } from '../../src/backend/fd-ops.js';
import { LocalBackend } from '../../src/backend/local.js';
import type { BackendFile } from '../../src/core/backend.js';
import { JournalService } from '../../src/journal/service.js';
import { silentLogger } from '../../src/core/log.js';
import type { Vfs } from '../../src/vfs/vfs.js';
import { policyFixture, type PolicyFixture } from '../helpers/policy.js';
import { expectCode, makeTemp, rmTemp } from '../helpers/tmp.js';

/**
 * fallocate, copy_file_range and SEEK_DATA/SEEK_HOLE in the core, without a mount: the policy
 * judges them as writes (EFBIG, EDQUOT, EBADF), usage stays exact, and the journal keeps what
 * they destroy so a rollback restores the bytes.
 */
const KiB = 1024;
const KEEP_SIZE = 1;
const PUNCH_HOLE = 2;
const ZERO_RANGE = 0x10;
const SEEK_DATA = 3;
const SEEK_HOLE = 4;
const A = Buffer.from(Array.from({ length: 64 * KiB }, (_, i) => (i * 7 + 3) & 0xff));
const D = Buffer.alloc(8 * KiB, 'd');

describe('core: fallocate, copy_file_range, lseek', () => {
  let fx: PolicyFixture;
  let svc: JournalService;
  let vfs: Vfs;
  beforeEach(async () => {
    fx = await policyFixture(
      'roots:\n  - path: /work\n    mode: rw\n    quota: { bytes: 2MiB, files: 50 }\n    maxFileBytes: 1MiB\n  - path: /ref\n    mode: ro\n',
      (src) => {
        fs.mkdirSync(path.join(src, 'work'));
        fs.mkdirSync(path.join(src, 'ref'));
        fs.writeFileSync(path.join(src, 'work/a.bin'), A);
        fs.writeFileSync(path.join(src, 'work/d.bin'), D);
        fs.writeFileSync(path.join(src, 'ref/r.bin'), 'read only');
        // a sparse file: 1 MiB, data only in [256 KiB, 260 KiB)
        const fd = fs.openSync(path.join(src, 'work/sparse.bin'), 'w');
        fs.ftruncateSync(fd, 1024 * KiB);
        fs.writeSync(fd, Buffer.alloc(4 * KiB, 's'), 0, 4 * KiB, 256 * KiB);
        fs.closeSync(fd);
      },
    );
    svc = await JournalService.open({
      stateDir: path.join(fx.dir, 'state'), backend: fx.ws.backend, source: fx.src, session: 's', actor: 'a', role: 'test', log: silentLogger,
    });
    vfs = svc.attachDirect(fx.ws.stages); // policy first, journal second
  });
  afterEach(async () => {
    await svc?.close();
    await fx?.close();
  });

  const bytes = (p: string) => fs.readFileSync(path.join(fx.src, p));
  const exact = async () => expect(fx.usage(0)).toEqual(await fx.recount(0));
  const close = async (fh: number) => {
    await vfs.flush(fh);
    await vfs.release(fh);
  };

  it('fallocate: grows (charged, EFBIG, EDQUOT), KEEP_SIZE charged for what it reserves, punches holes; rollback restores', async () => {
    const start = fx.usage(0);
    const fh = await vfs.open('/work/a.bin', C.O_RDWR);
    await vfs.fallocate(fh, 0, 0, 200 * KiB);
    expect((await vfs.fgetattr(fh)).size).toBe(200 * KiB);
    expect(fx.usage(0).bytes).toBe(start.bytes + 136 * KiB);
    await vfs.fallocate(fh, 0, 0, 100 * KiB); // inside: nothing grows
    expect((await vfs.fgetattr(fh)).size).toBe(200 * KiB);
    await expectCode(vfs.fallocate(fh, 0, 0, 1100 * KiB), 'EFBIG');
    await vfs.fallocate(fh, KEEP_SIZE, 0, 400 * KiB);
    expect((await vfs.fgetattr(fh)).size).toBe(200 * KiB);
    // blocks reserved up to 400 KiB: charged as if the file were that big
    expect(fx.usage(0).bytes).toBe(start.bytes + 336 * KiB);
    await exact();
    await vfs.fallocate(fh, KEEP_SIZE, 0, 300 * KiB); // inside the reservation: nothing more
    expect(fx.usage(0).bytes).toBe(start.bytes + 336 * KiB);
    await expectCode(vfs.fallocate(fh, KEEP_SIZE, 0, 1100 * KiB), 'EFBIG');
    await vfs.fallocate(fh, PUNCH_HOLE | KEEP_SIZE, 4 * KiB, 8 * KiB);
    await expectCode(vfs.fallocate(fh, ZERO_RANGE, 0, 4 * KiB), 'EOPNOTSUPP');
    await expectCode(vfs.fallocate(fh, PUNCH_HOLE, 0, 4 * KiB), 'EOPNOTSUPP');
    await expectCode(vfs.fallocate(fh, 0, 0, 0), 'EINVAL');
    await close(fh);
    const now = bytes('work/a.bin');
    expect(now.length).toBe(200 * KiB);
    expect(now.subarray(4 * KiB, 12 * KiB).equals(Buffer.alloc(8 * KiB))).toBe(true);
    expect(now.subarray(12 * KiB, 64 * KiB).equals(A.subarray(12 * KiB))).toBe(true);
    expect(now.subarray(64 * KiB).equals(Buffer.alloc(136 * KiB))).toBe(true);
    await exact();

    // quota: 2 MiB for the root, 1432 KiB used (a.bin costs its 400 KiB reservation, the
    // sparse file its size)
    expect(fx.usage(0).bytes).toBe(1432 * KiB);
    const b = await vfs.create('/work/b.bin', 0o644, C.O_RDWR | C.O_CREAT | C.O_EXCL);
    await vfs.fallocate(b, 0, 0, 300 * KiB);
    await vfs.fallocate(b, KEEP_SIZE, 0, 600 * KiB); // 300 KiB of blocks past the end: fits
    expect(fx.usage(0).bytes).toBe(2032 * KiB);
    await expectCode(vfs.fallocate(b, KEEP_SIZE, 0, 700 * KiB), 'EDQUOT'); // 100 KiB more: would not
    // writing into the reservation costs nothing more; past it, the growth beyond it
    await vfs.write(b, Buffer.alloc(200 * KiB, 'b'), 200 * KiB, 300 * KiB);
    expect(fx.usage(0).bytes).toBe(2032 * KiB);
    await exact();
    await vfs.write(b, Buffer.alloc(16 * KiB, 'b'), 16 * KiB, 596 * KiB);
    expect(fx.usage(0).bytes).toBe(2044 * KiB);
    await exact();
    // a truncate frees the reservation with the size
    await vfs.ftruncate(b, 100 * KiB);
    expect(fx.usage(0).bytes).toBe(1532 * KiB);
    await vfs.fallocate(b, KEEP_SIZE, 0, 400 * KiB);
    expect(fx.usage(0).bytes).toBe(1832 * KiB);
    await close(b);
    await exact();
    const c = await vfs.create('/work/c.bin', 0o644, C.O_RDWR | C.O_CREAT | C.O_EXCL);
    await expectCode(vfs.fallocate(c, 0, 0, 400 * KiB), 'EDQUOT');
    await close(c);
    await exact();

    // a read-only handle, a read-only root
    const ro = await vfs.open('/work/d.bin', C.O_RDONLY);
    await expectCode(vfs.fallocate(ro, 0, 0, KiB), 'EBADF');
    await vfs.release(ro);
    await expectCode(vfs.open('/ref/r.bin', C.O_RDWR), 'EROFS');

    svc.writer.flush();
    const r = await svc.rollback({ toSeq: 0 });
    expect(r.conflicts).toEqual([]);
    expect(bytes('work/a.bin').equals(A)).toBe(true);
    expect(fs.existsSync(path.join(fx.src, 'work/b.bin'))).toBe(false);
    expect(fx.usage(0)).toEqual(start);
    await exact();
  });

  it('copy_file_range: copies by the store (or read+write), judged and journaled as a write of the destination', async () => {
    const start = fx.usage(0);
    const a = await vfs.open('/work/a.bin', C.O_RDONLY);
    const d = await vfs.open('/work/d.bin', C.O_RDWR);
    // clipped to the source's end: 64 KiB, not 1 MiB
    expect(await vfs.copyFileRange(a, 0, d, 4 * KiB, 1024 * KiB, 0)).toBe(64 * KiB);
    expect(await vfs.copyFileRange(a, 64 * KiB, d, 0, KiB, 0)).toBe(0); // at the source's end
    expect(fx.usage(0).bytes).toBe(start.bytes + (68 - 8) * KiB);
    await expectCode(vfs.copyFileRange(a, 0, d, 1000 * KiB, 64 * KiB, 0), 'EFBIG');
    await expectCode(vfs.copyFileRange(d, 0, d, 4 * KiB, 8 * KiB, 0), 'EINVAL'); // overlap in one file
    expect(await vfs.copyFileRange(d, 0, d, 68 * KiB, 4 * KiB, 0)).toBe(4 * KiB); // no overlap: fine
    await expectCode(vfs.copyFileRange(d, 0, a, 0, KiB, 0), 'EBADF'); // destination read-only
    await expectCode(vfs.copyFileRange(a, 0, d, 0, KiB, 1), 'EINVAL'); // flags
    // a source the store cannot copy from itself (a /.ledgerfs file): read + write in the core
    const pol = await vfs.open('/.ledgerfs/policy', C.O_RDONLY);
    const policyText = await fx.readFile('/.ledgerfs/policy');
    expect(await vfs.copyFileRange(pol, 0, d, 72 * KiB, 64 * KiB, 0)).toBe(Buffer.byteLength(policyText));
    await vfs.release(pol);
    await close(d);
    await vfs.release(a);
    const now = bytes('work/d.bin');
    expect(now.subarray(0, 4 * KiB).equals(D.subarray(0, 4 * KiB))).toBe(true);
    expect(now.subarray(4 * KiB, 68 * KiB).equals(A)).toBe(true);
    expect(now.subarray(68 * KiB, 72 * KiB).equals(D.subarray(0, 4 * KiB))).toBe(true);
    expect(now.subarray(72 * KiB).toString()).toBe(policyText);
    await exact();

    svc.writer.flush();
    expect(svc.history().ops.map((o) => `${o.op} ${o.paths[0]}`)).toEqual(['write /work/d.bin']);
    const r = await svc.rollback({ toSeq: 0 });
    expect(r.conflicts).toEqual([]);
    expect(bytes('work/d.bin').equals(D)).toBe(true);
    expect(fx.usage(0)).toEqual(start);
  });

  it('lseek: SEEK_DATA/SEEK_HOLE from the backing file; the whole file is data where the store has no holes; ENXIO past the end', async () => {
    const s = await vfs.open('/work/sparse.bin', C.O_RDONLY);
    expect(await vfs.lseek(s, 0, SEEK_DATA)).toBe(256 * KiB);
    expect(await vfs.lseek(s, 0, SEEK_HOLE)).toBe(0);
    expect(await vfs.lseek(s, 256 * KiB, SEEK_HOLE)).toBe(260 * KiB);
    await expectCode(vfs.lseek(s, 260 * KiB, SEEK_DATA), 'ENXIO'); // no data after the last
    await expectCode(vfs.lseek(s, 2048 * KiB, SEEK_HOLE), 'ENXIO');
    await expectCode(vfs.lseek(s, 0, 0 /* SEEK_SET: the kernel's own */), 'EINVAL');
    await vfs.release(s);
    const p = await vfs.open('/.ledgerfs/policy', C.O_RDONLY);
    const size = (await vfs.fgetattr(p)).size;
    expect(await vfs.lseek(p, 10, SEEK_DATA)).toBe(10);
    expect(await vfs.lseek(p, 10, SEEK_HOLE)).toBe(size);
    await expectCode(vfs.lseek(p, size, SEEK_DATA), 'ENXIO');
    await vfs.release(p);
  });
});

/** The local store's own fallocate, copy and hole search on its backing fds (the fast paths above). */
describe('LocalBackend: fd ops', () => {
  let tmp: string;
  let b: LocalBackend;
  const files: BackendFile[] = [];
  const open = async (p: string, write: boolean) => {
    const f = await b.open(p, { write, create: write });
    files.push(f);
    return f;
  };
  beforeEach(() => {
    tmp = makeTemp();
    fs.writeFileSync(path.join(tmp, 'a'), A);
    b = new LocalBackend(tmp);
  });
  afterEach(async () => {
    for (const f of files.splice(0)) await f.close();
    rmTemp(tmp);
  });

  it('is built (scripts/build-native.mjs): without it these ops would quietly take the slow paths', () => {
    expect(fdOps()).not.toBeNull();
  });

  it('copies a range between two of its files, and refuses (EXDEV) a file of another store', async () => {
    const a = await open('/a', false);
    const c = await open('/c', true);
    expect(await a.copyRangeTo?.(c, 1000, 10, 5000)).toBe(5000);
    expect(await a.copyRangeTo?.(c, A.length - 100, 5010, 1000)).toBe(100); // short at the source's end
    const got = fs.readFileSync(path.join(tmp, 'c'));
    expect(got.length).toBe(5110);
    expect(got.subarray(0, 10).equals(Buffer.alloc(10))).toBe(true);
    expect(got.subarray(10, 5010).equals(A.subarray(1000, 6000))).toBe(true);
    expect(got.subarray(5010).equals(A.subarray(A.length - 100))).toBe(true);
    const foreign = { ...c } as BackendFile; // not one of its files
    await expectCode(() => a.copyRangeTo?.(foreign, 0, 0, 10), 'EXDEV');
  });

  it('copies off the JS thread, and closing a file waits for a copy still using its fd', async () => {
    const big = Buffer.alloc(8 * 1024 * KiB, 'q');
    fs.writeFileSync(path.join(tmp, 'big'), big);
    // more copies than libuv has threads (4): the last ones wait in its queue, fds still unused
    const n = 8;
    const srcs = await Promise.all(Array.from({ length: n }, () => b.open('/big', { write: false })));
    const dsts = await Promise.all(Array.from({ length: n }, (_, i) => open(`/copy${i}`, true)));
    const copies = srcs.map((src, i) => src.copyRangeTo?.(dsts[i] as BackendFile, 0, 0, big.length));
    let ticked = false;
    setImmediate(() => (ticked = true));
    // the fds must not go (nor be reused by the next open) under the copies
    await Promise.all(srcs.map((src) => src.close()));
    expect(await Promise.all(copies)).toEqual(Array(n).fill(big.length));
    expect(ticked).toBe(true); // the loop ran while the copies did
    for (let i = 0; i < n; i++) expect(fs.readFileSync(path.join(tmp, `copy${i}`)).equals(big)).toBe(true);
  });

  it('allocates, keeps the size, punches holes; finds data and holes; ENXIO past the end', async () => {
    const f = await open('/f', true);
    await f.allocate?.('allocate', 0, 256 * KiB);
    expect((await f.stat()).size).toBe(256 * KiB);
    await f.write(Buffer.alloc(256 * KiB, 'z'), 256 * KiB, 0);
    await f.allocate?.('keep-size', 0, 512 * KiB);
    const st = await f.stat();
    expect(st.size).toBe(256 * KiB);
    expect(st.blocks * 512).toBeGreaterThanOrEqual(512 * KiB);
    await f.allocate?.('punch-hole', 64 * KiB, 64 * KiB);
    const got = fs.readFileSync(path.join(tmp, 'f'));
    expect(got.subarray(64 * KiB, 128 * KiB).equals(Buffer.alloc(64 * KiB))).toBe(true);
    expect(got.subarray(128 * KiB).equals(Buffer.alloc(128 * KiB, 'z'))).toBe(true);
    expect(await f.seekData?.(0, 'hole')).toBe(64 * KiB);
    expect(await f.seekData?.(64 * KiB, 'data')).toBe(128 * KiB);
    await expectCode(() => f.seekData?.(256 * KiB, 'data'), 'ENXIO');
  });
});
