import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunResult, sh, startMount, type TestMount } from '../helpers/mount.js';
import { putFiles } from '../helpers/policy.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * The mass-change guard through a real mount with real tools (issue 18): `rm -rf`, `mv` and
 * `dd` meet the session's limits, the denial says which and how to raise it, and what reached
 * the backend stops exactly at the limit. /.ledgerfs/session shows the counts.
 */

const SESSION = 'guards-test-session';

const YAML = `backend: { type: local, path: ./workspace }
roots:
  - path: /case
    mode: rw
    limits: { renames: 3 }
  - path: /scratch
    mode: rw
limits: { deletes: 500, bytesWritten: 64KiB }
`;

/** 20 directories of 100 files: 2,000 files, 2,021 nodes with the tree's own directory. */
function bigTree(): Record<string, string> {
  const out: Record<string, string> = { 'case/a.txt': 'a', 'case/b.txt': 'b', 'case/c.txt': 'c', 'case/d.txt': 'd', 'scratch/': '' };
  for (let d = 0; d < 20; d++) for (let i = 0; i < 100; i++) out[`case/tree/d${d}/f${i}.txt`] = `${d}/${i}\n`;
  return out;
}

/**
 * A tool run without blocking this process: every refusal is a warn line on the daemon's
 * stderr, which this process drains; a synchronous run of a tool that meets 1,500 refusals
 * would leave the pipe full and the daemon stuck writing to it.
 */
function runAsync(cmd: string, cwd: string, timeoutMs = 120_000): Promise<RunResult> {
  return new Promise((resolve) => {
    execFile('bash', ['-c', cmd], { cwd, encoding: 'utf8', timeout: timeoutMs, killSignal: 'SIGKILL', maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      const code = err ? ((err as { code?: unknown }).code ?? null) : 0;
      resolve({ status: typeof code === 'number' ? code : null, stdout, stderr });
    });
  });
}

function countNodes(dir: string): number {
  let n = 1;
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) n += e.isDirectory() ? countNodes(path.join(dir, e.name)) : 1;
  return n;
}

/** /.ledgerfs files are pinned to the text the kernel's last stat saw (attr timeout 1 s). */
async function readMeta(mnt: string, name: string): Promise<string> {
  await new Promise((r) => setTimeout(r, 1100));
  return sh(`cat .ledgerfs/${name}`, mnt);
}

