import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLI, onGcs, run, sh, type TestMount } from '../helpers/mount.js';
import { startJournaledMount, type JournaledMount } from '../helpers/journaled-mount.js';

/* Extended attributes on a real mount of the local backend: setfattr/getfattr (package attr). */

function ledgerfs(m: TestMount, args: string[]): string {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: { ...process.env, ...m.env }, timeout: 60_000 });
  if (r.status !== 0) throw new Error(`ledgerfs ${args.join(' ')} exited ${r.status}\n${r.stderr}\n${r.stdout}`);
  return r.stdout;
}

/** getfattr's value of `name` on `file` (in `dir`), or null when it has none */
function attr(dir: string, file: string, name: string): string | null {
  const r = run(`getfattr --only-values -h -n ${name} ${file}`, dir);
  return r.status === 0 ? r.stdout : null;
}

describe.skipIf(onGcs)('mount: extended attributes (local backend)', () => {
  let j: JournaledMount;
  let m: TestMount;
  beforeEach(async () => {
    j = await startJournaledMount('xattr-run', {
      populate: (src) => {
        sh('printf data > f && mkdir d && ln -s f l && setfattr -n user.k -v old f && setfattr -n user.gone -v bye f', src);
        // a file capability (cap_net_raw) on the store's file: the mount never reports one
        sh('printf x > capped && setfattr -n security.capability -v 0sAQAAAgAgAAAAAAAAAAAAAAAAAAA= capped', src);
      },
    });
    m = j.m;
  });
  afterEach(async () => {
    expect(await j.finish(), 'the daemon logged errors').toEqual([]);
  });

  it('setfattr/getfattr round-trip user.*; other namespaces answer as on ext4 to a user; rollback restores the old values', () => {
    const mnt = m.mnt;
    expect(attr(mnt, 'f', 'user.k')).toBe('old'); // set beside the mount, read through it
    sh('setfattr -n user.k -v new f && setfattr -n user.added -v 12345 f && setfattr -x user.gone f', mnt);
    sh('setfattr -n user.dir -v yes d', mnt);
    expect(attr(mnt, 'f', 'user.k')).toBe('new');
    expect(attr(mnt, 'f', 'user.added')).toBe('12345');
    expect(attr(mnt, 'f', 'user.gone')).toBeNull();
    expect(attr(mnt, 'd', 'user.dir')).toBe('yes');
    // the store has them, on the files themselves
    expect(attr(m.src, 'f', 'user.k')).toBe('new');
    expect(sh('getfattr -d --absolute-names f', mnt)).toMatch(/user\.added="12345"\nuser\.k="new"/);
    // a symlink itself: user.* is not allowed on one (as on ext4), and its target is untouched
    expect(run('setfattr -h -n user.k -v x l', mnt).stderr).toMatch(/Operation not permitted/);
    expect(attr(mnt, 'f', 'user.k')).toBe('new');
    // the daemon runs as root here; the mount still answers as ext4 answers a user
    expect(run('setfattr -n trusted.k -v x f', mnt).stderr).toMatch(/Operation not permitted/);
    expect(run('setfattr -n security.k -v x f', mnt).stderr).toMatch(/Operation not permitted/);
    expect(run('getfattr -n system.posix_acl_access f', mnt).stderr).toMatch(/Operation not supported/);
    expect(attr(m.src, 'capped', 'security.capability')).not.toBeNull();
    expect(attr(mnt, 'capped', 'security.capability')).toBeNull();
    expect(sh('getfattr -d -m - --absolute-names capped', mnt)).toBe('');
    // a well-formed ACL (u::rw- g::r-- o::r--), so that the kernel's own parsing lets it through
    expect(run('setfattr -n system.posix_acl_access -v 0sAgAAAAEABgD/////BAAEAP////8gAAQA/////w== f', mnt).stderr).toMatch(/Operation not supported/);

    const log = ledgerfs(m, ['log', '--state', j.state]);
    expect(log).toMatch(/setxattr user\.k \/f/);
    expect(log).toMatch(/removexattr user\.gone \/f/);
    ledgerfs(m, ['rollback', '--state', j.state, '--session', 'xattr-run']);
    expect(attr(mnt, 'f', 'user.k')).toBe('old');
    expect(attr(mnt, 'f', 'user.gone')).toBe('bye');
    expect(attr(mnt, 'f', 'user.added')).toBeNull();
    expect(attr(mnt, 'd', 'user.dir')).toBeNull();
    expect(attr(path.join(m.src), 'f', 'user.k')).toBe('old');
  });
});
