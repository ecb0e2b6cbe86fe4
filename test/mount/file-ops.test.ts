import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULTS } from '../../src/config/defaults.js';
import { startJournaledMount, type JournaledMount } from '../helpers/journaled-mount.js';
import { CLI, RUNNING_BINDING, onGcs, py, run, sh, startMount, type TestMount } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * fallocate, copy_file_range and lseek SEEK_DATA/SEEK_HOLE through a real mount, driven by
 * util-linux fallocate, coreutils cp (9.1 copies with copy_file_range and walks holes with
 * SEEK_DATA/SEEK_HOLE) and python's os module; everything they change is rolled back through
 * the journal. The daemon runs at debug level so that it logs the requests it got by op at
 * unmount: the kernel falls back silently (splice copy, generic lseek) when an op is missing,
 * so only those counts show that the ops themselves were served.
 */

const MiB = 1024 * 1024;
/** fuse-native (libfuse 2) has none of these ops: the kernel's own fallbacks answer there */
const servesOps = RUNNING_BINDING !== 'fuse-native';
/** blocks and holes are the backing file's: a local store behind a binding that passes them on */
const realBlocks = servesOps && !onGcs;

const random = (n: number, seed: string) => {
  const out = Buffer.alloc(n);
  let block = Buffer.from(seed);
  for (let at = 0; at < n; at += 32) {
    block = crypto.createHash('sha256').update(block).digest();
    block.copy(out, at, 0, Math.min(32, n - at));
  }
  return out;
};
const DATA = random(64 * 1024, 'data');
const BIG = random(20 * MiB, 'big');
const VICTIM = random(MiB, 'victim');

