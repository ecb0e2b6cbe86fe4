import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CLI, onGcs } from '../helpers/mount.js';
import { startJournaledMount, type JournaledMount } from '../helpers/journaled-mount.js';

// A rollback through the daemon changes files behind the kernel's back. With native-ll the daemon
// tells the kernel to forget those paths; it used to wait out the attribute and entry timeouts
// instead (a second by default; here a minute, longer than the rollback may take).
describe.skipIf(onGcs)('rollback through the daemon: the kernel forgets what it cached of the paths', () => {
  let j: JournaledMount | undefined;
  afterEach(async () => {
    await j?.finish();
    j = undefined;
  });

  it('restored bytes, sizes and names show at once under 60 s attribute and entry timeouts', async () => {
    j = await startJournaledMount('cached-run', {
      populate: (src) => {
        fs.writeFileSync(path.join(src, 'report.txt'), 'draft 1\n');
        fs.writeFileSync(path.join(src, 'gone.txt'), 'keep me\n');
      },
      args: ['--binding', 'native-ll', '--attr-timeout', '60', '--entry-timeout', '60'],
    });
    const at = (name: string) => path.join(j!.m.mnt, name);
    fs.writeFileSync(at('report.txt'), 'final version, longer\n');
    fs.unlinkSync(at('gone.txt'));
    fs.writeFileSync(at('made.txt'), 'new\n');
    fs.mkdirSync(at('dir'));
    // the kernel now caches each of these: attributes, pages, names, and gone.txt's absence
    expect(fs.readFileSync(at('report.txt'), 'utf8')).toBe('final version, longer\n');
    expect(fs.existsSync(at('gone.txt'))).toBe(false);
    expect(fs.statSync(at('made.txt')).size).toBe(4);
    expect(fs.statSync(at('dir')).isDirectory()).toBe(true);

    const r = spawnSync(process.execPath, [CLI, 'rollback', '--state', j.state, '--session', 'cached-run'], { encoding: 'utf8', timeout: 30_000 });
    expect(r.error, 'the rollback waited for the kernel caches to expire').toBeUndefined();
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/through the daemon of/);

    expect(fs.statSync(at('report.txt')).size).toBe(8);
    expect(fs.readFileSync(at('report.txt'), 'utf8')).toBe('draft 1\n');
    expect(fs.readFileSync(at('gone.txt'), 'utf8')).toBe('keep me\n');
    expect(fs.existsSync(at('made.txt'))).toBe(false);
    expect(fs.existsSync(at('dir'))).toBe(false);
    expect(fs.readdirSync(j.m.mnt).sort()).toEqual(['gone.txt', 'report.txt']);
  }, 90_000);
});
