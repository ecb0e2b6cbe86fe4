import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CLI, py, sh, startMount, TEST_BINDING } from '../helpers/mount.js';

/*
 * What only the low-level binding (native-ll) has to get right itself: node ids. The kernel
 * names files by id; the adapter keeps id -> (parent id, name) and computes paths by walking up
 * (src/fuse/node-table.ts). These tests mount with `--binding native-ll` whatever
 * LEDGERFS_TEST_BINDING says, with long kernel cache lifetimes so cached ids really are reused.
 */
const LL = ['--binding', 'native-ll', '--entry-timeout', '60', '--attr-timeout', '60'];
// the fuse-native pass would run these again exactly as the default pass did
const repeatPass = TEST_BINDING === 'fuse-native';

describe.skipIf(repeatPass)('native-ll binding: node ids', () => {
  it('a directory rename moves its subtree: children answer by their new path through cached entries', async () => {
    const m = await startMount({
      args: LL,
      populate: (src) => {
        fs.mkdirSync(path.join(src, 'd/sub'), { recursive: true });
        fs.writeFileSync(path.join(src, 'd/sub/f'), 'data\n');
      },
    });
    try {
      // cache d, d/sub and d/sub/f in the kernel (60 s), then move d: the kernel keeps the ids
      expect(sh('cat d/sub/f && stat -c %s d/sub/f', m.mnt)).toBe('data\n5\n');
      sh('mv d d2', m.mnt);
      expect(sh('echo more >> d2/sub/f && cat d2/sub/f', m.mnt)).toBe('data\nmore\n');
      expect(sh('stat -c %s d2/sub/f && ls d2/sub', m.mnt)).toBe('10\nf\n');
      expect(fs.readFileSync(path.join(m.src, 'd2/sub/f'), 'utf8')).toBe('data\nmore\n');
      expect(fs.existsSync(path.join(m.src, 'd'))).toBe(false);
      // the old name is free: a new d is a different directory, and d/sub is not there
      sh('mkdir d && echo new > d/g', m.mnt);
      expect(sh('ls d; test -e d/sub || echo no-sub', m.mnt)).toBe('g\nno-sub\n');
      // a rename into another directory, then one of the parent: both follow
      sh('mkdir -p x && mv d2/sub x/sub && mv x y', m.mnt);
      expect(sh('cat y/sub/f', m.mnt)).toBe('data\nmore\n');
      expect(fs.readFileSync(path.join(m.src, 'y/sub/f'), 'utf8')).toBe('data\nmore\n');
    } finally {
      await m.stop();
    }
  });

  // On GCS the UNLINK deletes the object: the backend keeps a local copy for the open handle first.
  it('unlink of an open file is a plain UNLINK: no hidden name, and fstat/read/write keep working', async () => {
    const m = await startMount({ args: LL, populate: (src) => fs.writeFileSync(path.join(src, 'f'), 'abc') });
    try {
      const out = py(`
import os
fd = os.open('f', os.O_RDWR)
os.unlink('f')
print(sorted(os.listdir('.')), sorted(os.listdir('../src')))
st = os.fstat(fd)
print(st.st_nlink, st.st_size)
os.lseek(fd, 0, os.SEEK_END)
os.write(fd, b'def')
os.lseek(fd, 0, os.SEEK_SET)
print(os.read(fd, 100).decode(), os.fstat(fd).st_size)
os.ftruncate(fd, 2)
print(os.fstat(fd).st_size)
os.close(fd)
print(sorted(os.listdir('.')), sorted(os.listdir('../src')))
`, m.mnt);
      expect(out).toBe("[] []\n0 3\nabcdef 6\n2\n[] []\n");
    } finally {
      await m.stop();
    }
  });

  it('after the kernel forgets its ids (drop_caches), lookups, renames and readdirplus still work, and ids are given back', async () => {
    const m = await startMount({
      args: LL,
      env: { LEDGERFS_NATIVE_STATS: '1' },
      populate: (src) => {
        fs.mkdirSync(path.join(src, 'many'));
        for (let i = 0; i < 300; i++) fs.writeFileSync(path.join(src, 'many', `f${i}`), `${i}\n`);
      },
    });
    try {
      // ls -l: readdirplus hands out ids (each a lookup); stat looks the rest up
      expect(sh('ls -l many | wc -l', m.mnt)).toBe('301\n');
      expect(sh('cat many/f7 many/f299', m.mnt)).toBe('7\n299\n');
      // dentries and inodes out: the kernel sends FORGET / BATCH_FORGET for every id
      sh('sync; echo 2 > /proc/sys/vm/drop_caches', m.mnt);
      expect(sh('cat many/f7 many/f299 && stat -c %s many/f123', m.mnt)).toBe('7\n299\n4\n');
      sh('mv many/f7 many/seven && mv many moved', m.mnt);
      expect(sh('cat moved/seven && ls moved | wc -l', m.mnt)).toBe('7\n300\n');
      sh('echo 2 > /proc/sys/vm/drop_caches', m.mnt);
      expect(sh('ls -l moved | grep -c " f" && cat moved/f8', m.mnt)).toBe('299\n8\n');
      sh('echo 2 > /proc/sys/vm/drop_caches', m.mnt);
      expect(fs.readFileSync(path.join(m.src, 'moved/seven'), 'utf8')).toBe('7\n');
    } finally {
      await m.stop();
    }
    // what the daemon still knew at unmount: the root and a few ids, not 300+ (a leak would)
    const known = /native-ll: (\d+) node ids known at unmount/.exec(m.logs());
    expect(known, m.logs()).not.toBeNull();
    expect(Number(known?.[1])).toBeLessThan(50);
  });
});

