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
});
