// --background-load N: N other processes that keep a core busy each during every measured round,
// for every column alike. Agent hosts are busy; a FUSE daemon that looks fast on an idle machine
// may lose once a neighbour takes a core (its busy-poll, its wake-ups and the caller now compete
// for what is left). Each spinner is a plain child process at nice 0, like a real neighbour, not
// pinned to a CPU, started before a round and killed by PID after it.
import { spawn } from 'node:child_process';
import os from 'node:os';
import { BenchError, cpuSeconds, pidAlive, sleep } from './util.mjs';

// Says it is running (so a round does not start before the load does), then spins until killed.
const SPIN = "process.stdout.write('spinning\\n'); for (;;) {}";

/** Spinners not yet stopped: an interrupted bench kills these (killAllLoadSync) before it exits. */
const live = new Set();

/** Start `n` spinning children; resolves once every one of them is running its loop. */
export async function startBackgroundLoad(n) {
  const children = [];
  const load = {
    n,
    pids: [],
    startedAt: process.hrtime.bigint(),
    cpu0: [],
    /** CPU seconds the spinners got since start, and the wall seconds, so a report can show the load was real. */
    usage() {
      const wall = Number(process.hrtime.bigint() - this.startedAt) / 1e9;
      const cpu = this.pids.reduce((a, pid, i) => a + Math.max(0, (cpuSeconds(pid) ?? 0) - this.cpu0[i]), 0);
      return { cpuSeconds: cpu, wallSeconds: wall, busyCores: wall > 0 ? cpu / wall : 0 };
    },
    /** Kill every spinner by its PID and wait until each has exited. Idempotent. */
    async stop() {
      await Promise.all(children.map((c) => stopChild(c)));
      this.pids = [];
      children.length = 0;
    },
  };
  try {
    for (let i = 0; i < n; i++) {
      const child = spawn(process.execPath, ['-e', SPIN], { stdio: ['ignore', 'pipe', 'ignore'] });
      children.push(child);
      live.add(child);
      child.exitP = new Promise((r) => child.once('exit', r));
      await new Promise((resolve, reject) => {
        child.once('error', reject);
        child.once('exit', (code, sig) => reject(new BenchError(`--background-load: a spinner ended before it started (${sig ?? `exit ${code}`})`)));
        child.stdout.once('data', resolve);
      });
      // A real neighbour runs at the default priority, whatever niceness the bench itself has
      // (raising priority back to 0 needs root; without it the spinner keeps the bench's).
      try {
        os.setPriority(child.pid, 0);
      } catch {
        /* not root and the bench is niced */
      }
      load.pids.push(child.pid);
    }
  } catch (err) {
    await load.stop();
    throw err;
  }
  load.startedAt = process.hrtime.bigint();
  load.cpu0 = load.pids.map((pid) => cpuSeconds(pid) ?? 0);
  return load;
}

async function stopChild(child) {
  if (child.exitCode === null && child.signalCode === null && pidAlive(child.pid)) {
    try {
      process.kill(child.pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }
  await Promise.race([child.exitP, sleep(5000)]);
  live.delete(child);
}

/** Last resort on a signal or exit: SIGKILL every spinner still running, by PID. */
export function killAllLoadSync() {
  for (const child of live) {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        process.kill(child.pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
  }
  live.clear();
}

/** No load: the same interface, so the round loop needs no special case. */
export const NO_LOAD = {
  n: 0,
  pids: [],
  usage: () => ({ cpuSeconds: 0, wallSeconds: 0, busyCores: 0 }),
  stop: async () => {},
};
