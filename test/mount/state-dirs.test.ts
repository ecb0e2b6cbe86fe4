import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CLI, onGcs, startMount, type TestMount } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * Issue 16: `ledgerfs state list|prune` over the default state root (XDG_STATE_HOME here), with
 * real mounts making the directories: prune removes an old unmounted one and never a mounted
 * one, however old, and leaves what is not a state directory alone.
 */

interface Row { dir: string; source: string | null; policy: string | null; bytes: number; sessions: number | null; lastUsed: string; mounted: { mountpoint: string; pid: number | null } | null }

const DAY = 86_400_000;

function age(dir: string, ms: number): void {
  const t = new Date(Date.now() - ms);
  const walk = (p: string) => {
    if (fs.lstatSync(p).isDirectory()) for (const n of fs.readdirSync(p)) walk(path.join(p, n));
    fs.utimesSync(p, t, t);
  };
  walk(dir);
}

/** the newest mtime under `dir` */
function newest(dir: string): number {
  let t = fs.lstatSync(dir).mtimeMs;
  if (fs.lstatSync(dir).isDirectory()) for (const n of fs.readdirSync(dir)) t = Math.max(t, newest(path.join(dir, n)));
  return t;
}

/**
 * Wait until a live mount's state directory stops changing: its journal's first records reach
 * the disk a moment after the mount answers, which on a loaded machine can come after the test
 * has aged the directory (and then it counts as used today, not as old and mounted).
 */
async function settled(dir: string): Promise<void> {
  let last = newest(dir);
  for (const end = Date.now() + 10_000; Date.now() < end; ) {
    await new Promise((r) => setTimeout(r, 150));
    const now = newest(dir);
    if (now === last) return;
    last = now;
  }
}

describe.skipIf(onGcs)('ledgerfs state list|prune', () => {
  let root: string | undefined;
  const mounts: TestMount[] = [];
  afterEach(async () => {
    for (const m of mounts.splice(0)) await m.stop().catch(() => undefined);
    rmTemp(root);
  });

  it('lists source, size, sessions, last use and mounted; prune removes the old unmounted one only, --dry-run removes nothing', async () => {
    root = makeTemp('state-root');
    const env = { ...process.env, XDG_STATE_HOME: root };
    const cli = (args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env });
    const stateRoot = path.join(root, 'ledgerfs');

    const a = await startMount({ env, populate: (s) => fs.writeFileSync(path.join(s, 'f'), 'x') });
    fs.writeFileSync(path.join(a.mnt, 'g'), 'made through the mount\n');
    const aSrc = fs.realpathSync(a.src);
    await a.stop();
    const b = await startMount({ env });
    mounts.push(b);
    const dirs = fs.readdirSync(stateRoot).map((n) => path.join(stateRoot, n));
    expect(dirs).toHaveLength(2);
    const aDir = dirs.find((d) => path.basename(d).startsWith('src-') && JSON.parse(fs.readFileSync(path.join(d, 'workspace.json'), 'utf8')).source === aSrc) as string;
    const bDir = dirs.find((d) => d !== aDir) as string;
    fs.mkdirSync(path.join(stateRoot, 'not-a-state-dir'));
    fs.writeFileSync(path.join(stateRoot, 'not-a-state-dir', 'keep'), 'mine');
    // both unused for 40 days, as far as times go; b is still mounted
    await settled(bDir);
    age(aDir, 40 * DAY);
    age(bDir, 40 * DAY);
    age(path.join(stateRoot, 'not-a-state-dir'), 40 * DAY);

    const list = cli(['state', 'list', '--json']);
    expect(list.status, list.stderr).toBe(0);
    const rows = JSON.parse(list.stdout) as Row[];
    expect(rows.map((r) => r.dir).sort()).toEqual([aDir, bDir].sort());
    const ra = rows.find((r) => r.dir === aDir) as Row;
    const rb = rows.find((r) => r.dir === bDir) as Row;
    expect(ra).toMatchObject({ source: aSrc, policy: null, sessions: 1, mounted: null });
    expect(ra.bytes).toBeGreaterThan(0);
    expect(Date.now() - Date.parse(ra.lastUsed)).toBeGreaterThan(39 * DAY);
    expect(ra.lastUsed).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
    expect(rb.mounted).toEqual({ mountpoint: b.mnt, pid: b.daemon.pid });
    const text = cli(['state', 'list']).stdout;
    expect(text).toContain(`${aDir}\n  source ${aSrc}\n`);
    expect(text).toMatch(/1 session, last used .* \(40 days ago\); not mounted/);
    expect(text).toContain(`mounted at ${b.mnt} (pid ${b.daemon.pid})`);

    const dry = cli(['state', 'prune', '--older-than', '30d', '--dry-run', '--json']);
    expect(dry.status, dry.stderr).toBe(0);
    const d = JSON.parse(dry.stdout) as { removed: Row[]; kept: Array<Row & { why: string }> };
    expect(d.removed.map((r) => r.dir)).toEqual([aDir]);
    expect(d.kept.map((r) => [r.dir, r.why])).toEqual([[bDir, `mounted at ${b.mnt} (pid ${b.daemon.pid})`]]);
    expect(fs.existsSync(aDir)).toBe(true);

    // not old enough for a week's cutoff... then old enough
    expect(cli(['state', 'prune', '--older-than', '60d']).stdout).toMatch(/^Removed 0 state directories .*; 2 used since, 0 kept in use\.\n$/);
    const real = cli(['state', 'prune', '--older-than', '30d']);
    expect(real.status, real.stderr).toBe(0);
    expect(real.stdout).toContain(`removed ${aDir} (${aSrc}`);
    expect(real.stdout).toContain(`kept ${bDir}: mounted at ${b.mnt}`);
    expect(fs.existsSync(aDir)).toBe(false);
    expect(fs.existsSync(bDir)).toBe(true);
    expect(fs.readFileSync(path.join(stateRoot, 'not-a-state-dir', 'keep'), 'utf8')).toBe('mine');
    // the mount whose journal was kept still journals
    fs.writeFileSync(path.join(b.mnt, 'after'), 'x');
    expect(b.alive()).toBe(true);

    const bad = cli(['state', 'prune', '--older-than', 'last week']);
    expect(bad.status).toBe(2);
    expect(bad.stderr).toBe('ledgerfs: not a duration: "last week" (use e.g. 30s, 10m, 24h, 7d)\n');
  });
});
