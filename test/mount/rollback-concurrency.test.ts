import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLI, onGcs } from '../helpers/mount.js';
import { startJournaledMount, type JournaledMount } from '../helpers/journaled-mount.js';
import { snapshotTree } from '../helpers/tree.js';

// Issue 13.7: parallel renames with writes made rollback of the session stop halfway on false
// conflicts (5 of 6 runs); --force restored exactly. Several writers and renamers on one mount,
// then a rollback of the session through the daemon: no conflict, the tree as it was.

const WRITERS = 3;
const RENAMERS = 3;
const SECONDS = Number(process.env.LEDGERFS_RACE_SECONDS ?? 3);

const populate = (src: string) => {
  for (let d = 0; d < 4; d++) {
    fs.mkdirSync(path.join(src, `dir${d}`), { recursive: true });
    for (let f = 0; f < 6; f++) fs.writeFileSync(path.join(src, `dir${d}`, `f${f}.txt`), `original ${d}/${f}\n`.repeat(20));
  }
};

// a writer rewrites, appends to and creates files in a loop; a renamer moves files between
// directories (and back) and renames whole directories; errors from the race (ENOENT after a
// move) are expected and ignored
const writer = `
import os, random, sys, time
random.seed(int(sys.argv[1])); end = time.time() + float(sys.argv[2])
while time.time() < end:
    d = random.randrange(4); f = random.randrange(8)
    p = f"dir{d}/f{f}.txt"
    try:
        k = random.randrange(3)
        if k == 0:
            with open(p, "w") as fh: fh.write(f"rewritten by {sys.argv[1]} {time.time()}\\n" * random.randrange(1, 40))
        elif k == 1:
            with open(p, "a") as fh: fh.write("appended\\n")
        else:
            with open(p, "r+") as fh: fh.seek(3); fh.write("XY")
    except OSError:
        pass
`;
const renamer = `
import os, random, sys, time
random.seed(int(sys.argv[1])); end = time.time() + float(sys.argv[2])
while time.time() < end:
    try:
        k = random.randrange(4)
        if k == 3:
            a, b = random.sample(range(4), 2)
            os.rename(f"dir{a}", f"tmpdir{sys.argv[1]}"); os.rename(f"tmpdir{sys.argv[1]}", f"dir{a}")
        else:
            a, b = random.randrange(4), random.randrange(4)
            f, g = random.randrange(8), random.randrange(8)
            os.rename(f"dir{a}/f{f}.txt", f"dir{b}/f{g}.txt")
    except OSError:
        pass
`;

function runPy(code: string, cwd: string, args: string[]): Promise<number | null> {
  const child = spawn('python3', ['-c', code, ...args], { cwd, stdio: 'ignore' });
  return new Promise((resolve) => child.on('close', (c) => resolve(c)));
}

// Local backend only: on GCS a rename is a copy and a delete, so renaming a file another process
// is writing makes that writer's close find a newer generation and keep its bytes in conflicts/
// (README, GCS semantics) — a conflict by design there, not the journal race this test is about.
describe.skipIf(onGcs)('mount: rollback after parallel renames and writes', () => {
  let j: JournaledMount;
  beforeEach(async () => {
    j = await startJournaledMount('race', { populate, args: ['--attr-timeout', '0.2', '--entry-timeout', '0.2'] });
  });
  afterEach(async () => {
    expect(await j.finish(), 'the daemon logged errors').toEqual([]);
  });

  it('rolls the session back completely, without false conflicts', async () => {
    const { m, state } = j;
    const initial = snapshotTree(m.src);
    const procs: Promise<number | null>[] = [];
    for (let i = 0; i < WRITERS; i++) procs.push(runPy(writer, m.mnt, [String(i + 1), String(SECONDS)]));
    for (let i = 0; i < RENAMERS; i++) procs.push(runPy(renamer, m.mnt, [String(100 + i), String(SECONDS)]));
    expect(await Promise.all(procs)).toEqual(procs.map(() => 0));
    expect(snapshotTree(m.src)).not.toEqual(initial);

    const r = spawnSync(process.execPath, [CLI, 'rollback', '--state', state, '--session', 'race', '--json'], { encoding: 'utf8', maxBuffer: 64 << 20, env: { ...process.env, ...m.env } });
    const result = JSON.parse(r.stdout) as { planned: unknown[]; undone: number; conflicts: unknown[]; complete: boolean };
    expect(result.conflicts).toEqual([]);
    expect(result.complete).toBe(true);
    expect(r.status).toBe(0);
    expect(result.planned.length).toBeGreaterThan(50);
    expect(snapshotTree(m.src)).toEqual(initial);
  }, 120_000);
});
