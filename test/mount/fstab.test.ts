import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { mountArgsFromOptions, parseHelperArgv } from '../../src/cli/mount-helper.js';
import { REPO, onGcs } from '../helpers/mount.js';
import { mountDirPrefix } from '../helpers/run.js';
import { isRoot } from '../helpers/tmp.js';

/*
 * Issue 16: mount(8) and fstab. The real mount(8) runs the real helper. So that this test
 * neither needs nor touches the machine's /sbin (another checkout may own its
 * mount.fuse.ledgerfs), it runs in a private mount namespace where /usr/sbin is overlaid with a
 * directory holding the symlink that scripts/install-mount-helper (what scripts/setup runs)
 * makes: mount(8) finds this checkout's helper, and nothing leaks out of the namespace.
 */

describe('mount.fuse.ledgerfs: -o options to ledgerfs flags', () => {
  it('translates, ignores what mount(8) adds, refuses ro and unknown options with a sentence', () => {
    expect(mountArgsFromOptions('/srv/src', '/srv/ws', 'rw,allow_other,uid=65534,gid=65534,file_mode=644,dir_mode=755,_netdev,nofail,x-systemd.automount,state=/var/lib/l/ws,log_file=/var/log/l.log'))
      .toEqual(['--source', '/srv/src', '--allow-other', '--uid', '65534', '--gid', '65534', '--file-mode', '644', '--dir-mode', '755', '--state', '/var/lib/l/ws', '--log-file', '/var/log/l.log', '/srv/ws']);
    // with a policy file the file names the backend: the first fstab field is a label
    expect(mountArgsFromOptions('ledgerfs', 'ws', 'policy=/etc/l/case.yaml,allow_other')).toEqual(['--policy', '/etc/l/case.yaml', '--allow-other', path.resolve('ws')]);
    expect(() => mountArgsFromOptions('/s', '/m', 'rw,ro')).toThrow(/-o ro: ledgerfs has no read-only mount option/);
    expect(() => mountArgsFromOptions('/s', '/m', 'bogus=1')).toThrow(/-o bogus=1: unknown option; ledgerfs takes allow_other/);
    expect(() => mountArgsFromOptions('/s', '/m', 'allow_other=1')).toThrow(/takes no value/);
    expect(() => mountArgsFromOptions('/s', '/m', 'policy=')).toThrow(/expected policy=VALUE/);
    expect(parseHelperArgv(['/s', '/m', '-n', '-o', 'rw,allow_other', '-t', 'fuse.ledgerfs'])).toEqual({ source: '/s', dir: '/m', options: 'rw,allow_other' });
    expect(() => parseHelperArgv(['/s'])).toThrow(/usage: mount.fuse.ledgerfs SOURCE DIR/);
  });
});

const canUnshare = isRoot() && spawnSync('unshare', ['-m', 'true']).status === 0;

