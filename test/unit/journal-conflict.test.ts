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

// Issue 16.8: conflicts are judged on content (a touch is not one), and --skip-conflicts undoes
// the rest, listing what it left.
describe('rollback conflicts: content, and --skip-conflicts', () => {
  let dir: string;
  let src: string;
  let state: string;
  let j: TestJournal;
  beforeEach(async () => {
    dir = makeTemp('journal-conflict');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    fs.mkdirSync(src);
    for (const n of ['a', 'b', 'c']) fs.writeFileSync(path.join(src, `${n}.txt`), `${n} as it was\n`);
    j = await openTestJournal(src, state, 'agent');
    for (const n of ['a', 'b', 'c']) await vfsFs.write(j.vfs, `/${n}.txt`, `${n} by the agent\n`, fs.constants.O_WRONLY | fs.constants.O_TRUNC);
    await vfsFs.write(j.vfs, '/new.txt', 'new');
    await vfsFs.write(j.vfs, '/b.txt', 'b again by the agent\n', fs.constants.O_WRONLY | fs.constants.O_TRUNC);
    await j.close();
  });
  afterEach(() => rmTemp(dir));

  const rollback = (...args: string[]) => spawnSync(process.execPath, [CLI, 'rollback', '--state', state, '--source', src, '--session', 'agent', ...args], { encoding: 'utf8' });
  const read = (n: string) => fs.readFileSync(path.join(src, n), 'utf8');

  it('proceeds when only the mtime changed; a content change of the same size is a conflict', () => {
    const later = new Date(Date.now() + 3600_000);
    fs.utimesSync(path.join(src, 'a.txt'), later, later); // touch beside the mount
    const dry = rollback('--dry-run', '--json');
    expect(JSON.parse(dry.stdout).conflicts).toEqual([]);
    fs.writeFileSync(path.join(src, 'c.txt'), 'C BY THE AGENT\n'); // same size, other bytes
    const r = rollback();
    expect(r.status).toBe(1);
    expect(r.stdout).toMatch(/#\d+ write \/c.txt: .*content changed/);
    expect(r.stdout).not.toMatch(/a\.txt/);
    fs.writeFileSync(path.join(src, 'c.txt'), 'c by the agent\n');
    const ok = rollback();
    expect(ok.stdout).toMatch(/^Rolled back 5 mutation\(s\)/);
    expect(ok.status).toBe(0);
    expect(read('a.txt')).toBe('a as it was\n');
    expect(fs.statSync(path.join(src, 'a.txt')).mtimeMs).toBeLessThan(later.getTime() - 1000);
  });

  it('--skip-conflicts undoes the rest and lists what it left (text and --json)', () => {
    // (another size: an edit of the same size within the kernel's clock tick of the agent's would
    // leave size and mtime as the journal recorded them, a case the first test covers apart)
    fs.writeFileSync(path.join(src, 'b.txt'), 'b edited by a person, at more length\n');
    const r = rollback('--skip-conflicts');
    expect(r.status, r.stderr).toBe(1);
    expect(r.stdout).toMatch(/Skipped 2 mutation\(s\) \(--skip-conflicts\), left as they are:/);
    expect(r.stdout).toMatch(/#\d+ write \/b.txt: .*content changed/);
    expect(r.stdout).toMatch(/#\d+ write \/b.txt: left as it is: the undo of #\d+ on \/b.txt was skipped/);
    expect(read('a.txt')).toBe('a as it was\n');
    expect(read('c.txt')).toBe('c as it was\n');
    expect(fs.existsSync(path.join(src, 'new.txt'))).toBe(false);
    expect(read('b.txt')).toBe('b edited by a person, at more length\n');
    // the rest is done; the skipped ones are still to do, and --json lists them
    const again = JSON.parse(rollback('--skip-conflicts', '--json').stdout) as { planned: unknown[]; skipped: { path: string }[]; undone: number };
    expect(again.planned).toHaveLength(2);
    expect(again.undone).toBe(0);
    expect(again.skipped.map((s) => s.path)).toEqual(['/b.txt', '/b.txt']);
    expect(rollback('--skip-conflicts', '--force').status).toBe(2);
  });
});
