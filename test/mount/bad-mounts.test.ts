import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CLI, onGcs, startMount, type TestMount } from '../helpers/mount.js';
import { mountAt } from '../../src/fuse/mounts.js';

/** `ledgerfs mount` that must fail at once: its output, code, and that it left nothing. */
function mountFails(args: string[], env: NodeJS.ProcessEnv = {}, wrap: string[] = []) {
  const [cmd, ...argv] = [...wrap, process.execPath, CLI, 'mount', ...args] as [string, ...string[]];
  const r = spawnSync(cmd, argv, { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 30_000 });
  const stderr = r.stderr.split('\n').filter((l) => l && !l.startsWith('{"level"')).join('\n');
  return { status: r.status, stderr };
}

function expectSentence(stderr: string): void {
  expect(stderr).toMatch(/^ledgerfs: \S/);
  expect(stderr).not.toMatch(/\n\s+at |node:internal|Node\.js v/);
  expect(stderr.split('\n')).toHaveLength(1);
}

describe.skipIf(onGcs)('a mount that cannot be: a sentence and an exit code, nothing left behind (issue 16.4)', () => {
  let dir: string;
  const extraMounts: string[] = [];
  let m: TestMount | undefined;
  const setup = () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ledgerfs-unit-badmount-'));
    fs.chmodSync(dir, 0o755);
    for (const d of ['src', 'mnt', 'state-home']) fs.mkdirSync(path.join(dir, d));
    return { src: path.join(dir, 'src'), mnt: path.join(dir, 'mnt'), env: { XDG_STATE_HOME: path.join(dir, 'state-home') } };
  };
  afterEach(async () => {
    await m?.stop();
    m = undefined;
    for (const p of extraMounts.splice(0)) if (mountAt(p)) spawnSync('umount', ['-l', p]);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('a state directory on a read-only file system (new, and existing)', () => {
    const { src, mnt, env } = setup();
    const ro = path.join(dir, 'ro');
    fs.mkdirSync(ro);
    expect(spawnSync('mount', ['-t', 'tmpfs', '-o', 'ro', 'ledgerfs-unit-ro', ro]).status).toBe(0);
    extraMounts.push(ro);
    for (const state of [path.join(ro, 'state'), ro]) {
      const r = mountFails(['--source', src, '--state', state, mnt], env);
      expectSentence(r.stderr);
      expect(r.stderr).toContain(`the journal's state directory ${state}`);
      expect(r.stderr).toContain('is on a read-only file system. Name a writable one: --state DIR');
      expect(r.status).toBe(2);
      expect(mountAt(mnt)).toBeUndefined();
    }
  });

  it('a user without a home (HOME=/nonexistent, as nobody)', () => {
    const { src, mnt } = setup();
    fs.chownSync(mnt, 65534, 65534);
    const asNobody = ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups'];
    const env = { HOME: '/nonexistent', XDG_STATE_HOME: '' };
    const r = mountFails(['--source', src, mnt], env, asNobody);
    expectSentence(r.stderr);
    expect(r.stderr).toMatch(/state directory \/nonexistent\/\.local\/state\/ledgerfs\/src-[0-9a-f]{12} .*cannot be created by this user \(this user's home, \/nonexistent, does not exist\)/);
    expect(r.status).toBe(2);
    const demo = mountFails([mnt], env, asNobody); // the demo workspace lives in the home too
    expectSentence(demo.stderr);
    expect(demo.stderr).toBe('ledgerfs: cannot mkdir /nonexistent/.ledgerfs/demo-workspace: permission denied (EACCES)');
    expect(demo.status).toBe(1);
    expect(fs.existsSync('/nonexistent')).toBe(false);
  });

  it('a source that does not exist', () => {
    const { mnt, env } = setup();
    const r = mountFails(['--source', path.join(dir, 'nope'), mnt], env);
    expect(r.stderr).toBe(`ledgerfs: source directory ${path.join(dir, 'nope')} does not exist`);
    expect(r.status).toBe(2);
    expect(fs.readdirSync(path.join(dir, 'state-home'))).toEqual([]);
  });

  it('a mount point that is a file: no state directory is made, an existing journal gets no start record', async () => {
    const { src, env } = setup();
    const file = path.join(dir, 'file');
    fs.writeFileSync(file, '');
    const state = path.join(dir, 'state');
    const r = mountFails(['--source', src, '--state', state, file], env);
    expect(r.stderr).toBe(`ledgerfs: mount point ${file} is not a directory`);
    expect(r.status).toBe(2);
    expect(fs.existsSync(state)).toBe(false);
    expect(fs.readdirSync(path.join(dir, 'state-home'))).toEqual([]);
    // a journal that exists stays byte for byte as it was
    m = await startMount({ src, args: ['--state', state] });
    await m.stop();
    m = undefined;
    const journal = () => fs.readdirSync(path.join(state, 'journal')).map((f) => fs.readFileSync(path.join(state, 'journal', f), 'utf8')).join('');
    const before = journal();
    expect(mountFails(['--source', src, '--state', state, file], env).status).toBe(2);
    expect(journal()).toBe(before);
  });

  it('a second mount of the same source is refused, with another --state too, naming the first and its journal', async () => {
    const { src, env } = setup();
    const state1 = path.join(dir, 'state1');
    m = await startMount({ src, args: ['--state', state1] });
    const mnt2 = path.join(dir, 'mnt2');
    fs.mkdirSync(mnt2);
    const state2 = path.join(dir, 'state2');
    const r = mountFails(['--source', src, '--state', state2, mnt2], env);
    expectSentence(r.stderr);
    expect(r.stderr).toContain(`ledgerfs: ${fs.realpathSync(src)} is already mounted at ${m.mnt}, journal ${state1}, daemon pid ${m.daemon.pid}; `);
    expect(r.stderr).toContain(`unmount it first: ledgerfs unmount ${m.mnt}`);
    expect(r.status).toBe(2);
    expect(mountAt(mnt2)).toBeUndefined();
    expect(fs.existsSync(state2)).toBe(false);
    // said on purpose (bench columns side by side), it mounts
    const m2 = await startMount({ src, args: ['--state', state2, '--shared-source'] });
    try {
      expect(fs.readdirSync(m2.mnt)).toEqual(fs.readdirSync(m.mnt));
    } finally {
      await m2.stop();
    }
  });
});