describe.skipIf(onGcs || !canUnshare)('mount -a -T FSTAB with fuse.ledgerfs lines, umount (real mount(8), in a private mount namespace; skipped unless root with unshare -m)', () => {
  let dir: string | undefined;
  afterEach(() => {
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it('mounts each line through the helper, --daemon style (answers at once), umount ends each daemon; bad options fail with a sentence', () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), mountDirPrefix()));
    const d = dir;
    const sbin = path.join(d, 'sbin');
    fs.mkdirSync(sbin);
    const inst = spawnSync(path.join(REPO, 'scripts/install-mount-helper'), ['--dir', sbin], { encoding: 'utf8' });
    expect(inst.status, inst.stderr).toBe(0);
    expect(fs.readlinkSync(path.join(sbin, 'mount.fuse.ledgerfs'))).toBe(path.join(REPO, 'bin/mount.fuse.ledgerfs'));

    for (const sub of ['src', 'ws/projects', 'a', 'b', 'c', 'state-a', 'state-b']) fs.mkdirSync(path.join(d, sub), { recursive: true });
    fs.writeFileSync(path.join(d, 'src/hello.txt'), 'hello\n');
    fs.writeFileSync(path.join(d, 'ws/projects/notes.md'), 'notes\n');
    fs.writeFileSync(path.join(d, 'ws/.env'), 'KEY=1\n');
    fs.writeFileSync(path.join(d, 'case.yaml'), `backend: { type: local, path: ${d}/ws }\nroots:\n  - path: /projects\n    mode: rw\nhide: ["**/.env"]\n`);
    const fstab = path.join(d, 'fstab');
    fs.writeFileSync(fstab, [
      '# scratch fstab of this test',
      `${d}/src  ${d}/a  fuse.ledgerfs  rw,allow_other,uid=65534,gid=65534,file_mode=600,state=${d}/state-a,_netdev,nofail  0 0`,
      `ledgerfs  ${d}/b  fuse.ledgerfs  policy=${d}/case.yaml,state=${d}/state-b,log_file=${d}/b.log  0 0`,
      `${d}/src  ${d}/c  fuse.ledgerfs  noauto,state=${d}/state-a  0 0`,
      '',
    ].join('\n'));
    const script = `
set -u
trap 'for m in a b c; do umount -l ${d}/$m 2>/dev/null; done' EXIT
mount -t overlay overlay -o lowerdir=${sbin}:/usr/sbin /usr/sbin || { echo "overlay failed"; exit 90; }
mount -a -T ${fstab}; echo "mount-a=$?"
# at once, as after any mount: no waiting
stat -c '%u:%g %a' ${d}/a/hello.txt
cat ${d}/a/hello.txt
ls ${d}/b
cat ${d}/b/projects/notes.md
grep -E ' ${d}/(a|b|c) ' /proc/mounts | cut -d' ' -f1-3
pids=$(${process.execPath} ${REPO}/bin/ledgerfs.js status --json | ${process.execPath} -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).filter(r=>r.mountpoint.startsWith(process.argv[1])).map(r=>r.pid).join(" ")))' ${d}/)
echo "daemons=$(echo $pids | wc -w)"
mount -t fuse.ledgerfs ${d}/src ${d}/c -o bogus=1; echo "bogus=$?"
mount -t fuse.ledgerfs ${d}/src ${d}/c -o ro; echo "ro=$?"
umount ${d}/a; echo "umount-a=$?"
umount ${d}/b; echo "umount-b=$?"
for i in $(seq 100); do alive=0; for p in $pids; do kill -0 $p 2>/dev/null && alive=1; done; [ $alive = 0 ] && break; sleep 0.1; done
echo "daemons-left=$alive"
grep -c ' ${d}/' /proc/mounts
`;
    const r = spawnSync('unshare', ['-m', '--propagation', 'private', 'bash', '-c', script], {
      encoding: 'utf8', timeout: 180_000, killSignal: 'SIGKILL', env: { ...process.env, XDG_STATE_HOME: path.join(d, 'state-home') },
    });
    expect(r.stdout, r.stderr).not.toContain('overlay failed');
    const src = fs.realpathSync(path.join(d, 'src'));
    expect(r.stdout, r.stderr).toBe([
      'mount-a=0',
      '65534:65534 600',
      'hello',
      'projects',
      'notes',
      `ledgerfs:${src} ${d}/a fuse.ledgerfs`,
      `ledgerfs:${fs.realpathSync(path.join(d, 'ws'))} ${d}/b fuse.ledgerfs`,
      'daemons=2',
      'bogus=2',
      'ro=2',
      'umount-a=0',
      'umount-b=0',
      'daemons-left=0',
      '0',
      '',
    ].join('\n'));
    expect(r.stderr).toMatch(/ledgerfs: -o bogus=1: unknown option/);
    expect(r.stderr).toMatch(/ledgerfs: -o ro: ledgerfs has no read-only mount option/);
    expect(fs.readFileSync(path.join(d, 'b.log'), 'utf8')).toContain('"msg":"mounted"');
  });
});
