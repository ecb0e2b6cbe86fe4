import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, sh, type TestMount } from '../helpers/mount.js';
import { startJournaledMount, type JournaledMount } from '../helpers/journaled-mount.js';

/**
 * Named checkpoints on a live mount (issue 18): `ledgerfs tag` reaches the daemon's journal
 * through its control socket; `log`, `diff --from NAME` and `rollback --to NAME` read it.
 */
describe('mount: ledgerfs tag NAME, rollback --to NAME, diff --from NAME', () => {
  let j: JournaledMount;
  let m: TestMount;
  const SESSION = 'tags-test-session';
  const cli = (...args: string[]) => {
    const r = spawnSync(process.execPath, [CLI, ...args, ...m.workspaceArgs, '--state', j.state], { encoding: 'utf8', env: { ...process.env, ...m.env }, timeout: 120_000 });
    return { status: r.status, stdout: r.stdout, stderr: r.stderr };
  };

  beforeAll(async () => {
    j = await startJournaledMount(SESSION, { populate: (src) => fs.writeFileSync(path.join(src, 'notes.md'), 'v1\n') });
    m = j.m;
  }, 120_000);
  afterAll(async () => {
    await j?.finish();
  });

  it('tags through the daemon, and undoes and shows what came after the tag', () => {
    sh('echo v2 > notes.md', m.mnt);
    // the mount holds the journal's lock: only its daemon can have written this
    const t = cli('tag', 'before-agent');
    expect(t.stderr).toBe('');
    expect(t.stdout).toMatch(/^Tagged #\d+ as before-agent\.\n$/);
    sh('echo v3 > notes.md && mkdir out && echo r > out/report.txt && rm notes.md', m.mnt);
    const dup = cli('tag', 'before-agent');
    expect(dup.status).toBe(2);
    expect(dup.stderr).toMatch(/^ledgerfs: tag before-agent already marks #\d+ .*choose another name\n$/);

    const log = cli('log').stdout.split('\n');
    const at = log.findIndex((l) => l.startsWith('@ '));
    expect(log[at]).toMatch(/tag before-agent: after #\d+$/);
    expect(log.slice(at + 1).join('\n')).toMatch(/write \/notes\.md/); // the change before it is below it
    expect(log.slice(0, at).join('\n')).toMatch(/unlink \/notes\.md/);

    expect(cli('diff', '--from', 'before-agent', '--no-content').stdout).toBe('D /notes.md  (3 bytes)\nA /out/\nA /out/report.txt  (2 bytes)\n');
    const rb = cli('rollback', '--to', 'before-agent');
    expect(rb.status).toBe(0);
    expect(rb.stdout).toMatch(/through the daemon of /);
    expect(sh('cat notes.md; ls', m.mnt)).toBe('v2\nnotes.md\n');
  });
});
