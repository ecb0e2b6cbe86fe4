import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startMount, type TestMount } from '../helpers/mount.js';
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
    expect(r.stdout).toBe(`${NOBODY}\nwrote\ntools=2\nenv=1\nnotes.md\nreport.md\n`);
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
});
