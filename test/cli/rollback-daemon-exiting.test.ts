import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLI } from '../helpers/mount.js';
import { openTestJournal, vfsFs } from '../helpers/journal.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/**
 * `ledgerfs unmount` returns once the kernel mount is gone; the daemon may still hold the journal
 * for a moment, its control socket already removed. A rollback run right then (unmount &&
 * rollback) waits for it to let go and rolls back directly, instead of dying on the socket.
 */
describe('rollback right after unmount, while the daemon is still exiting', () => {
  let dir: string;
  let src: string;
  let state: string;
  beforeEach(async () => {
    dir = makeTemp('cli-daemon-exiting');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    fs.mkdirSync(src);
    const j = await openTestJournal(src, state, 'exiting-1');
    await vfsFs.write(j.vfs, '/a.txt', 'one\n');
    await j.close();
  });
  afterEach(() => rmTemp(dir));

  it('waits for the exiting daemon to release the journal, then rolls back on the unmounted workspace', async () => {
    // the daemon's last moment: it holds the lock, daemon.json names it, its socket is gone
    const daemon = spawn('sleep', ['1.5'], { stdio: 'ignore' });
    const exited = new Promise((r) => daemon.once('exit', r));
    const pid = daemon.pid as number;
    fs.writeFileSync(path.join(state, 'lock'), JSON.stringify({ pid, role: 'mount /mnt/x', since: new Date().toISOString() }) + '\n');
    fs.writeFileSync(
      path.join(state, 'daemon.json'),
      JSON.stringify({ pid, socket: path.join(state, 'daemon.sock'), mountpoint: '/mnt/x', session: 'exiting-1', started: new Date().toISOString() }),
    );
    const p = spawn(process.execPath, [CLI, 'rollback', '--source', src, '--state', state, '--session', 'exiting-1'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((r) => p.once('exit', r));
    await exited;
    expect(out).not.toMatch(/DaemonUnreachableError|at file:/);
    expect(code, out).toBe(0);
    expect(out).toMatch(/Rolled back 1 mutation\(s\) \(on the unmounted workspace\)/);
    expect(fs.existsSync(path.join(src, 'a.txt'))).toBe(false);
    expect(spawnSync(process.execPath, [CLI, 'verify', '--state', state], { encoding: 'utf8' }).status).toBe(0);
  });
});