describe('mount: fallocate, copy_file_range, SEEK_DATA/SEEK_HOLE', () => {
  let j: JournaledMount;
  let m: TestMount;
  let state: string;
  beforeEach(async () => {
    j = await startJournaledMount('ops-1', {
      args: ['--log-level', 'debug'],
      populate: (src) => {
        fs.writeFileSync(path.join(src, 'data'), DATA);
        fs.writeFileSync(path.join(src, 'big'), BIG);
        fs.writeFileSync(path.join(src, 'victim'), VICTIM);
        fs.writeFileSync(path.join(src, 'small'), 'hello');
      },
    });
    ({ m, state } = j);
  });
  afterEach(async () => {
    expect(await j.finish(), 'the daemon logged errors').toEqual([]);
  });

  const file = (name: string) => fs.readFileSync(path.join(m.mnt, name));
  const rollback = () => {
    const r = spawnSync(process.execPath, [CLI, 'rollback', '--state', state, '--session', 'ops-1'], {
      encoding: 'utf8', env: { ...process.env, ...m.env }, timeout: 60_000,
    });
    if (r.status !== 0) throw new Error(`rollback exited ${r.status}\n${r.stderr}\n${r.stdout}`);
  };
  /** unmount, then the requests the daemon served by op (its debug summary) */
  const servedOps = async (): Promise<Record<string, { calls: number; errors: number }>> => {
    await m.stop();
    const line = m.logs().split('\n').find((l) => l.includes('"msg":"requests by op"'));
    if (!line) throw new Error(`no request summary in the daemon log\n${m.logs().slice(-2000)}`);
    return (JSON.parse(line) as { requests: Record<string, { calls: number; errors: number }> }).requests;
  };
  /** bytes the backend really holds for a file (local backend only: GCS has no blocks) */
  const backingBytes = (name: string) => fs.statSync(path.join(m.src, name)).blocks * 512;

  it('fallocate -l allocates (zeros, real blocks), -n keeps the size, -p punches a hole; rollback undoes them', async () => {
    if (!realBlocks) {
      // GCS stores objects, not blocks: fallocate(2) answers EOPNOTSUPP, never a faked success,
      // and posix_fallocate (fallocate -x) falls back to writing the range, journaled as writes
      expect(run('fallocate -l 1M grown', m.mnt).stderr).toMatch(/Operation not supported/);
      sh('fallocate -x -l 1M grown', m.mnt);
    } else {
      sh('fallocate -l 5M grown && fallocate -n -o 0 -l 1M small && fallocate -p -o 4096 -l 8192 data', m.mnt);
      expect(backingBytes('grown')).toBeGreaterThanOrEqual(5 * MiB);
      expect(fs.statSync(path.join(m.mnt, 'small')).size).toBe(5); // KEEP_SIZE
      expect(file('small').toString()).toBe('hello');
      expect(backingBytes('small')).toBeGreaterThanOrEqual(MiB); // its blocks are there
      const punched = file('data');
      expect(punched.length).toBe(DATA.length);
      expect(punched.subarray(4096, 12288).equals(Buffer.alloc(8192))).toBe(true);
      expect(punched.subarray(0, 4096).equals(DATA.subarray(0, 4096))).toBe(true);
      expect(punched.subarray(12288).equals(DATA.subarray(12288))).toBe(true);
      expect(backingBytes('data')).toBeLessThanOrEqual(DATA.length - 8192); // the hole is real
    }
    const grown = file('grown');
    expect(grown.length).toBe(realBlocks ? 5 * MiB : MiB);
    expect(grown.equals(Buffer.alloc(grown.length))).toBe(true);

    rollback();
    expect(fs.existsSync(path.join(m.mnt, 'grown'))).toBe(false);
    expect(file('data').equals(DATA)).toBe(true);
    expect(file('small').toString()).toBe('hello');
    if (servesOps) {
      const ops = await servedOps();
      expect(ops.fallocate?.calls).toBeGreaterThanOrEqual(realBlocks ? 3 : 1);
      expect(ops.fallocate?.errors ?? 0).toBe(realBlocks ? 0 : ops.fallocate?.calls);
    }
  });

  it('cp of a 20 MiB file (new and over an existing one) gives identical bytes; rollback undoes both', async () => {
    sh('cp big copy && cp big victim', m.mnt);
    expect(file('copy').equals(BIG)).toBe(true);
    expect(file('victim').equals(BIG)).toBe(true);
    if (!onGcs) expect(fs.readFileSync(path.join(m.src, 'victim')).equals(BIG)).toBe(true);
    rollback();
    expect(fs.existsSync(path.join(m.mnt, 'copy'))).toBe(false);
    expect(file('victim').equals(VICTIM)).toBe(true);
    if (servesOps) {
      const ops = await servedOps();
      // 20 MiB in pieces of at most DEFAULTS.copyRangeMaxBytes, per copy
      expect(ops.copy_file_range?.calls).toBeGreaterThanOrEqual(2 * Math.ceil(BIG.length / DEFAULTS.copyRangeMaxBytes));
      expect(ops.copy_file_range?.errors ?? 0).toBe(0);
    }
  });

  it('cp of a sparse file keeps its bytes (and its holes on a local store), found with SEEK_DATA/SEEK_HOLE', async () => {
    py(
      `
with open('sparse', 'wb') as f:
    f.truncate(10 << 20)
    f.seek(5 << 20)
    f.write(b'x' * 4096)
`,
      m.mnt,
    );
    sh('cp sparse sparse2', m.mnt);
    const want = Buffer.alloc(10 * MiB);
    want.fill('x', 5 * MiB, 5 * MiB + 4096);
    expect(file('sparse2').equals(want)).toBe(true);
    if (realBlocks) expect(backingBytes('sparse2')).toBeLessThan(MiB);
    rollback();
    expect(fs.existsSync(path.join(m.mnt, 'sparse2'))).toBe(false);
    if (realBlocks) {
      // cp looks for holes only where st_blocks says there are some: not on GCS
      const ops = await servedOps();
      expect(ops.lseek?.calls).toBeGreaterThanOrEqual(2);
    }
  });

  it('offsets past 2^53 (exact in the kernel, not in a JS number) are EFBIG, as on ext4, and change nothing', () => {
    // a pwrite at 2^62 used to report success and land at the descriptor's position (offset 0)
    const out = py(
      `
import errno, json, os
r = {}
fd = os.open('small', os.O_RDWR)
def err(f):
    try:
        return f()
    except OSError as e:
        return errno.errorcode[e.errno]
r['pwrite62'] = err(lambda: os.pwrite(fd, b'Z', 1 << 62))
r['pwrite53'] = err(lambda: os.pwrite(fd, b'Y', (1 << 53) + 2))
r['truncate62'] = err(lambda: os.ftruncate(fd, 1 << 62))
r['pread62'] = err(lambda: os.pread(fd, 10, 1 << 62).decode())
r['fallocate62'] = err(lambda: os.posix_fallocate(fd, 1 << 62, 4096))
r['seekdata62'] = err(lambda: os.lseek(fd, 1 << 62, os.SEEK_DATA))
os.close(fd)
r['content'] = open('small').read()
print(json.dumps(r))
`,
      m.mnt,
    );
    const r = JSON.parse(out) as Record<string, string>;
    expect(r).toEqual({
      pwrite62: 'EFBIG', pwrite53: 'EFBIG', truncate62: 'EFBIG', pread62: '', fallocate62: 'EFBIG',
      // (libfuse 2 has no lseek op: the kernel's generic answer, the offset itself)
      seekdata62: servesOps ? 'ENXIO' : r.seekdata62, content: 'hello',
    });
  });

  it('python: os.copy_file_range with offsets, os.lseek SEEK_DATA/SEEK_HOLE, ENXIO past the end', async () => {
    const out = py(
      `
import errno, json, os
r = {}
src = os.open('data', os.O_RDONLY)
dst = os.open('victim', os.O_RDWR)
r['copied'] = os.copy_file_range(src, dst, 1000, 100, 5000)   # 1000 bytes of data at 100 -> victim at 5000
r['past_end'] = os.copy_file_range(src, dst, 1000, 1 << 20, 0)  # nothing left to copy
r['clipped'] = os.copy_file_range(src, dst, 1 << 20, len(open('data', 'rb').read()) - 10, 0)
os.close(src); os.close(dst)
with open('holey', 'wb') as f:
    f.truncate(4 << 20)
    f.seek(2 << 20)
    f.write(b'y' * 8192)
fd = os.open('holey', os.O_RDONLY)
r['data0'] = os.lseek(fd, 0, os.SEEK_DATA)
r['hole0'] = os.lseek(fd, 0, os.SEEK_HOLE)
r['holeAfterData'] = os.lseek(fd, 2 << 20, os.SEEK_HOLE)
def enx(off, whence):
    try:
        return os.lseek(fd, off, whence)
    except OSError as e:
        return errno.errorcode[e.errno]
r['dataPastEnd'] = enx(8 << 20, os.SEEK_DATA)
r['holePastEnd'] = enx(8 << 20, os.SEEK_HOLE)
r['dataAfterLast'] = enx((2 << 20) + 8192, os.SEEK_DATA)
print(json.dumps(r))
`,
      m.mnt,
    );
    const r = JSON.parse(out) as Record<string, number | string>;
    expect(r.copied).toBe(1000);
    expect(r.past_end).toBe(0);
    expect(r.clipped).toBe(10);
    const victim = file('victim');
    expect(victim.subarray(5000, 6000).equals(DATA.subarray(100, 1100))).toBe(true);
    expect(victim.subarray(0, 10).equals(DATA.subarray(DATA.length - 10))).toBe(true);
    expect(victim.subarray(6000).equals(VICTIM.subarray(6000))).toBe(true);
    expect(r.dataPastEnd).toBe('ENXIO');
    expect(r.holePastEnd).toBe('ENXIO');
    if (!realBlocks) {
      // no holes in an object (nor in the kernel's fallback): all data, one hole at the end
      expect([r.data0, r.hole0, r.holeAfterData, r.dataAfterLast]).toEqual([0, 4 * MiB, 4 * MiB, (2 * MiB) + 8192]);
    } else {
      // the backing file's own holes (ext4, tmpfs: block granular)
      expect([r.data0, r.hole0, r.holeAfterData, r.dataAfterLast]).toEqual([2 * MiB, 0, 2 * MiB + 8192, 'ENXIO']);
    }
    rollback();
    expect(file('victim').equals(VICTIM)).toBe(true);
    expect(fs.existsSync(path.join(m.mnt, 'holey'))).toBe(false);
    if (servesOps) {
      const ops = await servedOps();
      expect(ops.copy_file_range?.calls).toBeGreaterThanOrEqual(2);
      expect(ops.lseek?.calls).toBeGreaterThanOrEqual(5);
    }
  });
});