describe('limits on a mounted session', () => {
  let m: TestMount;
  let dir: string;
  let ws: string;
  beforeAll(async () => {
    dir = makeTemp('guards-mount');
    ws = path.join(dir, 'workspace');
    putFiles(ws, bigTree());
    fs.writeFileSync(path.join(dir, 'case.yaml'), YAML);
    try {
      m = await startMount({ src: ws, omitSource: true, args: ['--policy', path.join(dir, 'case.yaml'), '--session', SESSION] });
    } catch (err) {
      rmTemp(dir);
      throw err;
    }
  }, 120_000);
  afterAll(async () => {
    try {
      await m?.stop();
    } finally {
      rmTemp(dir);
    }
  });

  it('stops rm -rf of a 2,000-file tree at exactly 500 deletes with EPERM, and says why', async () => {
    const before = countNodes(path.join(ws, 'case/tree'));
    expect(before).toBe(2021);
    const r = await runAsync('rm -rf case/tree', m.mnt, 300_000);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/Operation not permitted/);
    // exactly 500 names went from the backend (files, and the directories rm emptied first)
    expect(before - countNodes(path.join(ws, 'case/tree'))).toBe(500);
    const denials = (await readMeta(m.mnt, 'denials')).trimEnd().split('\n');
    expect(denials.at(-1)).toMatch(
      / (unlink|rmdir) \/case\/tree\/\S+ EPERM: (delete|remove directory) \/case\/tree\/\S+ refused: this session has 500 deleted files and directories, its limit \(limits\.deletes: 500\); to allow more, raise limits\.deletes in the mount file \(or set it to unlimited\) and mount again/,
    );
    const session = await readMeta(m.mnt, 'session');
    expect(session).toMatch(new RegExp(`^session: ${SESSION}\\nmode: live`));
    expect(session).toContain(`id=${SESSION} mode=live\n`);
    expect(session).toMatch(/\nsession deletes=500 limit_deletes=500 renames=0 bytes_written=0 limit_bytes_written=65536\n/);
    expect(session).toMatch(/\n\/case deletes=500 renames=0 limit_renames=3 bytes_written=0\n/);
  }, 320_000);

  it('refuses the fourth rename in /case with EPERM; /scratch has no rename limit', async () => {
    sh('mv case/a.txt case/a2.txt && mv case/b.txt case/b2.txt && mv case/c.txt case/c2.txt', m.mnt);
    const r = await runAsync('mv case/d.txt case/d2.txt', m.mnt);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/Operation not permitted/);
    expect(fs.existsSync(path.join(ws, 'case/d.txt'))).toBe(true);
    expect(fs.existsSync(path.join(ws, 'case/d2.txt'))).toBe(false);
    expect((await readMeta(m.mnt, 'denials')).trimEnd().split('\n').at(-1)).toMatch(
      /rename \/case\/d\.txt EPERM: rename \/case\/d\.txt to \/case\/d2\.txt refused: this session in \/case has 3 renames, its limit \(roots\[0\]\.limits\.renames: 3\); to allow more, raise roots\[0\]\.limits\.renames/,
    );
    sh('touch scratch/x && mv scratch/x scratch/y && mv scratch/y scratch/z && mv scratch/z scratch/w', m.mnt);
    expect(fs.existsSync(path.join(ws, 'scratch/w'))).toBe(true);
  });

  it('stops dd at 64 KiB written in the session with EDQUOT', async () => {
    const r = await runAsync('dd if=/dev/zero of=scratch/big bs=16K count=8 status=none', m.mnt);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/Disk quota exceeded/);
    expect(fs.statSync(path.join(ws, 'scratch/big')).size).toBe(64 * 1024);
    expect((await readMeta(m.mnt, 'denials')).trimEnd().split('\n').at(-1)).toMatch(
      /write \/scratch\/big EDQUOT: write to \/scratch\/big refused: this session has written 64 KiB, and 16 KiB more would pass its limit \(limits\.bytesWritten: 64 KiB\)/,
    );
    expect(await readMeta(m.mnt, 'session')).toMatch(/\nsession deletes=500 limit_deletes=500 renames=6 bytes_written=65536 limit_bytes_written=65536\n/);
  });
});

describe('limits count per session, across remounts', () => {
  it('a session remounted with --session goes on from its counts: rm -rf stops at 10 deletes in all (6 before a clean unmount, 2 before a SIGKILL, 2 after)', async () => {
    const d = makeTemp('guards-remount');
    const src = path.join(d, 'workspace');
    const files: Record<string, string> = {};
    for (let i = 0; i < 30; i++) files[`case/f${String(i).padStart(2, '0')}.txt`] = `${i}\n`;
    putFiles(src, files);
    fs.writeFileSync(path.join(d, 'case.yaml'), 'backend: { type: local, path: ./workspace }\nroots:\n  - path: /case\n    mode: rw\nlimits: { deletes: 10 }\n');
    const args = ['--policy', path.join(d, 'case.yaml'), '--session', 'remount-limits', '--state', path.join(d, 'state')];
    const left = () => fs.readdirSync(path.join(src, 'case')).length;
    let m: TestMount | undefined;
    try {
      m = await startMount({ src, omitSource: true, args });
      sh('rm case/f00.txt case/f01.txt case/f02.txt case/f03.txt case/f04.txt case/f05.txt', m.mnt);
      await m.stop();
      m = await startMount({ src, omitSource: true, args });
      sh('rm case/f06.txt case/f07.txt', m.mnt);
      // killed outright once the counts had their moment to be written
      await new Promise((r) => setTimeout(r, 1000));
      m.daemon.kill('SIGKILL');
      await m.stop().catch(() => undefined);
      m = await startMount({ src, omitSource: true, args });
      expect(left()).toBe(22);
      const r = await runAsync('rm -rf case', m.mnt);
      expect(r.status).not.toBe(0);
      expect(r.stderr).toMatch(/Operation not permitted/);
      expect(left(), 'the session deleted 10 files in all, over three mounts').toBe(20);
      expect((await readMeta(m.mnt, 'denials')).trimEnd().split('\n').at(-1)).toMatch(/refused: this session has 10 deleted files and directories, its limit \(limits\.deletes: 10\)/);
      expect(await readMeta(m.mnt, 'session')).toMatch(/\nsession deletes=10 limit_deletes=10 /);
    } finally {
      await m?.stop().catch(() => undefined);
      rmTemp(d);
    }
  }, 180_000);
});
