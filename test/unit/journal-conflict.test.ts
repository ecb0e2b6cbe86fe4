import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLI } from '../helpers/mount.js';
import { openTestJournal, vfsFs, type TestJournal } from '../helpers/journal.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

// A local version a store could not upload is a journal record: tied to the write session that
// made it (open, or ended by a split), or on its own; `log` and `show` say where the bytes are.

describe('journal: conflict records', () => {
  let dir: string;
  let state: string;
  let j: TestJournal;
  beforeEach(async () => {
    dir = makeTemp('journal-conflict');
    state = path.join(dir, 'state');
    fs.mkdirSync(path.join(dir, 'src'));
    j = await openTestJournal(path.join(dir, 'src'), state);
  });
  afterEach(async () => {
    await j.close().catch(() => undefined);
    rmTemp(dir);
  });

  const kept = (p: string) => ({ time: Date.now(), path: p, reason: 'changed-remotely' as const, expectedGeneration: '5', currentGeneration: '9', localFile: path.join(dir, 'kept-' + p.slice(1)), size: 3 });
  const history = () => j.svc.history();
  const cli = (...args: string[]) => {
    const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    return r.stdout;
  };

  it('is tied to the session that wrote the file, even after it ended; otherwise stands alone', async () => {
    await vfsFs.write(j.vfs, '/a.txt', 'abc'); // a write session, ended at close
    j.svc.stage.noteConflict(kept('/a.txt'));
    j.svc.stage.noteConflict(kept('/never-written.txt'));
    const h = history();
    const a = h.ops.find((o) => o.paths[0] === '/a.txt' && o.conflicts);
    expect(a?.conflicts).toEqual([expect.objectContaining({ kind: 'conflict', of: a?.seq, path: '/a.txt', localFile: path.join(dir, 'kept-a.txt') })]);
    expect(h.conflicts).toHaveLength(2);
    expect(h.conflicts[1]).not.toHaveProperty('of');
    expect(h.orphans).toEqual([]);
    await j.close();

    const log = cli('log', '--state', state);
    expect(log).toContain(`[conflict: not uploaded: the object changed in the bucket meanwhile (generation 5 -> 9); the local version (3 bytes) is kept at ${path.join(dir, 'kept-a.txt')}]`);
    expect(log).toMatch(new RegExp(`^!\\s+\\S+ \\S+\\s+conflict /never-written.txt: not uploaded: .* kept at ${path.join(dir, 'kept-never-written.txt')}$`, 'm'));
    expect(cli('log', '--state', state, '--path', '/a.txt')).not.toContain('never-written');
    // --json has the loose conflict too (first), and the tied one inside its operation
    const json = JSON.parse(cli('log', '--state', state, '--json')) as Array<Record<string, unknown>>;
    expect(json[0]).toMatchObject({ kind: 'conflict', path: '/never-written.txt', summary: expect.stringMatching(/^conflict \/never-written.txt: not uploaded/) });
    expect(json.find((e) => e.seq === a?.seq)).toMatchObject({ conflicts: [expect.objectContaining({ path: '/a.txt' })] });
    const show = cli('show', '--state', state, String(a?.seq));
    expect(show).toContain(`conflict  /a.txt: not uploaded`);
    expect(show).toContain(`restore   cp ${path.join(dir, 'kept-a.txt')} MOUNTPOINT/a.txt`);
    expect(cli('verify', '--state', state)).toMatch(/^clean$/m);
  });
});
