import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLI } from '../helpers/mount.js';
import { openTestJournal, vfsFs } from '../helpers/journal.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/** `ledgerfs tag` on an unmounted workspace (the journal written directly), and its readers. */
describe('ledgerfs tag, unmounted: rollback --to NAME, diff --from NAME, log', () => {
  let dir: string;
  let src: string;
  let state: string;
  const cli = (...args: string[]) => spawnSync(process.execPath, [CLI, ...args, '--source', src, '--state', state], { encoding: 'utf8' });
  const tree = () => Object.fromEntries(fs.readdirSync(src).sort().map((n) => [n, fs.readFileSync(path.join(src, n), 'utf8')]));
  const S1 = '2026-11-25T10-00-00-aaaa';
  const S2 = '2026-11-25T11-00-00-bbbb';

  beforeEach(async () => {
    dir = makeTemp('cli-tags');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    fs.mkdirSync(src);
    const j = await openTestJournal(src, state, S1);
    await vfsFs.write(j.vfs, '/a.txt', 'one\n');
    await j.close();
  });
  afterEach(() => rmTemp(dir));

  it('marks the point; later changes are after it; a duplicate name exits 2 with a sentence', async () => {
    const t = cli('tag', 'before-b');
    expect(t.stderr).toBe('');
    expect(t.stdout).toBe('Tagged #1 as before-b.\n');
    const j = await openTestJournal(src, state, S2);
    await vfsFs.write(j.vfs, '/b.txt', 'two\n');
    await vfsFs.write(j.vfs, '/a.txt', 'changed\n');
    await j.close();
    cli('tag', 'after-b');

    const dup = cli('tag', 'before-b');
    expect(dup.status).toBe(2);
    expect(dup.stderr).toMatch(/^ledgerfs: tag before-b already marks #1 \(made \S+\); tag names are unique in a journal: choose another name\n$/);
    const num = cli('tag', '12');
    expect(num.status).toBe(2);
    expect(num.stderr).toContain('tag name "12" reads as a sequence number');

    const log = cli('log');
    expect(log.stdout).toMatch(/^@ {2} \S+ \S+ {2}tag after-b: after #3\n#3 .*\n#2 .*\n@ {2} \S+ \S+ {2}tag before-b: after #1\n#1 /);
    const json = JSON.parse(cli('log', '--json').stdout) as Array<Record<string, unknown>>;
    expect(json.filter((e) => e.kind === 'tag').map((e) => [e.name, e.at])).toEqual([['after-b', 3], ['before-b', 1]]);

    const diff = cli('diff', '--from', 'before-b', '--to', 'after-b', '--no-content');
    expect(diff.stdout).toMatch(/^M \/a\.txt {2}\(.*\)\nA \/b\.txt {2}\(4 bytes\)\n$/);
    expect(cli('diff', '--from', 'after-b', '--no-content').stdout).toBe(''); // nothing after it

    const rb = cli('rollback', '--to', 'before-b');
    expect(rb.status).toBe(0);
    expect(tree()).toEqual({ 'a.txt': 'one\n' });
  });

  it('a session\'s checkpoint selects that session only', async () => {
    const j = await openTestJournal(src, state, S2);
    await vfsFs.write(j.vfs, '/b.txt', 'two\n');
    await j.close();
    expect(cli('tag', 'agent-start', '--session', S2).stdout).toBe(`Tagged #2 as agent-start (session ${S2}).\n`);
    const j2 = await openTestJournal(src, state, S1);
    await vfsFs.write(j2.vfs, '/c.txt', 'other session\n');
    await j2.close();
    const j3 = await openTestJournal(src, state, S2);
    await vfsFs.write(j3.vfs, '/d.txt', 'agent\n');
    await j3.close();
    expect(cli('diff', '--from', 'agent-start', '--no-content').stdout).toBe('A /d.txt  (6 bytes)\n');
    expect(cli('rollback', '--to', 'agent-start').status).toBe(0);
    expect(tree()).toEqual({ 'a.txt': 'one\n', 'b.txt': 'two\n', 'c.txt': 'other session\n' });
    const other = cli('rollback', '--to', 'agent-start', '--session', S1);
    expect(other.status).toBe(2);
    expect(other.stderr).toContain(`is a checkpoint of session ${S2}`);
  });
});
