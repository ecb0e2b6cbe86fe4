import { type ChildProcess, spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { constants as C } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { buildHistory } from '../../src/journal/history.js';
import { readJournal } from '../../src/journal/reader.js';
import { CLI } from '../helpers/mount.js';
import { openTestJournal, vfsFs } from '../helpers/journal.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { snapshotTree } from '../helpers/tree.js';

// SIGKILL `ledgerfs rollback` (the real CLI, a child process, on an unmounted workspace) at a
// random moment, run it again: the tree ends as the target byte for byte, and the re-run never
// says "Nothing to roll back" over a half-restored tree (issue 13.2, 13.7). The bar is 20
// rounds each of a 200 MiB file and 10,000 files: scripts/rollback-kill-rounds runs that
// (LEDGERFS_KILL_ROUNDS, LEDGERFS_KILL_MIB, LEDGERFS_KILL_FILES); the suite runs fewer, smaller.

const ROUNDS = Number(process.env.LEDGERFS_KILL_ROUNDS ?? 2);
const MIB = Number(process.env.LEDGERFS_KILL_MIB ?? 24);
const FILES = Number(process.env.LEDGERFS_KILL_FILES ?? 300);
const STATS = process.env.LEDGERFS_KILL_STATS === '1';
/** each round's numbers are appended here as they come (a long run can be read while it runs) */
const STATS_FILE = process.env.LEDGERFS_KILL_STATS_FILE;
const note = (line: Record<string, unknown>) => {
  if (STATS_FILE) fs.appendFileSync(STATS_FILE, JSON.stringify({ time: new Date().toISOString(), ...line }) + '\n');
};

interface Outcome {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** Bytes of the journal's segments now (to look only at what a run appends after this). */
function journalSize(state: string): Map<string, number> {
  const dir = path.join(state, 'journal');
  const out = new Map<string, number>();
  for (const n of fs.existsSync(dir) ? fs.readdirSync(dir) : []) {
    // the writer's temporary files (writing.json.tmp) come and go while we look
    const st = fs.statSync(path.join(dir, n), { throwIfNoEntry: false });
    if (st) out.set(n, st.size);
  }
  return out;
}

/** Has a rollback begun changing things (an undo mutation journaled) since `mark`? */
function undoSince(state: string, mark: Map<string, number>): boolean {
  const dir = path.join(state, 'journal');
  for (const [n, size] of journalSize(state)) {
    const from = mark.get(n) ?? 0;
    if (size <= from) continue;
    let fd: number;
    try {
      fd = fs.openSync(path.join(dir, n), 'r');
    } catch {
      continue; // gone since it was listed (a temporary file)
    }
    try {
      const buf = Buffer.alloc(size - from);
      fs.readSync(fd, buf, 0, buf.length, from);
      if (buf.includes('"undoes":')) return true;
    } finally {
      fs.closeSync(fd);
    }
  }
  return false;
}

/**
 * Run the CLI; with `killAfterMs`, SIGKILL it that long after its rollback journaled its first
 * undo mutation (so the kill lands in the restore, not in node's start-up). `restoreMs`: from
 * then to its exit.
 */
function runCli(args: string[], state: string, killAfterMs?: number): Promise<Outcome & { restoreMs: number | null }> {
  const t0 = Date.now();
  const mark = journalSize(state);
  const child: ChildProcess = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  let intentAt: number | null = null;
  child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  let killTimer: NodeJS.Timeout | null = null;
  const poll = setInterval(() => {
    if (intentAt !== null || !undoSince(state, mark)) return;
    intentAt = Date.now();
    if (killAfterMs !== undefined) killTimer = setTimeout(() => child.kill('SIGKILL'), killAfterMs);
  }, 5);
  return new Promise((resolve) =>
    child.on('close', (code, signal) => {
      clearInterval(poll);
      if (killTimer) clearTimeout(killTimer);
      const end = Date.now();
      resolve({ code, signal, stdout, stderr, ms: end - t0, restoreMs: intentAt === null ? null : end - intentAt });
    }),
  );
}

/** 1 MiB blocks of one random block, each stamped with its index: misplaced or zeroed blocks show. */
function patterned(mib: number, seed: Buffer): Buffer {
  const out = Buffer.alloc(mib << 20);
  for (let k = 0; k < mib; k++) {
    seed.copy(out, k << 20);
    out.writeUInt32LE(k, k << 20);
  }
  return out;
}

const sha = (b: Buffer) => crypto.createHash('sha256').update(b).digest('hex');

describe('rollback killed at random moments, run again', () => {
  let dir: string;
  let src: string;
  let state: string;
  const stats: Record<string, unknown>[] = [];
  beforeEach(() => {
    dir = makeTemp('rollback-kill');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    fs.mkdirSync(src);
  });
  afterEach(() => {
    rmTemp(dir);
    if (STATS && stats.length) console.log(JSON.stringify(stats.splice(0)));
  }, 300_000);

  /**
   * One round: a kill at a random moment within `estMs` of the start, then at most one more kill,
   * then a run to the end. Returns what happened; checks the tree with `check`.
   */
  async function killAndFinish(args: string[], estMs: number, check: () => void, isTarget: () => boolean) {
    let kills = 0;
    let cutShort = 0;
    let finalMs = 0;
    for (let attempt = 0; ; attempt++) {
      const killAt = attempt < 2 ? Math.floor(Math.random() * estMs) : undefined;
      const r = await runCli(args, state, killAt);
      if (r.signal === 'SIGKILL') {
        kills++;
        const h = buildHistory(readJournal(state).records);
        if ([...(h.rollbacks?.values() ?? [])].some((run) => run.end === undefined)) cutShort++;
        continue;
      }
      // the kill's leftovers are resolved at start and said so; nothing else on stderr
      const other = r.stderr.split('\n').filter((l) => l && !/recovered after a crash|cut a torn record/.test(l));
      expect(other).toEqual([]);
      // "Nothing to roll back" only ever over the target itself
      if (/Nothing to roll back/.test(r.stdout)) expect(isTarget()).toBe(true);
      expect(r.code, r.stdout).toBe(0);
      finalMs = r.restoreMs ?? r.ms;
      break;
    }
    check();
    // and once done, done: a further run has nothing left
    const again = await runCli(args, state);
    if (process.env.LEDGERFS_KILL_KEEP && /cut short|stopped after/.test(again.stdout)) {
      fs.cpSync(state, process.env.LEDGERFS_KILL_KEEP, { recursive: true });
      fs.writeFileSync(`${process.env.LEDGERFS_KILL_KEEP}/again.txt`, again.stdout);
    }
    expect(again.stdout).toMatch(/Nothing to roll back|already undone/);
    expect(again.stdout).not.toMatch(/cut short|stopped after/);
    return { kills, cutShort, finalMs };
  }

  it(`a ${MIB} MiB restore, ${ROUNDS} round(s)`, async () => {
    const target = patterned(MIB, crypto.randomBytes(1 << 20));
    const want = sha(target);
    let est = 200;
    for (let round = 0; round < ROUNDS; round++) {
      fs.rmSync(state, { recursive: true, force: true });
      const file = path.join(src, 'big.bin');
      fs.writeFileSync(file, target);
      const j = await openTestJournal(src, state, `round-${round}`);
      // the session overwrites it all (the before-image is the whole file) and grows it
      const other = patterned(MIB + 3, crypto.randomBytes(1 << 20));
      await vfsFs.write(j.vfs, '/big.bin', other, C.O_WRONLY, 0);
      await j.close();
      const isTarget = () => fs.statSync(file).size === target.length && sha(fs.readFileSync(file)) === want;
      const r = await killAndFinish(['rollback', '--state', state, '--source', src, '--to', '0'], est, () => {
        const got = fs.readFileSync(file);
        expect(got.length).toBe(target.length);
        expect(sha(got)).toBe(want);
      }, isTarget);
      est = Math.max(50, r.finalMs);
      stats.push({ scenario: 'big', round, ...r });
      note({ scenario: 'big', mib: MIB, round, ...r });
    }
  }, 30_000 + ROUNDS * MIB * 600);

  it(`a ${FILES}-file rollback, ${ROUNDS} round(s)`, async () => {
    let est = 200;
    for (let round = 0; round < ROUNDS; round++) {
      // a fresh tree and journal each round (rounds stay alike however many there are)
      for (const p of [src, state]) fs.rmSync(p, { recursive: true, force: true });
      for (let i = 0; i < FILES; i++) {
        const d = path.join(src, `d${i % 20}`);
        fs.mkdirSync(d, { recursive: true });
        fs.writeFileSync(path.join(d, `f${i}.txt`), `original ${i}\n`);
      }
      const target = snapshotTree(src);
      const j = await openTestJournal(src, state, `round-${round}`);
      // creates, overwrites, removals and renames, spread over the tree
      for (let i = 0; i < FILES; i++) {
        const p = `/d${i % 20}/f${i}.txt`;
        switch (i % 4) {
          case 0: await vfsFs.write(j.vfs, `/d${i % 20}/new${i}.txt`, `new ${i} of round ${round}`); break;
          case 1: await vfsFs.write(j.vfs, p, `changed in round ${round}`, C.O_WRONLY | C.O_TRUNC); break;
          case 2: await j.vfs.unlink(p); break;
          case 3: await j.vfs.rename(p, `/d${(i + 1) % 20}/moved${i}.txt`); break;
        }
      }
      await j.close();
      const isTarget = () => JSON.stringify(snapshotTree(src)) === JSON.stringify(target);
      const r = await killAndFinish(['rollback', '--state', state, '--source', src, '--session', `round-${round}`], est, () => {
        expect(snapshotTree(src)).toEqual(target);
      }, isTarget);
      est = Math.max(50, r.finalMs);
      stats.push({ scenario: 'files', round, ...r });
      note({ scenario: 'files', files: FILES, round, ...r });
    }
  }, 60_000 + ROUNDS * FILES * 20);
});
