import fs from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
// scripts/bench's own modules (plain .mjs; util.mjs reads dist/: npm run build first)
import { killAllLoadSync, startBackgroundLoad } from '../../scripts/bench-lib/load.mjs';
import { parseOptions } from '../../scripts/bench-lib/main.mjs';
import { cpuSeconds } from '../../scripts/bench-lib/util.mjs';

/*
 * Issue 17, "a loaded bench": scripts/bench --background-load N runs N busy neighbour processes
 * during every round and stops them, by PID, after it.
 */

function exists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

function statOf(pid: number): { ppid: number; nice: number } {
  const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
  return { ppid: Number(f[1]), nice: Number(f[16]) }; // fields 4 and 19
}

const started: number[] = [];
afterEach(() => {
  killAllLoadSync(); // a failed assertion must not leave spinners behind
  for (const pid of started.splice(0)) expect(exists(pid)).toBe(false);
});

describe('bench --background-load', () => {
  it('starts N spinning children that burn CPU, and stop() kills exactly those PIDs', async () => {
    const load = await startBackgroundLoad(2);
    started.push(...load.pids);
    expect(load.pids).toHaveLength(2);
    expect(new Set(load.pids).size).toBe(2);
    for (const pid of load.pids) {
      expect(exists(pid)).toBe(true);
      expect(statOf(pid)).toEqual({ ppid: process.pid, nice: 0 });
    }
    // busy, not sleeping: each one's CPU time grows (the host is shared, so wait up to 10 s)
    const c0 = load.pids.map((p: number) => cpuSeconds(p) as number);
    const deadline = Date.now() + 10_000;
    let grew: boolean[] = [];
    do {
      await new Promise((r) => setTimeout(r, 100));
      grew = load.pids.map((p: number, i: number) => (cpuSeconds(p) as number) - c0[i] >= 0.05);
    } while (!grew.every(Boolean) && Date.now() < deadline);
    expect(grew).toEqual([true, true]);
    expect(load.usage().busyCores).toBeGreaterThan(0);

    const pids = [...load.pids];
    await load.stop();
    for (const pid of pids) expect(exists(pid)).toBe(false); // reaped, not zombies
    expect(load.pids).toEqual([]);
    await load.stop(); // idempotent
  });

  it('N = 0 starts nothing', async () => {
    const load = await startBackgroundLoad(0);
    expect(load.pids).toEqual([]);
    await load.stop();
  });

  it('killAllLoadSync (the bench interrupted mid-round) kills the spinners still running', async () => {
    const load = await startBackgroundLoad(1);
    const [pid] = load.pids;
    started.push(pid);
    killAllLoadSync();
    const deadline = Date.now() + 5000;
    while (exists(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(exists(pid)).toBe(false);
  });
});

describe('bench options', () => {
  it('--background-load N parses to cfg.backgroundLoad; the default is no load', () => {
    expect(parseOptions(['--quick', '--background-load', '1']).cfg.backgroundLoad).toBe(1);
    expect(parseOptions(['--background-load=3', '--rounds', '5']).cfg).toMatchObject({ backgroundLoad: 3, rounds: 5 });
    expect(parseOptions([]).cfg.backgroundLoad).toBe(0);
  });

  it.each([['x'], ['-1'], ['1.5']])('--background-load %s is refused with a sentence naming the flag', (bad) => {
    expect(() => parseOptions([`--background-load=${bad}`])).toThrow(/--background-load wants an integer >= 0/);
  });

  it('an unknown flag or a missing value is refused, pointing at --help', () => {
    expect(() => parseOptions(['--background-load'])).toThrow(/--help/);
    expect(() => parseOptions(['--backgroundload', '1'])).toThrow(/--help/);
  });

  it('--help parses without a config', () => {
    expect(parseOptions(['--help'])).toMatchObject({ values: { help: true }, cfg: null });
  });
});
