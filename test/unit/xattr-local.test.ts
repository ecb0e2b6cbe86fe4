import { afterEach, describe, expect, it } from 'vitest';
import type { Caller } from '../../src/core/mutation.js';
import { CASE_FILES, CASE_POLICY, policyFixture, putFiles, type PolicyFixture } from '../helpers/policy.js';
import { expectCode } from '../helpers/tmp.js';

/* Extended attributes on the local store, through the core (policy view + stages), no mount. */

const W = '/projects/Wilson-MVA';
const AGENT: Caller = { uid: 1000, gid: 1000, pid: 1 };
let f: PolicyFixture | undefined;

afterEach(async () => {
  await f?.close();
  f = undefined;
});

describe('local backend: extended attributes', () => {
  it('stores user.* (set, get, list, remove), and the policy judges a set or remove as a write', async () => {
    f = await policyFixture(CASE_POLICY, (src) => putFiles(src, CASE_FILES));
    const { vfs } = f;
    expect(vfs.backend.capabilities.xattrs).toBe(true);
    await vfs.setxattr(`${W}/notes.md`, 'user.k', Buffer.from('v1'), 0, AGENT);
    expect((await vfs.getxattr(`${W}/notes.md`, 'user.k')).toString()).toBe('v1');
    expect(await vfs.listxattr(`${W}/notes.md`)).toEqual(['user.k']);
    await vfs.setxattr(`${W}/notes.md`, 'user.empty', Buffer.alloc(0), 0, AGENT);
    expect((await vfs.getxattr(`${W}/notes.md`, 'user.empty')).length).toBe(0);
    // setxattr(2)'s flags reach the store: XATTR_CREATE (1) on an existing name, XATTR_REPLACE (2) on a missing one
    await expectCode(vfs.setxattr(`${W}/notes.md`, 'user.k', Buffer.from('v2'), 1, AGENT), 'EEXIST');
    await expectCode(vfs.setxattr(`${W}/notes.md`, 'user.none', Buffer.from('v2'), 2, AGENT), 'ENODATA');
    expect((await vfs.getxattr(`${W}/notes.md`, 'user.k')).toString()).toBe('v1');
    await vfs.removexattr(`${W}/notes.md`, 'user.k', AGENT);
    await expectCode(vfs.getxattr(`${W}/notes.md`, 'user.k'), 'ENODATA');
    // read-only by glob, a read-only root: refused before it reaches the store
    await expectCode(vfs.setxattr(`${W}/intake/form.pdf`, 'user.k', Buffer.from('x'), 0, AGENT), 'EACCES');
    await expectCode(vfs.setxattr('/Tools/build.py', 'user.k', Buffer.from('x'), 0, AGENT), 'EROFS');
    // hidden names stay hidden, for reads and writes alike
    await expectCode(vfs.getxattr(`${W}/.env`, 'user.k'), 'ENOENT');
    await expectCode(vfs.listxattr(`${W}/.env`), 'ENOENT');
    await expectCode(vfs.setxattr(`${W}/.env`, 'user.k', Buffer.from('x'), 0, AGENT), 'ENOENT');
    await expectCode(vfs.removexattr(`${W}/.env`, 'user.k', AGENT), 'ENOENT');
  });

  it('answers trusted.*, security.* and system.* as ext4 answers an unprivileged caller', async () => {
    f = await policyFixture(CASE_POLICY, (src) => putFiles(src, CASE_FILES));
    const { vfs } = f;
    const p = `${W}/notes.md`;
    // the daemon runs as root in tests: the store itself would take these
    await expectCode(vfs.setxattr(p, 'trusted.k', Buffer.from('x'), 0, AGENT), 'EPERM');
    await expectCode(vfs.getxattr(p, 'trusted.k'), 'ENODATA');
    await expectCode(vfs.setxattr(p, 'security.k', Buffer.from('x'), 0, AGENT), 'EPERM');
    await expectCode(vfs.removexattr(p, 'security.k', AGENT), 'EPERM');
    await expectCode(vfs.getxattr(p, 'security.k'), 'ENODATA');
    for (const n of ['system.posix_acl_access', 'system.posix_acl_default', 'system.foo', 'other.k']) {
      await expectCode(vfs.getxattr(p, n), 'EOPNOTSUPP');
      await expectCode(vfs.setxattr(p, n, Buffer.from('x'), 0, AGENT), 'EOPNOTSUPP');
      await expectCode(vfs.removexattr(p, n, AGENT), 'EOPNOTSUPP');
    }
    expect(await vfs.listxattr(p)).toEqual([]);
  });
});
