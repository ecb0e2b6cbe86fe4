import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { onGcs, py, sh, startMount, type TestMount } from '../helpers/mount.js';

/**
 * POSIX as a local disk (issue 15): creation modes, readdir inodes, special files, privileged
 * mode bits. Real programs (bash, coreutils, python3) through a real mount.
 */
describe('mount: POSIX modes, inodes and special files', () => {
  let m: TestMount;
  beforeEach(async () => {
    m = await startMount();
  });
  afterEach(async () => {
    const errors = m.errors();
    await m.stop();
    expect(errors, 'the daemon logged errors').toEqual([]);
  });

  const modeOf = (p: string) => (fs.lstatSync(p).mode & 0o7777).toString(8);

  it.skipIf(onGcs)("the caller's umask and mode are kept exactly: no daemon umask on top", () => {
    // the daemon runs with this test's umask (022): with the caller's at 0 nothing may be cut
    const out = sh(`umask 0; touch f; mkdir d; mkdir -m 1777 t; python3 -c "import os; os.close(os.open('x', os.O_CREAT|os.O_WRONLY, 0o757))"; stat -c '%n %a' f d t x`, m.mnt);
    expect(out).toBe('f 666\nd 777\nt 1777\nx 757\n');
    for (const [n, mode] of [['f', '666'], ['d', '777'], ['t', '1777'], ['x', '757']]) expect(modeOf(path.join(m.src, n as string))).toBe(mode);
    // the caller's own umask still applies (the kernel applies it), and an existing file keeps its mode
    expect(sh(`umask 077; touch g; mkdir e; umask 0; touch f; stat -c '%n %a' g e f`, m.mnt)).toBe('g 600\ne 700\nf 666\n');
    // a directory made in a setgid directory stays setgid
    expect(sh(`chmod 2775 d; umask 0; mkdir d/sub; stat -c '%a' d/sub`, m.mnt)).toBe('2777\n');
  });

  it('readdir gives every entry its d_ino: 2,000 files, 2,000 distinct inodes, each what stat shows', () => {
    const out = py(
      `
import os, json, subprocess
os.mkdir('big')
for i in range(2000):
    open('big/f%04d' % i, 'w').close()
def check(d):
    ents = list(os.scandir(d))
    inos = [e.inode() for e in ents]
    wrong = sum(1 for e in ents if e.inode() != os.lstat(e.path).st_ino)
    return dict(n=len(ents), distinct=len(set(inos)), wrong=wrong)
first = check('big')
# a second listing, now that the kernel knows every entry (plain readdir, no readdirplus)
again = check('big')
# '.' and '..' too (ls -ai reads d_ino), on the root and below it
lines = [l.split() for l in subprocess.run(['ls', '-a1i', 'big'], capture_output=True, text=True).stdout.splitlines()]
dots = [int(l[0]) for l in lines if l[1] in ('.', '..')]
print(json.dumps(dict(first=first, again=again, dots=dots, st=[os.lstat('big').st_ino, os.lstat('.').st_ino])))
`,
      m.mnt,
    );
    const r = JSON.parse(out) as { first: unknown; again: unknown; dots: number[]; st: number[] };
    expect(r.first).toEqual({ n: 2000, distinct: 2000, wrong: 0 });
    expect(r.again).toEqual({ n: 2000, distinct: 2000, wrong: 0 });
    expect(r.dots).toEqual(r.st);
  });
});
