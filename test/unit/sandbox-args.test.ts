import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import os from 'node:os';
import path from 'node:path';
import { bwrapArgs, hostOnlyEntries, procHostOnlyEntries, sandboxFilter, type SandboxSpec } from '../../src/sandbox/index.js';

const spec = (over: Partial<SandboxSpec>): SandboxSpec => ({
  workspace: '/tmp/ws', at: '/workspace', network: false, readOnly: [], command: ['true'],
  user: { uid: 1000, gid: 1000 }, seccompFd: 3, hidden: [], ...over,
});

/** the host's root-only entries, covered when root runs these tests (hostOnlyEntries below) */
const rootGids = [...new Set([process.getgid?.() ?? 0, ...(process.getgroups?.() ?? [])])];
const hostOnly = new Set(process.getuid?.() === 0 ? [...Object.values(hostOnlyEntries(['/etc', '/opt', '/var/lib/dpkg'], 0, rootGids)).flat(), ...Object.values(procHostOnlyEntries(0, rootGids)).flat()] : []);

/** the argument after each occurrence of `flag` (a cover of a root-only host entry aside) */
const after = (args: string[], flag: string) => args.flatMap((a, i) => (a === flag && !hostOnly.has(args[i + 1] as string) ? [args[i + 1]] : []));

describe('bwrapArgs: who the program is and what it cannot see', () => {
  it('an unprivileged sandbox: its own user namespace, its uid/gid, no capabilities, the seccomp filter', () => {
    const args = bwrapArgs(spec({ user: { uid: 4242, gid: 4343 } }));
    for (const f of ['--unshare-user', '--disable-userns']) expect(args).toContain(f);
    expect(after(args, '--uid')).toEqual(['4242']);
    expect(after(args, '--gid')).toEqual(['4343']);
    expect(after(args, '--cap-drop')).toEqual(['ALL']);
    expect(after(args, '--seccomp')).toEqual(['3']);
    // options come before the command
    expect(args.indexOf('--seccomp')).toBeLessThan(args.indexOf('--'));
  });

  it('--privileged: none of that', () => {
    const args = bwrapArgs(spec({ user: null, seccompFd: undefined }));
    for (const f of ['--unshare-user', '--disable-userns', '--uid', '--gid', '--cap-drop', '--seccomp']) expect(args).not.toContain(f);
  });

  it('never an unprivileged sandbox without its filter', () => {
    expect(() => bwrapArgs(spec({ seccompFd: undefined }))).toThrow(/seccomp/);
  });

  it('a journal or backend below a read-only bind is covered by a read-only tmpfs; one holding a bound directory is refused', () => {
    const dir = fs.existsSync('/opt') ? '/opt' : '/usr';
    const args = bwrapArgs(spec({ hidden: [`${dir}/some-state`, '/var/tmp/elsewhere'] }));
    expect(after(args, '--tmpfs')).toEqual(['/tmp', `${dir}/some-state`]);
    expect(after(args, '--remount-ro')).toEqual([`${dir}/some-state`, '/']);
    // the cover comes after the bind it covers
    expect(args.indexOf(`${dir}/some-state`)).toBeGreaterThan(args.lastIndexOf(dir));
    expect(() => bwrapArgs(spec({ hidden: ['/'] }))).toThrow(/holds \/usr, which the sandbox shows the program read-only/);
    expect(after(bwrapArgs(spec({ hidden: ['/var/tmp/x'], readOnly: ['/var/tmp'] })), '--tmpfs')).toEqual(['/tmp', '/var/tmp/x']);
    expect(() => bwrapArgs(spec({ hidden: ['/var'], readOnly: ['/var/tmp'] }))).toThrow(/^\/var holds \/var\/(lib\/dpkg|tmp), which the sandbox shows the program read-only/);
  });

  it('the entries a sandbox mapped to host root could read only as their owner or group are found, and nothing else', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ledgerfs-hostonly-'));
    try {
      const put = (rel: string, mode: number, body?: string) => {
        const p = path.join(dir, rel);
        if (body === undefined) fs.mkdirSync(p, { mode });
        else fs.writeFileSync(p, body);
        fs.chmodSync(p, mode);
      };
      put('pub', 0o755);
      put('pub/token', 0o600, 't');
      put('pub/group', 0o640, 'g');
      put('pub/open', 0o644, 'o');
      put('locked', 0o700);
      put('locked/inside', 0o600, 'i');
      put('listable-only', 0o751);
      const uid = process.getuid?.() ?? 0;
      const gid = process.getgid?.() ?? 0;
      const mine = hostOnlyEntries([dir], uid, [gid]);
      expect(mine.files.sort()).toEqual([path.join(dir, 'pub/group'), path.join(dir, 'pub/token')]);
      // a covered directory is not walked into
      expect(mine.dirs.sort()).toEqual([path.join(dir, 'listable-only'), path.join(dir, 'locked')]);
      // another user's entries are not this sandbox's to read anyway
      expect(hostOnlyEntries([dir], uid + 1, [gid + 1])).toEqual({ files: [], dirs: [] });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it.skipIf(process.getuid?.() !== 0 || !fs.existsSync('/opt'))('as root: a root-only directory under /opt is covered, unless a --ro path lies in it', () => {
    const dir = fs.mkdtempSync('/opt/ledgerfs-hostonly-'); // 0700 root
    try {
      fs.writeFileSync(path.join(dir, 'tool.sh'), 'echo hi\n');
      const covers = (readOnly: string[]) => bwrapArgs(spec({ readOnly })).flatMap((a, i, all) => (a === '--tmpfs' ? [all[i + 1]] : []));
      expect(covers([])).toContain(dir);
      expect(covers([path.join(dir, 'tool.sh')])).not.toContain(dir);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the filter is a BPF program from libseccomp (a whole number of 8-byte instructions)', () => {
    const f = sandboxFilter();
    expect(typeof f, String(f)).not.toBe('string');
    expect((f as Buffer).length % 8).toBe(0);
    expect((f as Buffer).length).toBeGreaterThan(8 * 20);
  });
});