describe.skipIf(!realBlocks)('mount: fallocate --keep-size under a quota (issue 13.6)', () => {
  it('is charged: past the quota EDQUOT; journaled: rollback restores size, bytes and mtime exactly, with no false conflict', async () => {
    const dir = makeTemp('keep-size');
    const ws = path.join(dir, 'ws');
    const state = path.join(dir, 'state');
    fs.mkdirSync(path.join(ws, 'w'), { recursive: true });
    const old = path.join(ws, 'w/old');
    fs.writeFileSync(old, 'old content\n');
    fs.utimesSync(old, 1_000_000_000, 1_000_000_000);
    const before = fs.statSync(old, { bigint: true });
    fs.writeFileSync(path.join(dir, 'p.yaml'), 'backend: {type: local, path: ./ws}\nroots: [{path: /w, mode: rw, quota: {bytes: 10MiB}}]\n');
    let m: TestMount | undefined;
    try {
      m = await startMount({ src: ws, omitSource: true, args: ['--policy', path.join(dir, 'p.yaml'), '--state', state, '--session', 'ks'] });
      // a journaled change, then blocks reserved past the end of the same file
      sh('echo more >> w/old && fallocate -n -l 3M w/old', m.mnt);
      expect(fs.statSync(old).size).toBe(17);
      // the round: nine 5 MiB reservations under a 10 MiB quota took 45 MiB; now one fits
      const r = run('for i in 1 2 3 4 5 6 7 8 9; do touch w/f$i && fallocate -n -l 5M w/f$i; done', m.mnt);
      expect(r.stderr.match(/Disk quota exceeded/g)?.length, r.stderr).toBe(8);
      expect(r.stderr).toMatch(/fallocate: fallocate failed: Disk quota exceeded/);
      const held = fs.readdirSync(path.join(ws, 'w')).reduce((n, f) => n + fs.statSync(path.join(ws, 'w', f)).blocks * 512, 0);
      expect(held).toBeLessThanOrEqual(10 * MiB);
      expect(held).toBeGreaterThanOrEqual(8 * MiB);
      // what the program sees of it: df counts the reservations
      const used = Number(sh('df -B1 --output=used w', m.mnt).trim().split('\n')[1]);
      expect(used).toBeGreaterThanOrEqual(8 * MiB);

      const rb = spawnSync(process.execPath, [CLI, 'rollback', '--state', state, '--session', 'ks'], { encoding: 'utf8', timeout: 60_000 });
      expect(rb.status, rb.stderr + rb.stdout).toBe(0);
      expect(rb.stdout + rb.stderr).not.toMatch(/conflict|changed/i);
      const after = fs.statSync(old, { bigint: true });
      expect(fs.readFileSync(old, 'utf8')).toBe('old content\n');
      expect(after.size).toBe(before.size);
      expect(after.mtimeNs).toBe(before.mtimeNs);
      expect(after.blocks).toBeLessThanOrEqual(8n); // the reserved blocks went with the undo
      expect(fs.readdirSync(path.join(ws, 'w'))).toEqual(['old']);
      expect(m.errors()).toEqual([]);
    } finally {
      await m?.stop();
      rmTemp(dir);
    }
  });
});
