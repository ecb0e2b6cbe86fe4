import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CLI, RUNNING_BINDING, startMount, type TestMount } from '../helpers/mount.js';
import { putFiles } from '../helpers/policy.js';
import { isRoot, makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * The README's recipe for containers and hand-made sandboxes: `ledgerfs mount --allow-other`
 * first, then a sandbox run by another (non-root) user binds the mount. Here the sandbox is the
 * bwrap command line printed in the README, run as `nobody` (so bwrap uses an unprivileged user
 * namespace, as in a container), with the same policy file `ledgerfs run --policy` takes.
 */

const NOBODY = 65534;

const POLICY = `backend: { type: local, path: ./workspace }
roots:
  - path: /projects/Wilson-MVA
    mode: rw
    suffixes: [.md, .txt]
  - path: /Tools
    mode: ro
hide: ["**/.env"]
`;

/** The README's hand-written bwrap command line, for mount point `ws`. */
function readmeBwrap(ws: string, command: string): string[] {
  return [
    'bwrap', '--die-with-parent', '--new-session', '--unshare-all',
    '--unshare-user', '--disable-userns', '--uid', '1000', '--gid', '1000', '--cap-drop', 'ALL',
    '--ro-bind', '/usr', '/usr', '--symlink', 'usr/bin', '/bin', '--symlink', 'usr/lib', '/lib', '--symlink', 'usr/lib64', '/lib64',
    '--ro-bind', '/etc', '/etc', '--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp',
    '--bind', ws, '/workspace', '--chdir', '/workspace', '--remount-ro', '/',
    '--', 'sh', '-c', command,
  ];
}

function asNobody(argv: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync('setpriv', [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', ...argv], { encoding: 'utf8', timeout: 60_000, killSignal: 'SIGKILL' });
  if (r.error) throw r.error;
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe.skipIf(!isRoot())('a mount made beforehand with --allow-other, used from a hand-written bwrap sandbox as another user', () => {
  let dir: string | undefined;
  const mounts: TestMount[] = [];
  afterEach(async () => {
    for (const m of mounts.splice(0)) await m.stop();
    rmTemp(dir);
  });

  async function mount(extra: string[]): Promise<TestMount> {
    const ws = path.join(dir as string, 'workspace');
    const m = await startMount({ src: ws, omitSource: true, args: ['--policy', path.join(dir as string, 'case.yaml'), ...extra] });
    mounts.push(m);
    // the other user must be able to reach the mount point (temp dirs are private by default)
    fs.chmodSync(m.dir, 0o755);
    return m;
  }

  it('works with allow_other, under the same policy; without it the other user is refused', async () => {
    dir = makeTemp('container');
    fs.chmodSync(dir, 0o755);
    const ws = path.join(dir, 'workspace');
    putFiles(ws, { 'projects/Wilson-MVA/notes.md': 'notes\n', 'projects/Wilson-MVA/.env': 'KEY=1\n', 'Tools/build.py': 'print(1)\n' });
    // the kernel checks permission bits first (default_permissions): let the user write both
    // roots as far as the bits go, so what stops it in /Tools is the policy (EROFS)
    for (const d of ['projects/Wilson-MVA', 'Tools']) fs.chownSync(path.join(ws, d), NOBODY, NOBODY);
    fs.writeFileSync(path.join(dir, 'case.yaml'), POLICY);

    const shared = await mount(['--allow-other']);
    const r = asNobody(readmeBwrap(shared.mnt, [
      'id -u',
      'echo "from the container" > projects/Wilson-MVA/report.md && echo wrote',
      'echo x > Tools/x; echo "tools=$?"',
      'cat projects/Wilson-MVA/.env; echo "env=$?"',
      'ls projects/Wilson-MVA',
    ].join('\n')));
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toBe(`1000\nwrote\ntools=2\nenv=1\nnotes.md\nreport.md\n`);
    expect(r.stderr).toMatch(/Tools\/x: Read-only file system/);
    expect(fs.readFileSync(path.join(ws, 'projects/Wilson-MVA/report.md'), 'utf8')).toBe('from the container\n');
    expect(fs.existsSync(path.join(ws, 'Tools/x'))).toBe(false);
    await shared.stop();
    mounts.splice(0);

    const own = await mount([]);
    const refused = asNobody(readmeBwrap(own.mnt, 'ls'));
    expect(refused.status).not.toBe(0);
    expect(refused.stderr).toMatch(/Permission denied/);
  });

  it('--uid/--gid/--file-mode/--dir-mode: the README recipe works as nobody with no chown or chmod of the source, and stays display only', async () => {
    dir = makeTemp('container-ids');
    fs.chmodSync(dir, 0o755);
    const ws = path.join(dir, 'workspace');
    // owned by root, 0644/0755: nobody could not write a byte here without the display options
    putFiles(ws, { 'projects/Wilson-MVA/notes.md': 'notes\n', 'Tools/build.py': 'print(1)\n' });
    fs.writeFileSync(path.join(dir, 'case.yaml'), POLICY);
    const m = await mount(['--allow-other', '--uid', String(NOBODY), '--gid', String(NOBODY)]);
    const r = asNobody(readmeBwrap(m.mnt, [
      'echo "from the container" > projects/Wilson-MVA/report.md && echo wrote',
      'echo more >> projects/Wilson-MVA/notes.md && echo appended',
      'mkdir projects/Wilson-MVA/out && echo made',
      'stat -c "%u:%g %a" projects/Wilson-MVA/notes.md projects/Wilson-MVA',
      // the kernel lets an owner "chown" to itself; that must not give the root-owned file away
      'chown 1000:1000 projects/Wilson-MVA/notes.md && echo chowned-self',
      'chown 0 projects/Wilson-MVA/notes.md 2>/dev/null || echo chown-root-refused',
      // shown as the caller's, really root's: no chmod (as without --uid); its own new file: yes
      'chmod 666 projects/Wilson-MVA/notes.md 2>/dev/null || echo chmod-of-roots-refused',
      'chmod 600 projects/Wilson-MVA/report.md 2>/dev/null && echo chmod-own || echo chmod-own-refused',
      'echo x > Tools/x 2>/dev/null; echo "tools=$?"',
    ].join('\n')));
    expect(r.status, r.stderr).toBe(0);
    // fuse-native does not know the caller: what the sandbox made belongs to the daemon's user,
    // so not even its own new file may be chmodded (refused rather than judged blind)
    const knowsCaller = RUNNING_BINDING === 'native-ll';
    expect(r.stdout).toBe(`wrote\nappended\nmade\n1000:1000 644\n1000:1000 755\nchowned-self\nchown-root-refused\nchmod-of-roots-refused\n${knowsCaller ? 'chmod-own' : 'chmod-own-refused'}\ntools=2\n`);
    expect(fs.readFileSync(path.join(ws, 'projects/Wilson-MVA/notes.md'), 'utf8')).toBe('notes\nmore\n');
    // display only: the source keeps root as the owner of what was there
    const st = fs.statSync(path.join(ws, 'projects/Wilson-MVA/notes.md'));
    expect([st.uid, st.gid, st.mode & 0o7777]).toEqual([0, 0, 0o644]);
    expect(fs.statSync(path.join(ws, 'projects/Wilson-MVA')).uid).toBe(0);
    // what the sandbox made is its own on the source (the daemon runs as root), and its chmod held
    const made = fs.statSync(path.join(ws, 'projects/Wilson-MVA/report.md'));
    expect([made.uid, made.mode & 0o777]).toEqual(knowsCaller ? [NOBODY, 0o600] : [0, 0o644]);
    await m.stop();
    mounts.splice(0);

    const modes = await mount(['--allow-other', '--uid', String(NOBODY), '--gid', String(NOBODY), '--file-mode', '600', '--dir-mode', '0700']);
    const shown = (p: string) => {
      const s2 = fs.statSync(path.join(modes.mnt, p));
      return `${s2.uid}:${s2.gid} ${(s2.mode & 0o7777).toString(8)}`;
    };
    expect([shown('projects/Wilson-MVA/notes.md'), shown('projects/Wilson-MVA'), shown('Tools/build.py')]).toEqual(['65534:65534 600', '65534:65534 700', '65534:65534 600']);
    // root chmods the source for real; what shows stays the display mode (fuse-native cannot
    // tell root from the sandbox user: refused there)
    if (knowsCaller) {
      fs.chmodSync(path.join(modes.mnt, 'projects/Wilson-MVA/notes.md'), 0o640);
      expect(shown('projects/Wilson-MVA/notes.md')).toBe('65534:65534 600');
      expect(fs.statSync(path.join(ws, 'projects/Wilson-MVA/notes.md')).mode & 0o7777).toBe(0o640);
    } else {
      expect(() => fs.chmodSync(path.join(modes.mnt, 'projects/Wilson-MVA/notes.md'), 0o640)).toThrow(/EPERM/);
    }
    const r2 = asNobody(readmeBwrap(modes.mnt, 'cat projects/Wilson-MVA/notes.md && ls -ld . | cut -c1-10'));
    expect(r2.status, r2.stderr).toBe(0);
    expect(r2.stdout).toContain('notes\nmore\n');
  });

  it('--file-mode refuses setuid bits and bad ids with a sentence', () => {
    for (const [flag, v] of [['--file-mode', '4755'], ['--dir-mode', '8'], ['--uid', 'nobody'], ['--gid', '-1'], ['--uid', '4294967295']]) {
      const r = spawnSync(process.execPath, [CLI, 'mount', '--source', '/nonexistent-src', flag as string, v as string, '/nonexistent-mnt'], { encoding: 'utf8' });
      expect(r.status, `${flag} ${v}`).toBe(2);
      expect(r.stderr).toMatch(new RegExp(`^ledgerfs: ${flag}: expected`));
    }
  });
});
