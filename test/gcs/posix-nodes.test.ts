import fs from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { py, sh, startMount, type TestMount } from '../helpers/mount.js';
import { startGcsFixture, type GcsFixture } from './fixture.js';

/*
 * POSIX nodes on object storage, as pjdfstest judges them (issue 15): special files kept as
 * objects with their type in metadata, inode numbers that follow a rename, directory times and
 * link counts that follow their entries.
 */
describe('gcs: special files, inode numbers across renames, directory times', () => {
  let g: GcsFixture;
  let m: TestMount;
  const meta = async (name: string) => {
    const [md] = await g.storage.bucket(g.bucket).file(name).getMetadata();
    return (md.metadata ?? {}) as Record<string, string>;
  };

  beforeAll(async () => {
    g = await startGcsFixture('ledgerfs-posix-nodes');
    m = await startMount({ gcs: { emulator: g.emulator, bucket: g.bucket } });
  }, 120_000);
  afterAll(async () => {
    await m?.stop();
    await g?.stop();
  });

  it('mkfifo makes a FIFO that passes bytes; it is an empty object typed in its metadata', async () => {
    sh('mkfifo -m 0640 p && (echo through-the-pipe > p &) && cat p', m.mnt);
    const out = sh('cat p & sleep 0.2; echo again > p; wait', m.mnt);
    expect(out).toBe('again\n');
    expect(sh('stat -c "%F %a %s" p', m.mnt)).toBe('fifo 640 0\n');
    expect((await meta('p')).ledgerfs_special).toBe('fifo');
    expect(sh('ls -l p', m.mnt)).toMatch(/^p/);
  });

  it('a socket is kept with its type; a device node is refused under --source, as on a local source', () => {
    py(`import socket; s = socket.socket(socket.AF_UNIX); s.bind('sock'); s.close()`, m.mnt);
    expect(sh('stat -c %F sock', m.mnt)).toBe('socket\n');
    expect(sh('mknod blk b 7 9 2>&1 || echo refused', m.mnt)).toMatch(/Operation not permitted\nrefused\n$/);
    expect(fs.existsSync(`${m.mnt}/blk`)).toBe(false);
    sh('rm sock', m.mnt);
  });

  it('a device node a mount file grants is kept with its type and device number', async () => {
    const file = `${m.dir}/devices.yaml`;
    fs.writeFileSync(file, `backend: { type: gcs, bucket: ${g.bucket}, prefix: granted, apiEndpoint: "${g.emulator.url}" }\nroots:\n  - path: /\n    mode: rw\nprivileges: { devices: true }\n`);
    const granted = await startMount({ omitSource: true, args: ['--policy', file] });
    try {
      sh('mknod blk b 7 9 && mknod chr c 1 3', granted.mnt);
      expect(sh('stat -c "%F %t %T" blk chr', granted.mnt)).toBe('block special file 7 9\ncharacter special file 1 3\n');
      expect(await meta('granted/blk')).toMatchObject({ ledgerfs_special: 'blockdev', ledgerfs_rdev: String((7 << 8) | 9) });
      sh('rm blk chr', granted.mnt);
      expect(fs.existsSync(`${granted.mnt}/blk`)).toBe(false);
    } finally {
      await granted.stop();
    }
  });

  it('rename keeps the inode number of a file, a directory and what is inside it; the old name gets a new one', () => {
    sh('echo a > f && mkdir -p d/sub && echo b > d/sub/x', m.mnt);
    const before = sh('stat -c %i f d d/sub d/sub/x', m.mnt).trim().split('\n');
    sh('mv f f2 && mv d d2', m.mnt);
    expect(sh('stat -c %i f2 d2 d2/sub d2/sub/x', m.mnt).trim().split('\n')).toEqual(before);
    sh('echo new > f', m.mnt);
    expect(sh('stat -c %i f', m.mnt).trim()).not.toBe(before[0]);
    sh('mv f2 f', m.mnt); // back over the new file
    expect(sh('stat -c %i f', m.mnt).trim()).toBe(before[0]);
  });

  it("a directory's mtime and ctime move when an entry is made, removed or renamed (utimens still sets them)", () => {
    sh('mkdir -p t/a t/b', m.mnt);
    const times = (p: string) => py(`import os,sys; s = os.stat(sys.argv[1]); print(s.st_mtime_ns, s.st_ctime_ns)`, m.mnt, [p]).trim().split(' ').map(BigInt);
    let last = times('t/a');
    const moved = (p: string) => {
      const now = times(p);
      const ok = (now[0] as bigint) > (last[0] as bigint) && (now[1] as bigint) > (last[1] as bigint);
      last = now;
      return ok;
    };
    for (const cmd of ['touch t/a/f', 'mkdir t/a/sub', 'ln -s f t/a/l', 'mkfifo t/a/p', 'rm t/a/f', 'rmdir t/a/sub', 'mv t/a/l t/a/l2']) {
      sh(`sleep 0.02; ${cmd}`, m.mnt);
      expect(moved('t/a'), cmd).toBe(true);
    }
    const b = times('t/b');
    sh('sleep 0.02; mv t/a/p t/b/p', m.mnt);
    expect(moved('t/a')).toBe(true);
    expect(times('t/b')[0]).toBeGreaterThan(b[0] as bigint);
    sh('touch -m -d @981173106.5 t/a', m.mnt);
    expect(times('t/a')[0]).toBe(981173106_500_000_000n);
  });

  it("a directory's link count is 2 + its subdirectories, made, removed and renamed through the mount", () => {
    const nlink = (p: string) => Number(sh(`stat -c %h ${p}`, m.mnt).trim());
    sh('mkdir -p n/a n/b && mkdir n/a/x n/a/y && touch n/a/f', m.mnt);
    expect([nlink('n'), nlink('n/a'), nlink('n/b')]).toEqual([4, 4, 2]);
    sh('mv n/a/x n/b/x && rmdir n/a/y', m.mnt);
    expect([nlink('n/a'), nlink('n/b')]).toEqual([2, 3]);
    sh('mkdir n/c && mv n/b n/c/b', m.mnt);
    expect([nlink('n'), nlink('n/c'), nlink('n/c/b')]).toEqual([4, 3, 3]);
  });
});
