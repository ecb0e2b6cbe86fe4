import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLI, onGcs, sh, type TestMount } from '../helpers/mount.js';
import { startJournaledMount, type JournaledMount } from '../helpers/journaled-mount.js';

/*
 * Times as seconds and nanoseconds end to end on the local backend: before 1970, after 2262
 * (where a 64-bit nanosecond count ends), to the nanosecond, through set, stat, journal and
 * rollback. The source is on tmpfs, which keeps any 64-bit second (ext4 stops at 1901-12-13).
 */

const SHM = '/dev/shm';
const ns = (iso: string, nanos: bigint): bigint => BigInt(Date.parse(`${iso}Z`) / 1000) * 1_000_000_000n + nanos;

// before the mount (the states a rollback must bring back) and what the mount sets
const BEFORE = {
  a: { iso: '1960-06-01 12:00:00.111111111', ns: ns('1960-06-01T12:00:00', 111_111_111n) }, // pre-1970 before-state
  b: { iso: '2020-01-01 00:00:00.500000001', ns: ns('2020-01-01T00:00:00', 500_000_001n) },
  c: { iso: '2300-06-01 00:00:00.222222222', ns: ns('2300-06-01T00:00:00', 222_222_222n) }, // past 2262 before-state
};
const SET = {
  a: { iso: '1900-01-01 00:00:00.123456789', ns: ns('1900-01-01T00:00:00', 123_456_789n) },
  b: { iso: '1969-12-31 23:59:59.987654321', ns: ns('1969-12-31T23:59:59', 987_654_321n) },
  c: { iso: '2300-01-01 00:00:00.000000001', ns: ns('2300-01-01T00:00:00', 1n) },
};
type Name = keyof typeof BEFORE;
const NAMES: Name[] = ['a', 'b', 'c'];

function ledgerfs(m: TestMount, args: string[]): string {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: { ...process.env, ...m.env }, timeout: 60_000 });
  if (r.status !== 0) throw new Error(`ledgerfs ${args.join(' ')} exited ${r.status}\n${r.stderr}\n${r.stdout}`);
  return r.stdout;
}

const times = (p: string) => {
  const st = fs.lstatSync(p, { bigint: true });
  return { atimeNs: st.atimeNs, mtimeNs: st.mtimeNs };
};

describe.skipIf(onGcs || !fs.existsSync(SHM))('mount: times before 1970 and after 2262, to the nanosecond (local backend)', () => {
  let j: JournaledMount;
  let m: TestMount;
  let src: string;
  beforeEach(async () => {
    src = fs.mkdtempSync(path.join(SHM, 'ledgerfs-times-'));
    for (const n of NAMES) {
      fs.writeFileSync(path.join(src, n), n);
      // Node's utimes takes seconds as a double: set the exact before-states with touch
      sh(`touch -d '${BEFORE[n].iso}Z' ${n}`, src);
    }
    j = await startJournaledMount('times-run', { src });
    m = j.m;
  });
  afterEach(async () => {
    try {
      expect(await j.finish(), 'the daemon logged errors').toEqual([]);
    } finally {
      fs.rmSync(src, { recursive: true, force: true });
    }
  });

  it('set, stat, journal and rollback keep 1900, 1969 and 2300 exactly', () => {
    for (const n of NAMES) expect(times(path.join(m.mnt, n)), `before ${n}`).toEqual({ atimeNs: BEFORE[n].ns, mtimeNs: BEFORE[n].ns });
    for (const n of NAMES) sh(`touch -d '${SET[n].iso}Z' ${n}`, m.mnt);
    for (const n of NAMES) {
      expect(times(path.join(m.mnt, n)), `${n} through the mount`).toEqual({ atimeNs: SET[n].ns, mtimeNs: SET[n].ns });
      expect(times(path.join(src, n)), `${n} in the store`).toEqual({ atimeNs: SET[n].ns, mtimeNs: SET[n].ns });
    }
    expect(sh('TZ=UTC stat -c %y a b c', m.mnt)).toBe(
      '1900-01-01 00:00:00.123456789 +0000\n1969-12-31 23:59:59.987654321 +0000\n2300-01-01 00:00:00.000000001 +0000\n',
    );
    // only the atime, then only the mtime: the other is left as it is
    sh(`touch -a -d '1969-07-20 20:17:40.5Z' b && touch -m -d '${SET.b.iso}Z' b`, m.mnt);
    expect(times(path.join(m.mnt, 'b'))).toEqual({ atimeNs: ns('1969-07-20T20:17:40', 500_000_000n), mtimeNs: SET.b.ns });

    // every record is a good one (a pre-1970 time made the reader take it for a torn line)
    const log = JSON.parse(ledgerfs(m, ['log', '--state', j.state, '--json'])) as { op: string; status: string }[];
    expect(log.filter((e) => e.op === 'utimens' && e.status === 'done').length).toBe(5);
    expect(ledgerfs(m, ['verify', '--state', j.state])).toMatch(/^clean$/m);

    ledgerfs(m, ['rollback', '--state', j.state, '--session', 'times-run']);
    for (const n of NAMES) {
      expect(times(path.join(m.mnt, n)), `${n} rolled back, through the mount`).toEqual({ atimeNs: BEFORE[n].ns, mtimeNs: BEFORE[n].ns });
      expect(times(path.join(src, n)), `${n} rolled back, in the store`).toEqual({ atimeNs: BEFORE[n].ns, mtimeNs: BEFORE[n].ns });
    }
    expect(ledgerfs(m, ['verify', '--state', j.state])).toMatch(/^clean$/m);
  });

  it('a file dated 1960 that was deleted comes back by rollback, with its times', () => {
    sh('rm a', m.mnt);
    expect(ledgerfs(m, ['verify', '--state', j.state])).toMatch(/^clean$/m);
    ledgerfs(m, ['rollback', '--state', j.state, '--session', 'times-run']);
    expect(fs.readFileSync(path.join(m.mnt, 'a'), 'utf8')).toBe('a');
    expect(times(path.join(src, 'a')).mtimeNs).toBe(BEFORE.a.ns);
  });

  it('touch (now) keeps the kernel clock to the nanosecond, not to the millisecond', () => {
    sh('touch a b c', m.mnt);
    const sub = NAMES.map((n) => times(path.join(src, n)).mtimeNs % 1_000_000n);
    // one of three "now"s a whole millisecond by chance: one in a million, cubed
    expect(sub.some((r) => r !== 0n), `sub-millisecond parts ${sub.join(', ')}`).toBe(true);
  });
});
