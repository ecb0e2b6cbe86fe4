import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { bindingArgs, CLI, forceUnmount, onGcs } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { mountAt } from '../../src/fuse/mounts.js';

/*
 * A SIGTERM that comes as soon as the mount shows in the mount table (a supervisor stopping a
 * service it just started, a test's teardown) must unmount it. Before, the daemon set its
 * handlers only after the journal's control socket and the banner, and a signal in those
 * milliseconds ended it by default with the mount left dead behind it (ENOTCONN).
 */
// (the mount command's own start-up: the GCS pass would test the same local mount again)
describe.skipIf(onGcs)('a signal while the mount is coming up', () => {
  let dir: string | undefined;
  afterEach(() => {
    if (dir) rmTemp(dir);
    dir = undefined;
  });

  it('unmounts as soon as it is mounted: no dead mount is left, 12 rounds', { timeout: 120_000 }, async () => {
    dir = makeTemp('sigterm-early');
    const src = path.join(dir, 'src');
    fs.mkdirSync(src);
    const left: string[] = [];
    for (let round = 0; round < 12; round++) {
      const mnt = path.join(dir, `mnt-${round}`);
      fs.mkdirSync(mnt);
      const d = spawn(process.execPath, [CLI, 'mount', ...bindingArgs(), '--source', src, '--state', path.join(dir, `state-${round}`), '--shared-source', mnt], {
        stdio: ['ignore', 'ignore', 'pipe'],
        env: { ...process.env, XDG_STATE_HOME: path.join(dir, 'xdg') },
      });
      let log = '';
      d.stderr?.on('data', (b: Buffer) => (log += b.toString()));
      const exited = new Promise<number | null>((r) => d.on('exit', (code) => r(code)));
      try {
        // the moment the kernel has it (a tight poll of the mount table), not after the banner
        const end = Date.now() + 20_000;
        while (!mountAt(mnt) && Date.now() < end) await new Promise((r) => setImmediate(r));
        expect(mountAt(mnt), log).toBeDefined();
        d.kill('SIGTERM');
        const code = await Promise.race([exited, new Promise<'hung'>((r) => setTimeout(() => r('hung'), 20_000))]);
        expect(code, log).toBe(0);
      } finally {
        if (mountAt(mnt)) {
          left.push(`round ${round}`);
          forceUnmount(mnt);
        }
        if (d.exitCode === null) d.kill('SIGKILL');
      }
    }
    expect(left).toEqual([]);
  });
});
