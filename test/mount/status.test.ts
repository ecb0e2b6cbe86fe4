import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CLI, onGcs, startMount, type TestMount } from '../helpers/mount.js';

interface StatusRow { mountpoint: string; source: string; state: string; stateDir: string | null; session: string | null; binding: string | null; pid: number | null; started: string | null }

function status(): StatusRow[] {
  const r = spawnSync(process.execPath, [CLI, 'status', '--json'], { encoding: 'utf8' });
  expect(r.status).toBe(0);
  return JSON.parse(r.stdout) as StatusRow[];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.skipIf(onGcs)('ledgerfs status lists ledgerfs mounts from the mount table (issue 16.7)', () => {
  const mounts: TestMount[] = [];
  afterEach(async () => {
    for (const m of mounts.splice(0)) await m.stop().catch(() => undefined);
  });

  it('source, journal, session, binding and pid of each; a killed daemon\'s mount shows as dead', async () => {
    const a = await startMount({ args: ['--binding', 'native-ll', '--session', 'status-a'] });
    mounts.push(a);
    const b = await startMount({ args: ['--binding', 'fuse-native', '--no-journal'] });
    mounts.push(b);
    for (let i = 0; i < 100 && !(a.logs().includes('  stop:') && b.logs().includes('  stop:')); i++) await sleep(50);
    const rows = status();
    const ra = rows.find((r) => r.mountpoint === a.mnt);
    const rb = rows.find((r) => r.mountpoint === b.mnt);
    expect(ra).toMatchObject({ source: `ledgerfs:${fs.realpathSync(a.src)}`, state: 'serving', session: 'status-a', binding: 'native-ll', pid: a.daemon.pid });
    expect(ra?.stateDir).toMatch(new RegExp(`^${path.join(a.dir, 'state-home')}/ledgerfs/src-[0-9a-f]{12}$`));
    expect(ra?.started).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
    expect(rb).toMatchObject({ source: `ledgerfs:${fs.realpathSync(b.src)}`, state: 'serving', stateDir: null, session: null, binding: 'fuse-native', pid: b.daemon.pid });
    // only ledgerfs mounts: nothing else of the mount table
    expect(rows.every((r) => r.source.startsWith('ledgerfs:') || r.source.startsWith('gs://') || r.source === 'ledgerfs')).toBe(true);

    b.daemon.kill('SIGKILL');
    for (let i = 0; i < 100 && b.alive(); i++) await sleep(50);
    await sleep(200);
    expect(status().find((r) => r.mountpoint === b.mnt)).toMatchObject({ state: 'dead or unknown', pid: null });
    const text = spawnSync(process.execPath, [CLI, 'status'], { encoding: 'utf8' }).stdout;
    expect(text).toContain(`${a.mnt}\n  source:  ledgerfs:${fs.realpathSync(a.src)}\n  daemon:  pid ${a.daemon.pid}, binding native-ll`);
    expect(text).toContain(`${b.mnt}\n  source:  ledgerfs:${fs.realpathSync(b.src)}\n  daemon:  none found`);
  });
});
