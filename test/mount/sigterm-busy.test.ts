import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startMount, type TestMount } from '../helpers/mount.js';
import { mountAt } from '../../src/fuse/mounts.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(cond: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await sleep(50);
  return cond();
}

describe('SIGTERM on a busy mount names the holders and keeps serving; a second one detaches lazily (issue 16.5)', () => {
  let m: TestMount | undefined;
  const holders: ChildProcess[] = [];
  afterEach(async () => {
    for (const h of holders.splice(0)) h.kill('SIGKILL');
    await m?.stop().catch(() => undefined);
    m = undefined;
  });

  it('a cwd inside and a file held open: one SIGTERM unmounts nothing and names them; a second detaches lazily (exit 130)', async () => {
    m = await startMount({ populate: (src) => fs.writeFileSync(path.join(src, 'held.txt'), 'held\n') });
    const mnt = m.mnt;
    // a shell whose working directory is in the mount, and one holding a file of it open
    const inCwd = spawn('sleep', ['1001'], { cwd: mnt, stdio: 'ignore' });
    const withFile = spawn('sh', ['-c', `exec 3<"${mnt}/held.txt"; exec sleep 1002`], { stdio: 'ignore' });
    holders.push(inCwd, withFile);
    await until(() => {
      try {
        return fs.readlinkSync(`/proc/${withFile.pid}/fd/3`) === `${mnt}/held.txt`;
      } catch {
        return false;
      }
    }, 5000);

    await until(() => m!.logs().includes('  stop:'), 5000); // signal handlers are in place after the banner
    m.daemon.kill('SIGTERM');
    expect(await until(() => m!.logs().includes('is in use by pid'), 5000)).toBe(true);
    await sleep(6000); // past the old grace (5 s), after which it used to detach and exit 0
    expect(m.alive()).toBe(true);
    expect(mountAt(mnt)?.fstype).toBe('fuse.ledgerfs');
    expect(fs.readFileSync(path.join(mnt, 'held.txt'), 'utf8')).toBe('held\n'); // still serving
    const line = m.logs().split('\n').find((l) => l.startsWith('ledgerfs: ') && l.includes('is in use by pid')) ?? '';
    expect(line).toContain(`${inCwd.pid} (sleep 1001: cwd)`);
    expect(line).toContain(`${withFile.pid} (sleep 1002: ${mnt}/held.txt)`);
    expect(line).toContain('send a second SIGTERM/SIGINT now to detach it lazily');

    const exited = new Promise<number | null>((r) => m!.daemon.once('exit', (code) => r(code)));
    m.daemon.kill('SIGTERM');
    expect(await Promise.race([exited, sleep(15_000).then(() => 'timeout')])).toBe(130);
    expect(mountAt(mnt)).toBeUndefined();
  });

  it('idle: one SIGTERM unmounts and exits 0', async () => {
    m = await startMount();
    await until(() => m!.logs().includes('  stop:'), 5000);
    const exited = new Promise<number | null>((r) => m!.daemon.once('exit', (code) => r(code)));
    m.daemon.kill('SIGTERM');
    expect(await Promise.race([exited, sleep(15_000).then(() => 'timeout')])).toBe(0);
    expect(mountAt(m.mnt)).toBeUndefined();
    expect(m.logs()).not.toContain('is in use by pid');
  });
});
