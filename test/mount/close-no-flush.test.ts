import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CLI, RUNNING_BINDING, onGcs, py, run } from '../helpers/mount.js';
import { startJournaledMount, type JournaledMount } from '../helpers/journaled-mount.js';
import { snapshotTree } from '../helpers/tree.js';

/**
 * On a store that does not upload at close, native-ll answers OPEN and CREATE with
 * FOPEN_NOFLUSH: close(2) no longer waits for a FLUSH round trip, and the write session ends
 * at release, which the program does not wait for. What a FLUSH gave must still hold: every
 * close is a session boundary, and a rename, chmod or rewrite right after the close sees the
 * session ended with its own after-state (else a rollback stops on a false conflict).
 */

const sample = (text: string, op: string): number =>
  Number(new RegExp(`^ledgerfs_fuse_requests_total\\{op="${op}",errno="OK"\\} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);

function cli(args: string[], env: NodeJS.ProcessEnv): { status: number | null; out: string } {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 120_000 });
  return { status: r.status, out: `${r.stdout}\n${r.stderr}` };
}

describe('close without FLUSH', () => {
  let j: JournaledMount | undefined;
  afterEach(async () => {
    const errors = await j?.finish();
    j = undefined;
    expect(errors ?? [], 'the daemon logged errors').toEqual([]);
  });

  it('the kernel sends a FLUSH only where close must wait for the store', async () => {
    j = await startJournaledMount('noflush-count', { args: ['--metrics', '127.0.0.1:0'] });
    const line = j.m.logs().split('\n').find((l) => l.includes('"metrics served"')) as string;
    const url = (JSON.parse(line) as { metrics: string }).metrics;
    const r = run('for i in $(seq 30); do echo $i > f$i; done; cat f7 f8 > /dev/null', j.m.mnt);
    expect(r.status).toBe(0);
    // the releases come right after the closes, without the shell waiting for them
    let text = '';
    for (let tries = 0; tries < 100; tries++) {
      text = await (await fetch(url)).text();
      if (sample(text, 'release') >= 32) break;
      await new Promise((res) => setTimeout(res, 50));
    }
    expect(sample(text, 'release')).toBeGreaterThanOrEqual(32);
    // GCS uploads at close (close = in the bucket); fuse-native's libfuse 2 cannot say NOFLUSH
    if (onGcs || RUNNING_BINDING === 'fuse-native') expect(sample(text, 'flush')).toBeGreaterThanOrEqual(30);
    else expect(sample(text, 'flush')).toBe(0);
  });

  it('a rename, chmod or rewrite right after each close: every session ends alone, and a strict rollback restores the start', async () => {
    j = await startJournaledMount('noflush-race', {
      keepSource: true,
      populate: (src) => {
        for (let i = 0; i < 20; i++) fs.writeFileSync(path.join(src, `f${i}`), Buffer.alloc(9000, i));
      },
    });
    const before = snapshotTree(j.m.mnt);
    py(
      `
import os
for round in range(8):
    for i in range(20):
        name = 'f%d' % i
        fd = os.open(name, os.O_WRONLY)
        os.pwrite(fd, bytes([round + 1]) * 4096, (round % 2) * 4096)
        os.close(fd)
        # at once, before the release can have been answered
        if i % 4 == 0:
            os.rename(name, name + '.tmp')
            os.rename(name + '.tmp', name)
        elif i % 4 == 1:
            os.chmod(name, 0o600 if round % 2 else 0o644)
        elif i % 4 == 2:
            fd = os.open(name, os.O_WRONLY | os.O_APPEND)
            os.write(fd, b'tail')
            os.close(fd)
        else:
            fd = os.open(name, os.O_WRONLY | os.O_TRUNC)
            os.write(fd, bytes([round]) * 100)
            os.close(fd)
`,
      j.m.mnt,
    );
    const rb = cli(['rollback', '--state', j.state, '--session', 'noflush-race'], j.m.env);
    expect(rb.status, rb.out).toBe(0);
    expect(snapshotTree(j.m.mnt)).toEqual(before);
    const v = cli(['verify', '--state', j.state], j.m.env);
    expect(v.status, v.out).toBe(0);
  });
});
