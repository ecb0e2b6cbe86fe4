import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLI, run, startMount, type TestMount } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * The newcomer's path (README: scripts/demo): `ledgerfs mount MNT` with no workspace creates a
 * demo workspace and policy in ~/.ledgerfs and serves it; what it prints to try must be true.
 */
describe('mount: the demo workspace', () => {
  let home: string;
  let env: NodeJS.ProcessEnv;
  let m: TestMount | undefined;
  beforeEach(async () => {
    home = makeTemp('demo-home');
    env = { HOME: home, XDG_STATE_HOME: path.join(home, 'state') };
    m = await startMount({ omitSource: true, env });
  });
  afterEach(async () => {
    try {
      await m?.stop();
    } finally {
      rmTemp(home);
    }
  });

  const cli = (args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: { ...process.env, ...env } });

  it('shows the case, hides the secret and the other case, refuses Tools; the printed hints work', () => {
    const mnt = (m as TestMount).mnt;
    const ws = path.join(home, '.ledgerfs/demo-workspace');
    expect(fs.existsSync(path.join(ws, 'projects/Wilson-MVA/.env'))).toBe(true);
    expect(fs.readFileSync(path.join(home, '.ledgerfs/demo-policy.yaml'), 'utf8')).toMatch(/mode: rw/);
    expect(fs.readdirSync(mnt).sort()).toEqual(['.ledgerfs', 'Tools', 'projects']);
    expect(fs.readdirSync(path.join(mnt, 'projects'))).toEqual(['Wilson-MVA']);
    expect(fs.readdirSync(path.join(mnt, 'projects/Wilson-MVA')).sort()).toEqual(['notes.md', 'timeline.txt']);

    // the hints printed at mount, run as printed
    const session = /diff --session (\S+)/.exec((m as TestMount).logs())?.[1];
    expect(session, (m as TestMount).logs()).toBeTruthy();
    expect(run(`echo "- called the insurer" >> ${mnt}/projects/Wilson-MVA/notes.md`, home).status).toBe(0);
    expect(run(`echo x > ${mnt}/Tools/x`, home).stderr).toMatch(/Read-only file system/);
    expect(fs.readFileSync(path.join(mnt, '.ledgerfs/denials'), 'utf8')).toMatch(/create \/Tools\/x EROFS: .*\/Tools is read-only/);
    const diff = cli(['diff', '--session', session as string]);
    expect(diff.status, diff.stderr).toBe(0);
    expect(diff.stdout).toMatch(/^M \/projects\/Wilson-MVA\/notes\.md/m);
    expect(diff.stdout).toMatch(/^\+- called the insurer$/m);
    const rb = cli(['rollback', '--session', session as string]);
    expect(rb.status, rb.stderr).toBe(0);
    expect(fs.readFileSync(path.join(ws, 'projects/Wilson-MVA/notes.md'), 'utf8')).not.toMatch(/insurer/);
  });
});
