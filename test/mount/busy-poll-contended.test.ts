import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { onGcs, startMount, TEST_BINDING } from '../helpers/mount.js';

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
// These pin --binding native-ll on the local store themselves, so the default pass is the one that
// means something: the later passes would measure the same thing again with pjdfstest running
// beside them, which is a neighbour of its own on CPU 0 (a CI failure at stop 26).
const repeatPass = onGcs || TEST_BINDING !== undefined;

describe.skipIf(!canPin || repeatPass)('native-ll busy-poll on a contended CPU', () => {
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

  it('keeps spinning on a quiet CPU where a neighbour wakes only now and then', { timeout: 180_000 }, async () => {
    // A 100 ms pause after every long yield made a kworker-like blip (1 ms every 20 ms on the
    // daemon's CPU) stop the spin most of the time: 2 such blips cost a 3,000-file stat loop 0.58x,
    // and here it caught under a fifth of the requests, every time. Other tests' processes on
    // CPU 0 are neighbours too, which the test cannot keep away, so it measures up to 3 times and
    // passes on the first that catches most: the old pause could not reach that in any.
    const seen: string[] = [];
    for (let attempt = 1; attempt <= 3; attempt++) {
      const { caught, total } = await quietCpuSpin();
      seen.push(`${caught} of ${total}`);
      if (caught > total * 0.5) return;
    }
    expect.fail(`the spin caught at most half the requests in 3 runs (${seen.join(', ')})`);
  });
});

/** One run: the caught and total requests of a 1.5 s stat loop beside a neighbour's 1 ms blips. */
async function quietCpuSpin(): Promise<{ caught: number; total: number }> {
  const m = await startMount({
    args: ['--binding', 'native-ll', '--attr-timeout', '0', '--entry-timeout', '0'],
    env: { LEDGERFS_NATIVE_STATS: '1' },
  });
  let neighbour: ChildProcess | undefined;
  try {
    fs.writeFileSync(path.join(m.mnt, 'f'), 'x');
    expect(spawnSync('taskset', ['-a', '-p', '-c', '0', String(m.daemon.pid)]).status).toBe(0);
    neighbour = spawn('taskset', ['-c', '0', process.execPath, '-e',
      'setInterval(() => { const end = process.hrtime.bigint() + 1000000n; while (process.hrtime.bigint() < end); }, 20)'],
    { stdio: 'ignore' });
    // the caller on CPU 1: one stat at a time, each a request (no attribute or entry cache)
    const r = spawnSync('taskset', ['-c', '1', process.execPath, '-e',
      `const fs = require('fs'); const t = Date.now(); let n = 0; while (Date.now() - t < 1500) { fs.statSync(${JSON.stringify(path.join(m.mnt, 'f'))}); n++; } console.log(n);`],
    { encoding: 'utf8', timeout: 60_000 });
    expect(Number(r.stdout), r.stderr).toBeGreaterThan(100);
  } finally {
    if (neighbour?.pid) process.kill(neighbour.pid, 'SIGKILL');
    await m.stop();
  }
  const logs = m.logs();
  const total = Number(/(\d+) requests in \d+ JS wake-ups/.exec(logs)?.[1] ?? NaN);
  const caught = Number(/spin: (\d+) requests caught/.exec(logs)?.[1] ?? NaN);
  expect(Number.isFinite(total) && Number.isFinite(caught), logs).toBe(true);
  return { caught, total };
}

