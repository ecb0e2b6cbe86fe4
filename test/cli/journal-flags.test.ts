import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLI } from '../helpers/mount.js';
import { openTestJournal, vfsFs } from '../helpers/journal.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/** The CLI on a journal made through the core (no mount): two sessions, three mutations. */
describe('journal commands: --to/--since/--from take a seq, a duration or an ISO time with zone; unknown sessions and seqs are errors', () => {
  let dir: string;
  let src: string;
  let state: string;
  const cli = (...args: string[]) => spawnSync(process.execPath, [CLI, ...args, '--source', src, '--state', state], { encoding: 'utf8' });
  const tree = () => Object.fromEntries(fs.readdirSync(src).sort().map((n) => [n, fs.readFileSync(path.join(src, n), 'utf8')]));

  beforeEach(async () => {
    dir = makeTemp('cli');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    fs.mkdirSync(src);
    let j = await openTestJournal(src, state, '2026-11-25T10-00-00-aaaa');
    await vfsFs.write(j.vfs, '/a.txt', 'one\n');
    await vfsFs.write(j.vfs, '/b.txt', 'two\n');
    await j.close();
    j = await openTestJournal(src, state, '2026-11-25T11-00-00-bbbb');
    await vfsFs.write(j.vfs, '/a.txt', 'changed\n');
    await j.close();
  });
  afterEach(() => rmTemp(dir));

  const refused: [string, string[], RegExp][] = [
    ['rollback --to -1', ['rollback', '--to', '-1'], /--to: "-1" is not a sequence number, a duration or an ISO 8601 time with zone/],
    ['rollback --to yesterday', ['rollback', '--to', 'yesterday'], /--to: "yesterday" is not a sequence number/],
    ['rollback --to a time without zone', ['rollback', '--to', '2026-11-22T05:30:00'], /--to: "2026-11-22T05:30:00" is not/],
    ['rollback --to 9999', ['rollback', '--to', '9999'], /^ledgerfs: --to 9999: the journal ends at #\d+; nearest: #\d+, #\d+, #\d+/],
    ['rollback --session typo', ['rollback', '--session', '2026-11-25T11-00-00-bbbc'], /^ledgerfs: --session 2026-11-25T11-00-00-bbbc: no such session in this journal; nearest: 2026-11-25T11-00-00-bbbb, 2026-11-25T10-00-00-aaaa/],
    ['rollback --session typo --dry-run', ['rollback', '--session', 'typo', '--dry-run'], /no such session in this journal; nearest: /],
    ['diff --session typo', ['diff', '--session', 'typo'], /^ledgerfs: --session typo: no such session in this journal; nearest: /],
    ['diff --to 9999', ['diff', '--from', '0', '--to', '9999'], /^ledgerfs: --to 9999: the journal ends at/],
    ['log --session typo', ['log', '--session', 'typo'], /^ledgerfs: --session typo: no such session/],
    ['log --since tomorrow', ['log', '--since', 'tomorrow'], /^ledgerfs: --since: "tomorrow" is not a sequence number/],
  ];
  for (const [name, args, message] of refused) {
    it(`${name}: exit 2, a sentence, nothing changed`, () => {
      const before = tree();
      const journalBefore = fs.readdirSync(path.join(state, 'journal')).map((f) => fs.readFileSync(path.join(state, 'journal', f), 'utf8')).join('');
      const r = cli(...args);
      expect(r.stderr).toMatch(message);
      expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace
      expect(r.status).toBe(2);
      expect(tree()).toEqual(before);
      const journalAfter = fs.readdirSync(path.join(state, 'journal')).map((f) => fs.readFileSync(path.join(state, 'journal', f), 'utf8')).join('');
      expect(journalAfter).toBe(journalBefore);
    });
  }

  it('accepted: a seq, a duration, an ISO time with zone; a known session', () => {
    expect(cli('rollback', '--to', '2', '--dry-run').status).toBe(0);
    expect(cli('rollback', '--to', '10m', '--dry-run').status).toBe(0);
    expect(cli('rollback', '--to', '1h30m', '--dry-run').status).toBe(0);
    expect(cli('rollback', '--to', '2026-11-25T10:00:00Z', '--dry-run').status).toBe(0);
    expect(cli('rollback', '--to', '2026-11-25T10:00:00.5+01:00', '--dry-run').status).toBe(0);
    expect(cli('log', '--session', '2026-11-25T10-00-00-aaaa').stdout).toContain('b.txt');
    const r = cli('rollback', '--session', '2026-11-25T11-00-00-bbbb');
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(tree()).toEqual({ 'a.txt': 'one\n', 'b.txt': 'two\n' });
  });
});