describe.skipIf(repeatPass)('native-ll binding: reading the session', () => {
  it('one caller at a time is read one request per wake-up, yet parallel callers are handed over in batches', async () => {
    const m = await startMount({ args: LL, env: { LEDGERFS_NATIVE_STATS: '1' } });
    try {
      // serial: every wake-up finds one request, so the binding stops reading until EAGAIN
      sh('mkdir s && for i in $(seq 1 200); do echo $i > s/f$i; done', m.mnt);
      // then four writers at once: requests queue up and a probe finds them
      sh('for k in 1 2 3 4; do (mkdir p$k && for i in $(seq 1 300); do echo $i > p$k/f$i; done) & done; wait', m.mnt);
      expect(sh('ls s p1 p2 p3 p4 | grep -c "^f"', m.mnt)).toBe(`${200 + 4 * 300}\n`);
      expect(sh('cat s/f200 p4/f300', m.mnt)).toBe('200\n300\n');
    } finally {
      await m.stop();
    }
    const stats = /(\d+) requests in (\d+) JS wake-ups \([\d.]+ per wake-up, largest batch (\d+)\)/.exec(m.logs());
    expect(stats, m.logs()).not.toBeNull();
    expect(Number(stats?.[3]), m.logs()).toBeGreaterThan(1);
  });

  /** user + system CPU seconds of a process so far (/proc/PID/stat, clock ticks of 1/100 s) */
  const cpuSeconds = (pid: number) => {
    const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
    return (Number(f[11]) + Number(f[12])) / 100;
  };
  const caught = (logs: string) => /spin: (\d+) requests caught in (\d+) spins, (\d+) spins ran out/.exec(logs);

  it('busy-polls while a caller works one request at a time, and sleeps once the caller stops', async () => {
    // the longest window: this checks the mechanism, not the tuning (a loaded machine can
    // leave a shell's next request more than the default 200 us after our answer)
    const m = await startMount({ args: [...LL, '--busy-poll', '10000'], env: { LEDGERFS_NATIVE_STATS: '1' } });
    let idleCpu = -1;
    try {
      sh('mkdir s && for i in $(seq 1 300); do echo $i > s/f$i; done && cat s/f* | wc -l', m.mnt);
      // idle: a spin ends within its window and an idle mount starts none; one that never
      // returned would burn the whole 1.5 s
      const pid = m.daemon.pid as number;
      const before = cpuSeconds(pid);
      await new Promise((r) => setTimeout(r, 1500));
      idleCpu = cpuSeconds(pid) - before;
      expect(sh('cat s/f300', m.mnt)).toBe('300\n');
    } finally {
      await m.stop();
    }
    const spin = caught(m.logs());
    const total = /(\d+) requests in \d+ JS wake-ups/.exec(m.logs());
    expect(spin, m.logs()).not.toBeNull();
    // most of the shell's ~1,800 create requests and the cat's come within 10 ms of our answer
    expect(Number(spin?.[1]), m.logs()).toBeGreaterThan(Number(total?.[1]) / 2);
    expect(idleCpu).toBeLessThan(0.3);
  });

  it('--busy-poll takes whole microseconds up to its maximum', () => {
    const r = spawnSync(process.execPath, [CLI, 'mount', '--busy-poll', '20000', '/nonexistent'], { encoding: 'utf8' });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('--busy-poll: expected whole microseconds from 0 to 10000, got "20000"');
  });

  it('--busy-poll 0 never polls: every request waits for a wake-up', async () => {
    const m = await startMount({ args: [...LL, '--busy-poll', '0'], env: { LEDGERFS_NATIVE_STATS: '1' } });
    try {
      sh('mkdir s && for i in $(seq 1 100); do echo $i > s/f$i; done', m.mnt);
      expect(sh('cat s/f100', m.mnt)).toBe('100\n');
    } finally {
      await m.stop();
    }
    expect(caught(m.logs())?.slice(1, 4), m.logs()).toEqual(['0', '0', '0']);
  });
});
