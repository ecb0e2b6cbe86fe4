import { constants as C } from 'node:fs';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError, parseMountFile } from '../../src/config/load.js';
import type { Caller } from '../../src/core/mutation.js';
import { policyFixture, putFiles, type PolicyFixture } from '../helpers/policy.js';
import { expectCode } from '../helpers/tmp.js';

/* The mass-change guard (issue 18): limits per session and per root, reserved race-free. */

const OPERATOR: Caller = { operator: true };
let f: PolicyFixture | undefined;
afterEach(async () => {
  await f?.close();
  f = undefined;
});

function files(n: number, dir = 'w'): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i < n; i++) out[`${dir}/f${i}.txt`] = `${i}\n`;
  return out;
}

async function fixture(body: string, put: Record<string, string>): Promise<PolicyFixture> {
  f = await policyFixture(body, (src) => putFiles(src, put));
  return f;
}

const settled = async (ps: Promise<unknown>[]) => {
  const r = await Promise.allSettled(ps);
  const codes = r.map((x) => (x.status === 'fulfilled' ? 'OK' : (x.reason as { code?: string }).code ?? String(x.reason)));
  return { ok: codes.filter((c) => c === 'OK').length, codes };
};

describe('limits in the mount file', () => {
  const parse = (text: string) => parseMountFile(`backend: { type: local, path: . }\nroots: [{ path: /w, mode: rw }]\n${text}`, 'case.yaml', '/tmp');

  it('reads session and root limits with units, and the sandboxed preset gives generous ones', () => {
    expect(parse('limits: { deletes: 500, bytesWritten: 2MiB }').limits).toEqual({ deletes: 500, bytesWritten: 2 * 1024 ** 2 });
    const c = parseMountFile('backend: { type: local, path: . }\nroots: [{ path: /w, mode: rw, limits: { renames: 3 } }]\n', 'case.yaml', '/tmp');
    expect(c.roots[0]?.limits).toEqual({ renames: 3 });
    expect(c.limits).toEqual({});
    const s = parse('preset: sandboxed\nlimits: { deletes: 50, renames: unlimited }');
    expect(s.limits).toEqual({ deletes: 50, filesWritten: 100_000, bytesWritten: 4 * 1024 ** 3 });
    expect(parse('preset: sandboxed').limits.deletes).toBe(10_000);
  });

  it('names the field of a bad limit', () => {
    expect(() => parse('limits: { deletes: -1 }')).toThrow(ConfigError);
    expect(() => parse('limits: { deletes: -1 }')).toThrow(/limits\.deletes: expected a whole number/);
    expect(() => parse('limits: { delete: 5 }')).toThrow(/limits\.delete: unknown field \(did you mean "deletes"\?\)/);
  });
});

