import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { logsMatching, run, sh, startMount, type TestMount } from '../helpers/mount.js';
import { putFiles } from '../helpers/policy.js';
import { isRoot, makeTemp, rmTemp } from '../helpers/tmp.js';

/** A small tmpfs as the state directory of a real mount with a policy (needs root). */
describe('mount: the state directory running low, then full', () => {
  it('low: a warning in the log and in /.ledgerfs/usage; full: ENOSPC to the program, a denial line, nothing changed', async (ctx) => {
    if (!isRoot()) ctx.skip();
    const dir = makeTemp('state-disk');
    const ws = path.join(dir, 'ws');
    const state = path.join(dir, 'state');
    putFiles(ws, { 'w/a.txt': 'a\n' });
    fs.mkdirSync(state);
    fs.writeFileSync(path.join(dir, 'p.yaml'), 'backend: {type: local, path: ./ws}\nroots: [{path: /w, mode: rw}]\n');
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', state]);
    let m: TestMount | undefined;
    try {
      m = await startMount({ src: ws, omitSource: true, args: ['--policy', path.join(dir, 'p.yaml'), '--state', state, '--session', 'full'] });
      // 4 MiB is under the 256 MiB floor: low from the first look
      expect(sh('cat .ledgerfs/usage', m.mnt)).toMatch(/warning: the journal's state directory is low on space: .* free of 4(\.0)? MiB.*state_free_bytes=\d+/);
      expect(await logsMatching(m, /"level":40.*low on space/)).toMatch(/gc --max-bytes/);
      sh('echo b > w/b.txt', m.mnt);
      const fd = fs.openSync(path.join(state, 'filler'), 'w');
      for (const size of [65536, 4096, 512, 1]) {
        try {
          for (;;) fs.writeSync(fd, Buffer.alloc(size));
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
        }
      }
      fs.closeSync(fd);
      // the journal's last page may still take a few records: make directories until refused
      const r = run('for i in $(seq 1 500); do mkdir w/n$i || { echo "refused $i"; exit 0; }; done; echo never', m.mnt);
      expect(r.stderr).toMatch(/No space left on device/);
      const refused = /refused (\d+)/.exec(r.stdout)?.[1] as string;
      expect(refused).toBeDefined();
      expect(fs.existsSync(path.join(ws, `w/n${refused}`))).toBe(false);
      expect(run('mkdir w/d', m.mnt).stderr).toMatch(/No space left on device/);
      expect(run('echo c > w/c.txt', m.mnt).stderr).toMatch(/No space left on device/);
      expect(fs.existsSync(path.join(ws, 'w/c.txt'))).toBe(false);
      expect(fs.existsSync(path.join(ws, 'w/d'))).toBe(false);
      expect(sh('cat .ledgerfs/denials', m.mnt)).toMatch(new RegExp(`mkdir /w/d ENOSPC: journal: the state directory's file system is full`));
      expect(await logsMatching(m, /"errno":"ENOSPC"/)).toMatch(/denied/);
      fs.rmSync(path.join(state, 'filler'));
      sh('mkdir w/d', m.mnt);
      expect(fs.existsSync(path.join(ws, 'w/d'))).toBe(true);
      expect(m.errors()).toEqual([]);
    } finally {
      await m?.stop();
      execFileSync('umount', ['-l', state]);
      rmTemp(dir);
    }
  }, 120_000);
});
