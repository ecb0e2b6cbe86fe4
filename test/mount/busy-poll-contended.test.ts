import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import os from 'node:os';
import { describe, expect, it } from 'vitest';
import { startMount } from '../helpers/mount.js';

/*
 * Issue 17 (a loaded bench): the native-ll busy-poll gives up on a contended CPU. A spinning
 * daemon is runnable, so when it yields to a neighbour process on its CPU, the caller's next
 * request waits for that neighbour's time slice; asleep in epoll, the daemon would be woken and
 * run at once. Measured with the daemon and a spinning neighbour on one CPU and the caller on the
 * other (2,000 creates): 80-135 s spinning as before, 13-35 s giving up (a host loaded by other
 * engineers too). Here the daemon and the neighbour share CPU 0, the caller runs on CPU 1.
 */
const hasTaskset = spawnSync('taskset', ['--version']).status === 0;
const canPin = hasTaskset && os.cpus().length >= 2;

describe.skipIf(!canPin)('native-ll busy-poll on a contended CPU', () => {
  it('stops spinning when a neighbour holds its CPU, and serves by wake-ups instead', { timeout: 180_000 }, async () => {
    const m = await startMount({ args: ['--binding', 'native-ll'], env: { LEDGERFS_NATIVE_STATS: '1' } });
    let neighbour: ChildProcess | undefined;
    try {
      const pid = m.daemon.pid as number;
      // every thread of the daemon (the JS thread serves the session) on CPU 0
      expect(spawnSync('taskset', ['-a', '-p', '-c', '0', String(pid)]).status).toBe(0);
      neighbour = spawn('taskset', ['-c', '0', process.execPath, '-e', 'for (;;) {}'], { stdio: 'ignore' });
      // the caller on CPU 1: a shell creating files one request at a time (what busy-poll is for)
      const r = spawnSync('taskset', ['-c', '1', 'sh', '-c', 'mkdir s && for i in $(seq 1 200); do echo $i > s/f$i; done && cat s/f200'],
        { cwd: m.mnt, encoding: 'utf8', timeout: 150_000 });
      expect(r.stdout, r.stderr).toBe('200\n');
    } finally {
      // by PID: taskset exec()s node, so this is the spinner itself
      if (neighbour?.pid) process.kill(neighbour.pid, 'SIGKILL');
      await m.stop();
    }
    const logs = m.logs();
    const total = Number(/(\d+) requests in \d+ JS wake-ups/.exec(logs)?.[1] ?? NaN);
    const spin = /spin: (\d+) requests caught in \d+ spins, \d+ spins ran out/.exec(logs);
    expect(spin, logs).not.toBeNull();
    // spinning on, as before, caught a third or more of the requests (each after a neighbour's slice)
    expect(Number(spin?.[1]), logs).toBeLessThan(total * 0.1);
    expect(Number(/(\d+) given up on a contended CPU/.exec(logs)?.[1] ?? 0), logs).toBeGreaterThan(0);
  });
});