describe('limits through the core', () => {
  it('lets exactly N of many parallel deletes through, refuses the rest with EPERM, and says why', async () => {
    const fx = await fixture('roots: [{ path: /w, mode: rw }]\nlimits: { deletes: 5 }\n', files(20));
    const { ok, codes } = await settled(Array.from({ length: 20 }, (_, i) => fx.vfs.unlink(`/w/f${i}.txt`)));
    expect(ok).toBe(5);
    expect(codes.filter((c) => c === 'EPERM').length).toBe(15);
    expect(fs.readdirSync(path.join(fx.src, 'w')).length).toBe(15);
    const d = fx.policy.denials.list().at(-1);
    expect(d?.rule).toBe('limit');
    expect(d?.reason).toMatch(/this session has 5 deleted files and directories, its limit \(limits\.deletes: 5\); to allow more, raise limits\.deletes in the mount file/);
    expect(fx.policy.limits.session.deletes).toBe(5);
  });

  it('gives a count back when the change fails', async () => {
    const fx = await fixture('roots: [{ path: /w, mode: rw }]\nlimits: { deletes: 1 }\n', files(2));
    fs.rmSync(path.join(fx.src, 'w/f0.txt')); // gone beside the mount: the delete fails
    await expectCode(fx.vfs.unlink('/w/f0.txt'), 'ENOENT');
    expect(fx.policy.limits.session.deletes).toBe(0);
    await fx.vfs.unlink('/w/f1.txt');
    expect(fx.policy.limits.session.deletes).toBe(1);
  });

  it('counts rmdir as a delete and renames on their own; a root limit names its field', async () => {
    const fx = await fixture('roots: [{ path: /w, mode: rw, limits: { renames: 2 } }, { path: /x, mode: rw }]\n', { ...files(4), 'w/d/': '', 'x/a.txt': 'a' });
    await fx.vfs.rename('/w/f0.txt', '/w/g0.txt');
    await fx.vfs.rename('/w/d', '/w/e');
    await expectCode(fx.vfs.rename('/w/f1.txt', '/w/g1.txt'), 'EPERM');
    expect(fx.policy.denials.list().at(-1)?.reason).toMatch(/rename \/w\/f1\.txt to \/w\/g1\.txt refused: this session in \/w has 2 renames, its limit \(roots\[0\]\.limits\.renames: 2\); to allow more, raise roots\[0\]\.limits\.renames/);
    await fx.vfs.rename('/x/a.txt', '/x/b.txt'); // another root: its own (no) limit
    expect(fx.policy.limits.session.renames).toBe(3);
    await fx.vfs.rmdir('/w/e');
    expect(fx.policy.limits.session.deletes).toBe(1);
  });

  it('refuses bytes past bytesWritten with EDQUOT, counting overwrites too', async () => {
    const fx = await fixture('roots: [{ path: /w, mode: rw }]\nlimits: { bytesWritten: 10K }\n', { 'w/': '' });
    await fx.writeFile('/w/a.txt', Buffer.alloc(6 * 1024, 1));
    await fx.writeFile('/w/a.txt', Buffer.alloc(4 * 1024, 2)); // the same file again: 10 KiB written
    await expectCode(fx.writeFile('/w/b.txt', 'x'), 'EDQUOT');
    expect(fx.policy.denials.list().at(-1)?.reason).toMatch(/write to \/w\/b\.txt refused: this session has written 10 KiB, and 1 B more would pass its limit \(limits\.bytesWritten: 10 KiB\)/);
    expect(fx.policy.limits.session.bytesWritten).toBe(10 * 1024);
  });

  it('counts a file written many times once against filesWritten, and refuses a new one with EDQUOT', async () => {
    const fx = await fixture('roots: [{ path: /w, mode: rw }]\nlimits: { filesWritten: 2 }\n', files(3));
    await fx.writeFile('/w/f0.txt', 'a');
    await fx.writeFile('/w/f0.txt', 'b');
    const fh = await fx.vfs.open('/w/f1.txt', C.O_WRONLY);
    await fx.vfs.write(fh, Buffer.from('x'), 1, 0);
    await fx.vfs.write(fh, Buffer.from('y'), 1, 1);
    await fx.vfs.release(fh);
    expect(fx.policy.limits.session.filesWritten).toBe(2);
    await expectCode(fx.writeFile('/w/new.txt', 'x'), 'EDQUOT');
    await expectCode(fx.vfs.truncate('/w/f2.txt', 0), 'EDQUOT');
    expect(fs.existsSync(path.join(fx.src, 'w/new.txt'))).toBe(false);
    expect(fs.readFileSync(path.join(fx.src, 'w/f2.txt'), 'utf8')).toBe('2\n');
  });

  it('neither limits nor counts an operator (a rollback)', async () => {
    const fx = await fixture('roots: [{ path: /w, mode: rw }]\nlimits: { deletes: 1 }\n', files(3));
    await fx.vfs.unlink('/w/f0.txt', OPERATOR);
    await fx.vfs.unlink('/w/f1.txt', OPERATOR);
    expect(fx.policy.limits.session.deletes).toBe(0);
    await fx.vfs.unlink('/w/f2.txt');
  });

  it('shows the session and its counts in /.ledgerfs/session', async () => {
    const fx = await fixture('roots: [{ path: /w, mode: rw, limits: { deletes: 4 } }]\nlimits: { deletes: 500, bytesWritten: 1MiB }\n', files(3));
    fx.policy.view.session = { id: 'test-session-1', mode: 'live' };
    await fx.vfs.unlink('/w/f0.txt');
    await fx.writeFile('/w/f1.txt', 'hello');
    await fx.vfs.getattr('/.ledgerfs/session');
    const text = await fx.readFile('/.ledgerfs/session');
    expect(text).toMatch(/^session: test-session-1\nmode: live/);
    expect(text).toMatch(/\ndeletes +1 \/ 500 \(0%\) +1 \/ 4 \(25%\)\n/);
    expect(text).toMatch(/\nfilesWritten +not counted \(no limit\) +not counted \(no limit\)\n/);
    expect(text).toContain('id=test-session-1 mode=live\n');
    expect(text).toContain('session deletes=1 limit_deletes=500 renames=0 bytes_written=5 limit_bytes_written=1048576\n');
    expect(text).toContain('/w deletes=1 limit_deletes=4 renames=0 bytes_written=5\n');
    // and the policy says what the limits are
    const policy = await fx.readFile('/.ledgerfs/policy');
    expect(policy).toContain('a session (one mount, one run) may change at most: 500 deletes, 1 MiB written\n');
    expect(policy).toContain('a session may change here at most: 4 deletes\n');
  });
});

describe('limit counts kept for a later mount of the session', () => {
  it('a snapshot restored into a fresh guard goes on from its counts, per session, per root and per written file', async () => {
    const { CompiledPolicy } = await import('../../src/policy/compile.js');
    const { ChangeLimits } = await import('../../src/policy/limits.js');
    const config = parseMountFile('backend: { type: local, path: . }\nroots: [{ path: /w, mode: rw, limits: { renames: 2 } }]\nlimits: { deletes: 3, filesWritten: 2 }\n', 'case.yaml', '/tmp');
    const policy = new CompiledPolicy(config);
    const root = policy.roots[0] as (typeof policy.roots)[number];
    const m = (op: string, p: string) => ({ op, path: p, caller: {} }) as unknown as Parameters<InstanceType<typeof ChangeLimits>['take']>[0];
    const first = new ChangeLimits(policy);
    first.take(m('unlink', '/w/a'), root);
    first.take(m('unlink', '/w/b'), root);
    first.take(m('rename', '/w/c'), root);
    first.take(m('create', '/w/new'), root);
    const later = new ChangeLimits(policy);
    later.restore(JSON.parse(JSON.stringify(first.snapshot())) as ReturnType<InstanceType<typeof ChangeLimits>['snapshot']>);
    expect(later.session).toEqual({ deletes: 2, renames: 1, filesWritten: 1, bytesWritten: 0 });
    later.take(m('unlink', '/w/x'), root);
    expect(() => later.take(m('unlink', '/w/y'), root)).toThrow(/this session has 3 deleted files and directories, its limit \(limits\.deletes: 3\)/);
    later.take(m('rename', '/w/d'), root);
    expect(() => later.take(m('rename', '/w/e'), root)).toThrow(/this session in \/w has 2 renames, its limit \(roots\[0\]\.limits\.renames: 2\)/);
    later.take(m('create', '/w/new'), root); // counted once, in the earlier mount
    later.take(m('create', '/w/other'), root);
    expect(() => later.take(m('create', '/w/third'), root)).toThrow(/limits\.filesWritten: 2/);
  });
});
