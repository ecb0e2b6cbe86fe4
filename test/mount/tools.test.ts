import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { py, run, sh, startMount, type TestMount } from '../helpers/mount.js';

const UTC = 'export TZ=UTC LC_ALL=C; ';

/** Real tools on a real mount: cp, mv, git, python mmap, touch. */
describe('mount: everyday tools', () => {
  let m: TestMount;
  beforeEach(async () => {
    m = await startMount();
  });
  afterEach(async () => {
    const errors = m.errors();
    await m.stop();
    expect(errors, 'the daemon logged errors').toEqual([]);
  });

  it('cp and cp -p (mode, owner, timestamps to the microsecond)', () => {
    const out = path.join(m.dir, 'outside');
    fs.mkdirSync(out);
    sh(`${UTC}printf 'some bytes\\n' > f && chmod 640 f && chown 1234:5678 f && touch -d '2010-05-06 07:08:09.987654321' f`, out);
    sh(`cp ${out}/f plain && cp -p ${out}/f kept`, m.mnt);
    expect(sh('cat plain kept', m.mnt)).toBe('some bytes\nsome bytes\n');
    const kept = sh(`${UTC}stat -c '%a %u %g %y' kept`, m.mnt).trim();
    expect(kept).toMatch(/^640 1234 5678 2010-05-06 07:08:09\.987654\d{3} \+0000$/);
    const plain = sh(`${UTC}stat -c '%a %u %g %Y' plain`, m.mnt).trim().split(' ');
    expect(plain.slice(0, 3)).toEqual(['640', '0', '0']);
    expect(Math.abs(Number(plain[3]) - Date.now() / 1000)).toBeLessThan(60);
    // and back out again, plus a recursive copy of a tree
    sh('mkdir -p tree/a/b && printf 1 > tree/a/one && printf 2 > tree/a/b/two && ln -s a/one tree/link', m.mnt);
    sh(`cp -a tree ${out}/tree-copy && cp -a ${out}/tree-copy tree2`, m.mnt);
    expect(run(`diff -r --no-dereference tree tree2 && diff -r --no-dereference tree ${out}/tree-copy`, m.mnt).status).toBe(0);
    expect(sh('readlink tree2/link', m.mnt)).toBe('a/one\n');
  });

  it('mv -T: file over file, dir over empty dir, refusal over a non-empty dir; mv across the mount boundary', () => {
    sh('printf A > a && printf B > b && mv -T a b', m.mnt);
    expect(sh('ls; cat b', m.mnt)).toBe('b\nA');
    sh('mkdir -p d1/sub && printf x > d1/sub/x && mkdir d2 && mv -T d1 d2', m.mnt);
    expect(sh('find d2 | sort', m.mnt)).toBe('d2\nd2/sub\nd2/sub/x\n');
    sh('mkdir -p d3/full && touch d3/full/f', m.mnt);
    const r = run('mv -T d2 d3', m.mnt);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/Directory not empty|File exists/);
    expect(fs.existsSync(path.join(m.src, 'd2/sub/x'))).toBe(true);
    // a file moved in from outside (another file system: EXDEV, mv copies and deletes)
    fs.writeFileSync(path.join(m.dir, 'from-outside'), 'outside');
    sh(`mv ${m.dir}/from-outside d3/`, m.mnt);
    expect(fs.readFileSync(path.join(m.src, 'd3/from-outside'), 'utf8')).toBe('outside');
    expect(fs.existsSync(path.join(m.dir, 'from-outside'))).toBe(false);
    sh(`mv d3 ${m.dir}/d3-out`, m.mnt);
    expect(fs.readdirSync(path.join(m.dir, 'd3-out')).sort()).toEqual(['from-outside', 'full']);
    expect(fs.existsSync(path.join(m.src, 'd3'))).toBe(false);
  });

  it('git init, add, commit, status, modify, commit again, fsck', () => {
    const git = 'git -c user.name=Tester -c user.email=tester@example.com -c init.defaultBranch=main -c gc.auto=0';
    sh(`${git} init -q repo`, m.mnt);
    const repo = path.join(m.mnt, 'repo');
    for (let i = 0; i < 60; i++) {
      fs.mkdirSync(path.join(repo, `dir${i % 6}`), { recursive: true });
      fs.writeFileSync(path.join(repo, `dir${i % 6}`, `file${i}.txt`), `content ${i}\n`.repeat(i + 1));
    }
    fs.writeFileSync(path.join(repo, 'run.sh'), '#!/bin/sh\necho hi\n', { mode: 0o755 });
    fs.symlinkSync('dir0/file0.txt', path.join(repo, 'link'));
    sh(`${git} add -A && ${git} commit -q -m first`, repo);
    expect(sh(`${git} status --porcelain`, repo)).toBe('');
    expect(sh(`${git} ls-files | wc -l`, repo).trim()).toBe('62');
    expect(sh(`${git} ls-files -s run.sh link`, repo)).toMatch(/^120000 \S+ 0\tlink\n100755 \S+ 0\trun\.sh\n$/);
    fs.appendFileSync(path.join(repo, 'dir1/file1.txt'), 'changed\n');
    sh(`${git} mv dir2/file2.txt dir2/renamed.txt && ${git} rm -q dir3/file3.txt`, repo);
    expect(sh(`${git} status --porcelain | sort`, repo)).toBe(' M dir1/file1.txt\nD  dir3/file3.txt\nR  dir2/file2.txt -> dir2/renamed.txt\n');
    sh(`${git} commit -q -am second && ${git} gc -q --prune=now`, repo);
    expect(sh(`${git} status --porcelain`, repo)).toBe('');
    expect(sh(`${git} log --oneline | wc -l`, repo).trim()).toBe('2');
    expect(run(`${git} fsck --strict --no-progress`, repo).status).toBe(0);
    // the repository is a plain git repository in the backend too
    expect(sh(`${git} status --porcelain && ${git} log --format=%s`, path.join(m.src, 'repo'))).toBe('second\nfirst\n');
  });

  it('python writes through mmap: resize, write, flush, read back', () => {
    const out = py(
      `
import mmap, os, hashlib
with open('mapped.bin', 'w+b') as f:
    f.truncate(1 << 20)
    mm = mmap.mmap(f.fileno(), 1 << 20)
    mm[0:5] = b'hello'
    mm[(1 << 20) - 5:] = b'world'
    mm[40960:40963] = b'mid'
    mm.flush()
    mm.resize(2 << 20)             # ftruncate + mremap
    mm[(2 << 20) - 3:] = b'end'
    mm.flush()
    mm.close()
with open('mapped.bin', 'rb') as f:
    data = f.read()
print(len(data), data[:5], data[(1 << 20) - 5:1 << 20], data[40960:40963], data[-3:], data.count(0))
# a second, shared mapping sees writes made through a plain write() at once
with open('mapped.bin', 'r+b') as f:
    mm = mmap.mmap(f.fileno(), 0)
    os.pwrite(f.fileno(), b'PWRITE', 100)
    print(mm[100:106])
    mm.close()
`,
      m.mnt,
    );
    expect(out).toBe(`2097152 b'hello' b'world' b'mid' b'end' ${2097152 - 16}\nb'PWRITE'\n`);
    const data = fs.readFileSync(path.join(m.src, 'mapped.bin'));
    expect(data.length).toBe(2 << 20);
    expect(data.subarray(0, 5).toString()).toBe('hello');
    expect(data.subarray(-3).toString()).toBe('end');
    expect(data.subarray(100, 106).toString()).toBe('PWRITE');
  });

  it("touch -d sets atime and mtime to the nanosecond; touch -a / -m set one of them", () => {
    sh(`${UTC}touch -d '2001-02-03 04:05:06.123456789' f`, m.mnt);
    // The local backend sets times with utimensat and timespecs: exact to the nanosecond. GCS
    // keeps mtime to the nanosecond (gcsfuse_mtime is RFC 3339 with nanoseconds) and atime too
    // (ledgerfs_atime beside gsutil's whole-second key); see src/backend/gcs/README.md.
    const [ns, at1, at2] = ['123456789', '123456789', '999999000'];
    expect(sh(`${UTC}stat -c '%y|%x|%Y' f`, m.mnt).trim()).toBe(
      `2001-02-03 04:05:06.${ns} +0000|2001-02-03 04:05:06.${at1} +0000|981173106`,
    );
    expect(fs.statSync(path.join(m.src, 'f'), { bigint: true }).mtimeNs).toBe(981173106_000000000n + BigInt(ns));
    sh(`${UTC}touch -m -d '2011-11-11 11:11:11.000001' f`, m.mnt);
    expect(sh(`${UTC}stat -c '%y|%x' f`, m.mnt).trim()).toBe(`2011-11-11 11:11:11.000001000 +0000|2001-02-03 04:05:06.${at1} +0000`);
    sh(`${UTC}touch -a -d '1999-12-31 23:59:59.999999' f`, m.mnt);
    expect(sh(`${UTC}stat -c '%y|%x' f`, m.mnt).trim()).toBe(`2011-11-11 11:11:11.000001000 +0000|1999-12-31 23:59:59.${at2} +0000`);
    // plain touch: now
    sh('touch f', m.mnt);
    expect(Math.abs(Number(sh('stat -c %Y f', m.mnt)) - Date.now() / 1000)).toBeLessThan(60);
    // a directory and a symlink (touch -h: the link itself)
    sh(`${UTC}mkdir d && touch -d '2005-05-05 05:05:05.5' d && ln -s f l && touch -h -d '2006-06-06 06:06:06' l`, m.mnt);
    expect(sh(`${UTC}stat -c '%y' d l`, m.mnt)).toBe('2005-05-05 05:05:05.500000000 +0000\n2006-06-06 06:06:06.000000000 +0000\n');
  });
});
