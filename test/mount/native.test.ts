import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, py, run, sh, startMount, TEST_BINDING, type TestMount } from '../helpers/mount.js';
import { putFiles } from '../helpers/policy.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * What only the libfuse3 binding (native-ll) does: it tells the core who called (owners,
 * denials, journal), honours renameat2 flags, reads ahead 1 MiB. These tests mount with
 * `--binding native-ll` whatever LEDGERFS_TEST_BINDING says (the addon is built at install;
 * scripts/setup installs libfuse3-dev). Its node-id bookkeeping: native-ll.test.ts.
 */
const NOBODY = 65534;
const GROUP = 4321;
/** run `cmd` in `cwd` as uid/gid 65534 with no supplementary groups (dash: no BASH_ENV rc files
 * in root's home, which 65534 may not read) */
const asNobody = (cmd: string, cwd: string) =>
  run(`env -u BASH_ENV HOME=/ setpriv --reuid ${NOBODY} --regid ${NOBODY} --clear-groups -- /bin/sh -c ${JSON.stringify(cmd)}`, cwd);

// the fuse-native pass would run these again exactly as the default pass did
const repeatPass = TEST_BINDING === 'fuse-native';

for (const binding of ['native-ll']) {
  const NATIVE = ['--binding', binding];

  describe.skipIf(repeatPass)(`${binding} binding: new nodes belong to the caller (--allow-other)`, () => {
    let m: TestMount;
    beforeAll(async () => {
      m = await startMount({
        args: [...NATIVE, '--allow-other'],
        populate: (src) => {
          fs.mkdirSync(path.join(src, 'pub'));
          fs.chmodSync(path.join(src, 'pub'), 0o777);
          fs.mkdirSync(path.join(src, 'team'));
          fs.chownSync(path.join(src, 'team'), 0, GROUP);
          fs.chmodSync(path.join(src, 'team'), 0o2777);
        },
      });
      // the temp dir is private (mkdtemp 0700); another user must reach the mount point
      fs.chmodSync(m.dir, 0o755);
    });
    afterAll(async () => {
      await m?.stop();
    });

    it('a file and a directory created by uid 65534 are owned by 65534, in the mount and in the backend', () => {
      const r = asNobody('touch pub/f && mkdir pub/d && echo data > pub/g', m.mnt);
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      for (const name of ['f', 'd', 'g']) {
        expect(sh(`stat -c %u:%g pub/${name}`, m.mnt)).toBe(`${NOBODY}:${NOBODY}\n`);
        const st = fs.statSync(path.join(m.src, 'pub', name));
        expect([st.uid, st.gid]).toEqual([NOBODY, NOBODY]);
      }
      // root's own files stay root's
      sh('touch pub/byroot', m.mnt);
      expect(sh('stat -c %u:%g pub/byroot', m.mnt)).toBe('0:0\n');
    });

    it('in a setgid directory, new files and directories get its group (and directories keep the bit)', () => {
      const r = asNobody('touch team/f && mkdir team/d', m.mnt);
      expect(r.stderr).toBe('');
      expect(sh('stat -c %u:%g team/f', m.mnt)).toBe(`${NOBODY}:${GROUP}\n`);
      expect(sh('stat -c %u:%g:%a team/d', m.mnt)).toBe(`${NOBODY}:${GROUP}:2755\n`);
      expect(fs.statSync(path.join(m.src, 'team/d')).gid).toBe(GROUP);
    });

    it('the journal names the process that made a change', async () => {
      const r = run('echo $$; exec touch pub/journaled', m.mnt);
      expect(r.status).toBe(0);
      const pid = Number(r.stdout.trim());
      // the journal's state dir is under the XDG_STATE_HOME startMount gave the daemon
      const env = { XDG_STATE_HOME: path.join(m.dir, 'state-home'), ...m.env };
      let log = '';
      for (let i = 0; i < 20 && !log.includes('create /pub/journaled'); i++) {
        await new Promise((res) => setTimeout(res, 100));
        log = run(`node ${CLI} log ${m.workspaceArgs.join(' ')} --path /pub/journaled`, m.dir, { env }).stdout;
      }
      // pid and command line, read from /proc at the time of the call
      expect(log).toMatch(new RegExp(`mount\\[${pid} touch pub/journaled\\]\\s+create /pub/journaled`));
    });

    it('permissions are the kernel\'s (default_permissions): 65534 cannot write into a 0755 root-owned directory', () => {
      const r = asNobody('touch denied', m.mnt);
      expect(r.status).not.toBe(0);
      expect(r.stderr).toMatch(/Permission denied/);
      expect(fs.existsSync(path.join(m.src, 'denied'))).toBe(false);
    });
  });

  describe.skipIf(repeatPass)(`${binding} binding: /.ledgerfs/denials names the refused process`, () => {
    let dir: string;
    let m: TestMount;
    beforeAll(async () => {
      dir = makeTemp('caller-policy');
      const ws = path.join(dir, 'workspace');
      putFiles(ws, { 'ro/keep.txt': 'keep\n', 'rw/notes.md': 'notes\n' });
      fs.writeFileSync(path.join(dir, 'p.yaml'), 'backend: { type: local, path: ./workspace }\nroots:\n  - path: /ro\n    mode: ro\n  - path: /rw\n    mode: rw\n');
      m = await startMount({ src: ws, omitSource: true, args: [...NATIVE, '--policy', path.join(dir, 'p.yaml')] });
    });
    afterAll(async () => {
      await m?.stop();
      rmTemp(dir);
    });

    it('a refused mkdir shows the pid of the mkdir process', async () => {
      // `exec` keeps the shell's pid, which it printed first: that process sends the MKDIR
      const r = run('echo $$; exec mkdir ro/new', m.mnt);
      expect(r.status).not.toBe(0);
      expect(r.stderr).toMatch(/Read-only file system/);
      const pid = Number(r.stdout.trim());
      expect(pid).toBeGreaterThan(1);
      // the kernel caches the file's attributes (size) for the attribute timeout
      await new Promise((res) => setTimeout(res, 1100));
      const last = sh('cat .ledgerfs/denials', m.mnt).trimEnd().split('\n').at(-1) ?? '';
      expect(last).toMatch(new RegExp(`^\\S+Z pid=${pid} mkdir /ro/new EROFS: `));
    });
  });

  describe.skipIf(repeatPass)(`${binding} binding: renameat2 flags`, () => {
    it('RENAME_NOREPLACE refuses an existing target with EEXIST and moves onto a free name; RENAME_EXCHANGE is EINVAL', async () => {
      const m = await startMount({ args: NATIVE, populate: (src) => { fs.writeFileSync(path.join(src, 'a'), 'A'); fs.writeFileSync(path.join(src, 'b'), 'B'); } });
      try {
        const out = py(`
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
def r2(a, b, flags):
    rc = libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), flags)
    return 'ok' if rc == 0 else os.strerror(ctypes.get_errno())
print(r2('a', 'b', 1))   # RENAME_NOREPLACE onto an existing name
print(r2('a', 'c', 1))   # onto a free name
print(r2('c', 'b', 2))   # RENAME_EXCHANGE
`, m.mnt);
        expect(out).toBe('File exists\nok\nInvalid argument\n');
        expect(fs.readdirSync(m.src).sort()).toEqual(['b', 'c']);
        expect(fs.readFileSync(path.join(m.src, 'b'), 'utf8')).toBe('B');
        expect(fs.readFileSync(path.join(m.src, 'c'), 'utf8')).toBe('A');
      } finally {
        await m.stop();
      }
    });
  });

  describe.skipIf(repeatPass)(`${binding} binding: large requests`, () => {
    it('readahead is raised to max_read (1 MiB) once the mount answers, and data reads back intact', async () => {
      const m = await startMount({ args: NATIVE });
      try {
        sh('head -c 8M /dev/urandom > big && cmp big big', m.mnt);
        const dev = fs.statSync(m.mnt).dev;
        const bdi = `/sys/class/bdi/${(dev >> 8) & 0xfff}:${(dev & 0xff) | ((dev >> 12) & 0xfff00)}/read_ahead_kb`;
        let ra = '';
        for (let i = 0; i < 20 && ra !== '1024'; i++) {
          ra = fs.readFileSync(bdi, 'utf8').trim();
          if (ra !== '1024') await new Promise((res) => setTimeout(res, 50));
        }
        expect(ra).toBe('1024');
        sh('echo 1 > /proc/sys/vm/drop_caches', m.mnt); // the FUSE page cache: reads go to the daemon
        expect(sh('cmp big ../src/big && echo same', m.mnt)).toBe('same\n');
      } finally {
        await m.stop();
      }
    });
  });
}
