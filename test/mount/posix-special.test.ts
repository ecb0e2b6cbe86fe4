import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLI, onGcs, py, run, sh, startMount, TEST_BINDING, type TestMount } from '../helpers/mount.js';
import { startJournaledMount, type JournaledMount } from '../helpers/journaled-mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

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

  it.runIf(onGcs)('GCS keeps FIFOs and sockets as typed empty objects: mkfifo passes bytes, both list with their type', () => {
    sh(`mkfifo -m 620 p; python3 -c "import os, stat; os.mknod('s', stat.S_IFSOCK | 0o600)"`, m.mnt);
    expect(sh('(printf "through the pipe" > p &) ; cat p', m.mnt)).toBe('through the pipe');
    expect(sh("stat -c '%n %F %a' p s", m.mnt)).toBe('p fifo 620\ns socket 600\n');
    expect(sh('ls -A', m.mnt)).toBe('p\ns\n');
    sh('rm p s', m.mnt);
  });

  // native-ll only: fuse-native is libfuse 2's high-level API, whose own table gives each name a
  // kernel inode (README: hard links there show each name's cached attributes until the timeout)
  it.skipIf(onGcs || TEST_BINDING === 'fuse-native')('hard links are one node: nlink, mode and inode show through every name at once', () => {
    // the attribute timeout (1 s) would otherwise keep showing the other name's old values
    const out = sh(
      `printf data > a && stat -c %h a >/dev/null && ln a b && stat -c '%h' a && chmod 600 b && stat -c '%a' a && ` +
      `[ "$(stat -c %i a)" = "$(stat -c %i b)" ] && echo same && ln b c && stat -c %h a && rm a && stat -c '%h %a' b && ` +
      `mv c d && cat d && echo && stat -c %h d && rm b && stat -c %h d && ls`,
      m.mnt,
    );
    expect(out).toBe('2\n600\nsame\n3\n2 600\ndata\n2\n1\nd\n');
    // python sees the same through fstat of one name after a chmod of the other
    expect(py(`import os\nos.link('d', 'e')\nf = os.open('d', os.O_RDONLY)\nos.chmod('e', 0o640)\nst = os.fstat(f)\nprint(oct(st.st_mode & 0o777), st.st_nlink)\n`, m.mnt)).toBe('0o640 2\n');
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

describe.skipIf(onGcs)('mount: special files (mknod), journaled and rolled back', () => {
  let j: JournaledMount;
  beforeEach(async () => {
    j = await startJournaledMount('special');
  });
  afterEach(async () => {
    expect(await j.finish(), 'the daemon logged errors').toEqual([]);
  });

  const rollback = (to: number) => sh(`node ${CLI} rollback --state ${j.state} --source ${j.m.src} --to ${to}`, j.m.dir);

  it('mkfifo passes bytes between two processes; sockets too; device nodes refused; rollback undoes and recreates them', async () => {
    const { mnt, src } = j.m;
    sh('mkfifo -m 620 p', mnt);
    // a writer and a reader, two processes meeting at the FIFO on the mount
    expect(sh('(printf "through the pipe" > p &) ; cat p', mnt)).toBe('through the pipe');
    py(`import os, stat\nos.mknod('s', stat.S_IFSOCK | 0o600)\nos.mknod('plain', 0o640)\n`, mnt);
    expect(sh("stat -c '%n %F %a' p s plain", mnt)).toBe('p fifo 620\ns socket 600\nplain regular empty file 640\n');
    expect(fs.lstatSync(path.join(src, 'p')).isFIFO()).toBe(true);
    expect(fs.lstatSync(path.join(src, 's')).isSocket()).toBe(true);
    // a device node: refused (no mount file grants it), with a denial line
    const dev = run('mknod c c 1 3', mnt);
    expect(dev.status).not.toBe(0);
    expect(dev.stderr).toMatch(/Operation not permitted/);
    expect(fs.existsSync(path.join(src, 'c'))).toBe(false);
    // the daemon's log reaches this process while it waits
    await new Promise((r) => setTimeout(r, 300));
    expect(j.m.logs()).toMatch(/"op":"mknod","path":"\/c","errno":"EPERM".*denied by policy/);
    // journaled as mknods: #1 p, #2 s, #3 plain (a create); then the FIFO goes away
    sh('rm p', mnt);
    const log = sh(`node ${CLI} log --state ${j.state} --source ${src}`, j.m.dir);
    expect(log).toMatch(/mknod \/p \(fifo\)/);
    expect(log).toMatch(/mknod \/s \(socket\)/);
    expect(log).toMatch(/unlink \/p \(fifo\)/);
    rollback(3);
    expect(fs.lstatSync(path.join(src, 'p')).isFIFO()).toBe(true);
    expect(sh("stat -c '%F %a' p", mnt)).toBe('fifo 620\n');
    rollback(0);
    expect(fs.readdirSync(src)).toEqual([]);
  });
});

describe.skipIf(onGcs)('mount --policy: privileged changes (setid bits, chown to others, device nodes)', () => {
  const mountWith = async (privileges: string) => {
    const dir = makeTemp('privileges');
    const src = path.join(dir, 'src');
    fs.mkdirSync(src);
    fs.writeFileSync(path.join(src, 'mine'), 'x');
    fs.writeFileSync(path.join(src, 'sbit'), 'x');
    fs.chmodSync(path.join(src, 'sbit'), 0o4755);
    const file = path.join(dir, 'policy.yaml');
    fs.writeFileSync(file, `backend: { type: local, path: ./src }\nroots:\n  - path: /\n    mode: rw\n${privileges}`);
    const m = await startMount({ args: ['--policy', file], omitSource: true, src });
    return { m, src, done: async () => { const e = m.errors(); await m.stop(); rmTemp(dir); expect(e).toEqual([]); } };
  };
  /** the denial lines so far (the kernel caches the file's size for the attribute timeout: wait it out) */
  const denials = async (mnt: string) => {
    await new Promise((r) => setTimeout(r, 1100));
    return sh('cat .ledgerfs/denials', mnt);
  };

  it('refused by default, each with a denial line; taking bits away is never refused', async () => {
    const { m, src, done } = await mountWith('');
    try {
      const tries = [
        'chmod 4755 mine', 'chmod g+s mine', 'chown 1234 mine', 'chgrp 5678 mine', 'mknod c c 1 3',
        `python3 -c "import os; os.close(os.open('suid', os.O_CREAT|os.O_WRONLY, 0o4755))"`,
      ];
      for (const t of tries) {
        const r = run(t, m.mnt);
        expect(r.status, t).not.toBe(0);
        expect(r.stderr, t).toMatch(/Operation not permitted|PermissionError/);
      }
      const st = fs.statSync(path.join(src, 'mine'));
      expect([st.mode & 0o7777, st.uid, st.gid]).toEqual([0o644, 0, 0]);
      expect(fs.existsSync(path.join(src, 'c'))).toBe(false);
      expect(fs.existsSync(path.join(src, 'suid'))).toBe(false);
      const text = await denials(m.mnt);
      for (const what of ['chmod /mine', 'chown /mine', 'mknod /c', 'create /suid']) expect(text).toContain(what);
      expect(text).toMatch(/setuid\/setgid bits are not allowed/);
      expect(text).toMatch(/another user or group/);
      expect(text).toMatch(/device nodes is not allowed/);
      // what stays allowed: setgid on a directory, chown to oneself, ordinary modes, removing setid bits
      sh('mkdir shared && chmod g+s shared && chown 0:0 mine && chmod 600 mine && chmod u-s sbit', m.mnt);
      expect(sh("stat -c '%a' shared mine sbit", m.mnt)).toBe('2755\n600\n755\n');
    } finally {
      await done();
    }
  });

  it('granted by the mount file: privileges {setid, chown, devices}', async () => {
    const { m, src, done } = await mountWith('privileges: { setid: true, chown: true, devices: true }\n');
    try {
      sh(`chown 1234:5678 mine && chmod 4755 mine && mknod c c 1 3 && umask 0 && python3 -c "import os; os.close(os.open('suid', os.O_CREAT|os.O_WRONLY, 0o4777))"`, m.mnt);
      expect(sh("stat -c '%n %a %u %g' mine suid", m.mnt)).toBe('mine 4755 1234 5678\nsuid 4777 0 0\n');
      expect(sh("stat -c '%F %t %T' c", m.mnt)).toBe('character special file 1 3\n');
      const st = fs.lstatSync(path.join(src, 'c'));
      expect(st.isCharacterDevice()).toBe(true);
      // the kernel clears setuid on a chown, and the store does it too
      sh('chown 4321 mine', m.mnt);
      expect(sh("stat -c '%a %u' mine", m.mnt)).toBe('755 4321\n');
    } finally {
      await done();
    }
  });
});

describe.skipIf(onGcs)('mount: setuid/setgid cleared as the kernel expects (--allow-other)', () => {
  const NOBODY = 65534;
  const asNobody = (cmd: string, cwd: string) =>
    run(`env -u BASH_ENV HOME=/ setpriv --reuid ${NOBODY} --regid ${NOBODY} --clear-groups -- /bin/sh -c ${JSON.stringify(cmd)}`, cwd);
  let m: TestMount;
  beforeEach(async () => {
    m = await startMount({
      args: ['--allow-other'],
      populate: (src) => {
        for (const [n, mode] of [['suid', 0o4777], ['sgid', 0o2777], ['both', 0o6777]] as const) {
          fs.writeFileSync(path.join(src, n), '#!/bin/sh\n');
          fs.chmodSync(path.join(src, n), mode);
        }
      },
    });
    // the temp dir is private (mkdtemp 0700); another user must reach the mount point
    fs.chmodSync(m.dir, 0o755);
  });
  afterEach(async () => {
    const errors = m.errors();
    await m.stop();
    expect(errors, 'the daemon logged errors').toEqual([]);
  });

  it('a write by another user clears S_ISUID and S_ISGID, in the mount and in the backend; chown clears them too', () => {
    const r = asNobody('echo more >> suid && echo more >> sgid', m.mnt);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(sh("stat -c '%n %a' suid sgid", m.mnt)).toBe('suid 777\nsgid 777\n');
    for (const n of ['suid', 'sgid']) expect((fs.statSync(path.join(m.src, n)).mode & 0o7777).toString(8)).toBe('777');
    // chown (here by root, on a workspace without a mount file) clears both as well
    sh('chown 1234 both', m.mnt);
    expect(sh("stat -c '%a %u' both", m.mnt)).toBe('777 1234\n');
  });

  it('a truncate or an O_TRUNC open by another user clears them; root keeps them; setgid without group execute stays', () => {
    // (before FUSE_HANDLE_KILLPRIV_V2, an O_TRUNC open kept them: the kernel's atomic_o_trunc
    // path returned before sending the new mode)
    expect(asNobody('truncate -s 0 suid && : > both', m.mnt).status).toBe(0);
    expect(sh("stat -c '%n %a' suid both", m.mnt)).toBe('suid 777\nboth 777\n');
    sh('chmod 6777 both && echo root >> both && truncate -s 2 both', m.mnt);
    expect(sh("stat -c '%a' both", m.mnt)).toBe('6777\n');
    // 2766: setgid without group execute marks mandatory locking, not a privilege
    sh('chmod 2766 sgid', m.mnt);
    expect(asNobody('echo more >> sgid', m.mnt).status).toBe(0);
    expect(sh("stat -c '%a' sgid", m.mnt)).toBe('2766\n');
    expect((fs.statSync(path.join(m.src, 'both')).mode & 0o7777).toString(8)).toBe('6777');
  });

  // (fuse-native has neither op: fallocate fails there, and the kernel copies by writes)
  it.skipIf(TEST_BINDING === 'fuse-native')('a fallocate or a copy_file_range into the file by another user clears them too', () => {
    // (no flag comes with these: the kernel's own clearing is off under killpriv v2)
    expect(asNobody('fallocate -l 8192 suid', m.mnt).status).toBe(0);
    const script = path.join(m.dir, 'copy.py');
    fs.writeFileSync(script, "import os\ns = os.open('sgid', os.O_RDONLY)\nd = os.open('both', os.O_WRONLY)\nos.copy_file_range(s, d, 4)\n");
    fs.chmodSync(script, 0o644);
    const r = asNobody(`python3 ${script}`, m.mnt);
    expect(r.stderr).toBe('');
    expect(sh("stat -c '%n %a' suid both", m.mnt)).toBe('suid 777\nboth 777\n');
  });
});

