import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLI, startMount } from '../helpers/mount.js';
import { putFiles } from '../helpers/policy.js';
import { sandboxDir, type RunOutcome, type SandboxDir } from '../helpers/sandbox.js';
import { spawnSync } from 'node:child_process';

/*
 * Issue 13.1: `ledgerfs run` started as root used to hand the program real root with every
 * capability; it remounted /opt read-write and wrote to the host, read a hidden .env in the
 * backend and wrote into the journal. Each test here is one such escape, tried from inside a
 * real sandbox started as root (as CI runs).
 */

const asRoot = process.getuid?.() === 0;

function report(r: RunOutcome): string {
  return `exit ${r.code}\n--- stdout ---\n${r.stdout}\n--- stderr ---\n${r.stderr}`;
}

/** `sh -c` lines that each print NAME=<exit status> */
const status = (name: string, cmd: string) => `${cmd} >/dev/null 2>&1; echo ${name}=$?`;

/** NAME=code lines of the program's output */
function statuses(out: string): Record<string, number> {
  return Object.fromEntries([...out.matchAll(/^(\w+)=(\d+)$/gm)].map((m) => [m[1], Number(m[2])]));
}

describe.skipIf(!asRoot)('ledgerfs run started as root: no way out of the sandbox', () => {
  let sb: SandboxDir;
  const hostLitter: string[] = [];
  beforeEach(() => {
    sb = sandboxDir((src) => putFiles(src, { 'notes.md': '# notes\n' }));
  });
  afterEach(() => {
    // an escape that worked (on the code before 13.1) must not leave its trace on the host
    for (const p of hostLitter.splice(0)) fs.rmSync(p, { recursive: true, force: true });
    const left = sb.mounts();
    sb.cleanup();
    expect(left).toEqual([]);
  });

  const run = (extra: string[], script: string) => sb.run(['--source', sb.src, '--state', sb.state, ...extra, '--', 'sh', '-c', script]);

  it('the program is not root: an ordinary uid, no capabilities, no new privileges, a seccomp filter; what it creates is the daemon\'s on the backend', async () => {
    const r = await run([], [
      'echo "uid=$(id -u)"', 'echo "gid=$(id -g)"',
      'grep -E "^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):" /proc/self/status',
      'echo made > made.txt', 'echo "owner=$(stat -c %u:%g made.txt)"',
    ].join('\n'));
    expect(r.code, report(r)).toBe(0);
    expect(r.stdout).toMatch(/^uid=1000$/m);
    expect(r.stdout).toMatch(/^gid=1000$/m);
    for (const cap of ['CapEff', 'CapPrm', 'CapBnd']) expect(r.stdout).toMatch(new RegExp(`^${cap}:\\s+0{16}$`, 'm'));
    expect(r.stdout).toMatch(/^NoNewPrivs:\s+1$/m);
    expect(r.stdout).toMatch(/^Seccomp:\s+2$/m);
    // inside, the program owns what it made (its uid maps to the daemon's caller, root, outside);
    // on the backend the file is the daemon's
    expect(r.stdout).toMatch(/^owner=1000:1000$/m);
    const st = fs.statSync(path.join(sb.src, 'made.txt'));
    expect([st.uid, st.gid]).toEqual([0, 0]);
  });

  it('mount, umount, unshare and chroot all fail', async () => {
    const r = await run([], [
      'mkdir -p /tmp/m',
      status('mount', 'mount -t tmpfs none /tmp/m'),
      status('umount', 'umount /tmp'),
      status('umountws', 'umount -l "$LEDGERFS_WORKSPACE"'),
      status('unsharem', 'unshare -m true'),
      status('unshareU', 'unshare -U -r true'),
      status('chroot', 'chroot / true'),
    ].join('\n'));
    expect(r.code, report(r)).toBe(0);
    const s = statuses(r.stdout);
    expect(Object.keys(s).sort(), report(r)).toEqual(['chroot', 'mount', 'umount', 'umountws', 'unshareU', 'unsharem']);
    for (const [name, code] of Object.entries(s)) expect(code, `${name} succeeded\n${report(r)}`).not.toBe(0);
  });

  it('remounting /opt or /usr read-write fails, and nothing is written to the host', async () => {
    const mark = `ledgerfs-escape-${process.pid}-${Date.now()}`;
    const optFile = path.join('/opt', mark);
    const usrFile = path.join('/usr', mark);
    hostLitter.push(optFile, usrFile);
    const r = await run([], [
      status('remountopt', 'mount -o remount,bind,rw /opt'),
      status('touchopt', `touch ${optFile}`),
      status('remountusr', 'mount -o remount,bind,rw /usr'),
      status('touchusr', `touch ${usrFile}`),
    ].join('\n'));
    expect(r.code, report(r)).toBe(0);
    const s = statuses(r.stdout);
    expect(s.remountopt, report(r)).not.toBe(0);
    expect(s.touchopt, report(r)).not.toBe(0);
    expect(s.remountusr, report(r)).not.toBe(0);
    expect(s.touchusr, report(r)).not.toBe(0);
    expect(fs.existsSync(optFile)).toBe(false);
    expect(fs.existsSync(usrFile)).toBe(false);
  });

  it('the state directory and the backend\'s real path cannot be reached, even below /opt', async () => {
    // the setup: backend and journal where the sandbox binds the host read-only
    const base = fs.mkdtempSync('/opt/ledgerfs-escape-');
    hostLitter.push(base);
    const backend = path.join(base, 'backend');
    const state = path.join(base, 'state');
    putFiles(backend, { 'case/notes.md': '# case\n', 'case/.env': 'API_KEY=secret\n' });
    const policy = path.join(sb.dir, 'case.yaml');
    fs.writeFileSync(policy, `backend: { type: local, path: ${backend} }\nroots:\n  - path: /case\n    mode: rw\nhide: ["**/.env"]\n`);
    const r = await sb.run(['--policy', policy, '--state', state, '--', 'sh', '-c', [
      status('env', `cat ${backend}/case/.env`),
      status('lsbackend', `ls ${backend}/case/notes.md`),
      status('lsstate', `ls -A ${state} | grep .`),
      status('writestate', `echo forged > ${state}/forged`),
      status('writebackend', `echo x > ${backend}/case/new.txt`),
      status('remount', `mount -o remount,bind,rw /opt && echo forged > ${state}/forged`),
      // no process of the host, the daemon's included, shows in the sandbox's /proc
      'echo "daemons=$(cat /proc/[0-9]*/comm | grep -cx node)"',
      'echo "roots=$(for p in /proc/[0-9]*; do readlink $p/root; done | sort -u | tr "\\n" " ")"',
      'echo "viewed=$(cat case/notes.md)"',
    ].join('\n')]);
    expect(r.code, report(r)).toBe(0);
    const s = statuses(r.stdout);
    for (const name of ['env', 'lsbackend', 'lsstate', 'writestate', 'writebackend', 'remount']) {
      expect(s[name], `${name} succeeded\n${report(r)}`).not.toBe(0);
    }
    expect(s.daemons, report(r)).toBe(0);
    expect(r.stdout).toMatch(/^roots=\/ $/m);
    expect(r.stdout).toMatch(/^viewed=# case$/m);
    expect(fs.existsSync(path.join(state, 'forged'))).toBe(false);
    expect(fs.existsSync(path.join(backend, 'case/new.txt'))).toBe(false);
  });

  it('root-only host files under /etc and /opt stay unreadable, though the program is host root to the kernel', async () => {
    // the sandbox uid maps to host uid 0: owner and group checks would let it read root's files
    const base = fs.mkdtempSync('/opt/ledgerfs-secrets-');
    hostLitter.push(base);
    putFiles(base, { 'token': 'TOKEN-0600\n', 'group-only': 'GROUP-0640\n', 'private/key.pem': 'KEY-IN-0700\n', 'public.txt': 'PUBLIC\n' });
    fs.chmodSync(base, 0o755); // mkdtemp makes it 0700: the whole of it would be covered
    fs.chmodSync(path.join(base, 'token'), 0o600);
    fs.chmodSync(path.join(base, 'group-only'), 0o640);
    fs.chmodSync(path.join(base, 'private'), 0o700);
    const shadow = fs.existsSync('/etc/shadow') && (fs.statSync('/etc/shadow').mode & 0o004) === 0;
    const r = await run([], [
      `cat ${base}/token ${base}/group-only ${base}/private/key.pem 2>/dev/null`,
      shadow ? 'head -c 200 /etc/shadow 2>/dev/null | grep -c "^root:"' : 'echo 0',
      `cat ${base}/public.txt`,
      'id -u',
    ].join('; '));
    expect(r.stdout, report(r)).not.toMatch(/TOKEN|GROUP|KEY-IN/);
    expect(r.stdout.trim().split('\n'), report(r)).toEqual(['0', 'PUBLIC', '1000']);
    // nothing was changed on the host
    expect(fs.readFileSync(path.join(base, 'token'), 'utf8')).toBe('TOKEN-0600\n');
  });

  it('host sysctls stay read-only, though the program is host root to the kernel', async () => {
    // a sysctl's write checks only that the writer's uid is host root (no capability): with
    // /proc/sys writable, kernel.core_pattern = "|/path/in/the/backend" runs a program of the
    // sandbox's as real root on the host at the next crash. Each write below puts back the
    // value already there, so even where it passes, nothing on the host changes.
    const r = await run([], [
      status('corepattern', 'cat /proc/sys/kernel/core_pattern > /tmp/v && cat /tmp/v > /proc/sys/kernel/core_pattern'),
      status('swappiness', 'cat /proc/sys/vm/swappiness > /tmp/v && cat /tmp/v > /proc/sys/vm/swappiness'),
      status('readable', 'cat /proc/sys/kernel/ostype'),
    ].join('\n'));
    expect(r.code, report(r)).toBe(0);
    const s = statuses(r.stdout);
    expect(s.corepattern, report(r)).not.toBe(0);
    expect(s.swappiness, report(r)).not.toBe(0);
    expect(s.readable, report(r)).toBe(0);
  });

  it('root-only host-wide files of /proc stay unreadable (slabinfo, timer_list, kpageflags, vmallocinfo)', async () => {
    // their mode is all that guards them, and the program is host uid 0 to that check
    const candidates = ['slabinfo', 'timer_list', 'kpageflags', 'kpagecount', 'vmallocinfo', 'pagetypeinfo'];
    const present = candidates.filter((n) => {
      try {
        const st = fs.statSync(`/proc/${n}`);
        return st.uid === 0 && (st.mode & 0o004) === 0;
      } catch {
        return false;
      }
    });
    const r = await run([], [...present.map((n) => `echo "${n.replace('-', '_')}=$(head -c 4096 /proc/${n} 2>/dev/null | wc -c)"`), 'echo "cpuinfo=$(head -c 64 /proc/cpuinfo | wc -c)"'].join('\n'));
    expect(r.code, report(r)).toBe(0);
    const s = statuses(r.stdout);
    for (const n of present) expect(s[n], `${n} was readable\n${report(r)}`).toBe(0);
    expect(s.cpuinfo, report(r)).toBeGreaterThan(0);
  });

  it('with --mount, the running mount\'s journal and source are kept out too', async () => {
    const base = fs.mkdtempSync('/opt/ledgerfs-escape-');
    hostLitter.push(base);
    const src = path.join(base, 'src');
    const state = path.join(base, 'state');
    putFiles(src, { 'notes.md': '# notes\n' });
    const m = await startMount({ src, args: ['--state', state] });
    try {
      const r = await sb.run(['--mount', m.mnt, '--state', state, '--', 'sh', '-c', [
        status('src', `cat ${src}/notes.md`),
        status('state', `ls -A ${state} | grep .`),
        'echo "viewed=$(cat notes.md)"',
      ].join('\n')]);
      expect(r.code, report(r)).toBe(0);
      const s = statuses(r.stdout);
      expect(s.src, report(r)).not.toBe(0);
      expect(s.state, report(r)).not.toBe(0);
      expect(r.stdout).toMatch(/^viewed=# notes$/m);
    } finally {
      await m.stop();
    }
  });

  it('a descriptor the caller left open does not reach the program', () => {
    // bwrap passes on every descriptor it gets: a harness's pipe or an open file of the shell
    // that started the run was the program's, past every bind. (Node marks 3..15 close-on-exec
    // at start; a higher one, past the first gap, was passed on.)
    const secret = path.join(sb.dir, 'outside-secret');
    fs.writeFileSync(secret, 'FD-SECRET\n');
    const r = spawnSync('bash', ['-c', `exec 100<${secret}; exec "$0" "$@"`, process.execPath, CLI, 'run', '--source', sb.src, '--state', sb.state, '--', 'bash', '-c', 'cat <&100; echo "fd100=$?"; ls /proc/self/fd | tr "\\n" " "'], {
      encoding: 'utf8', timeout: 120_000, env: { ...process.env, TMPDIR: sb.tmp, XDG_STATE_HOME: path.join(sb.dir, 'state-home') },
    });
    expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
    expect(r.stdout).not.toContain('FD-SECRET');
    expect(r.stdout).toMatch(/^fd100=[1-9]/m);
  });

  it('the seccomp filter refuses ptrace, name_to_handle_at and keyctl with EPERM', async () => {
    const r = await run([], `python3 -c '
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def show(name, rc):
    print(name, "ok" if rc >= 0 else errno.errorcode[ctypes.get_errno()])
show("ptrace", libc.ptrace(0, 0, None, None))  # PTRACE_TRACEME: allowed to anyone without a filter
buf = ctypes.create_string_buffer(8 + 128); ctypes.c_uint.from_buffer(buf).value = 128
mnt = ctypes.c_int()
show("name_to_handle_at", libc.name_to_handle_at(-100, b".", buf, ctypes.byref(mnt), 0))
show("keyctl", libc.syscall({"x86_64": 250, "aarch64": 219}[os.uname().machine], 0, -3, 0, 0, 0))  # KEYCTL_GET_KEYRING_ID of the session keyring
'`);
    expect(r.code, report(r)).toBe(0);
    expect(r.stdout.trim().split('\n')).toEqual(['ptrace EPERM', 'name_to_handle_at EPERM', 'keyctl EPERM']);
  });

  it('--uid/--gid choose whom it runs as; even --uid 0 has no capabilities and cannot remount', async () => {
    const chosen = await run(['--uid', '4242', '--gid', '4343'], 'echo "ids=$(id -u):$(id -g)"');
    expect(chosen.code, report(chosen)).toBe(0);
    expect(chosen.stdout).toMatch(/^ids=4242:4343$/m);

    const root = await run(['--uid', '0'], [
      'echo "ids=$(id -u):$(id -g)"',
      'grep -E "^CapEff:" /proc/self/status',
      status('remount', 'mount -o remount,bind,rw /opt'),
      status('mount', 'mount -t tmpfs none /tmp'),
    ].join('\n'));
    expect(root.code, report(root)).toBe(0);
    expect(root.stdout).toMatch(/^ids=0:0$/m);
    expect(root.stdout).toMatch(/^CapEff:\s+0{16}$/m);
    const s = statuses(root.stdout);
    expect(s.remount, report(root)).not.toBe(0);
    expect(s.mount, report(root)).not.toBe(0);

    const bad = await run(['--uid', 'root'], 'true');
    expect(bad.code).toBe(125);
    expect(bad.stderr).toMatch(/--uid root: expected a numeric id/);
  });

  it('--privileged is the documented way back to real root', async () => {
    const help = spawnSync(process.execPath, [CLI, 'run', '--help'], { encoding: 'utf8' });
    expect(help.stdout).toMatch(/--privileged/);
    const r = await run(['--privileged'], ['echo "uid=$(id -u)"', 'grep -E "^CapEff:" /proc/self/status'].join('\n'));
    expect(r.code, report(r)).toBe(0);
    expect(r.stdout).toMatch(/^uid=0$/m);
    expect(r.stdout).not.toMatch(/^CapEff:\s+0{16}$/m);
    const both = await run(['--privileged', '--uid', '5'], 'true');
    expect(both.code).toBe(125);
    expect(both.stderr).toMatch(/--uid\/--gid cannot be used with --privileged/);
  });
});
