import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, REPO } from '../helpers/mount.js';
import { openTestJournal, vfsFs } from '../helpers/journal.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { listMounts } from '../../src/fuse/mounts.js';

interface Row { name: string; command: string; message: string; exit: number }

/** The README's "bad input" table, as written (cells unescaped: `\|` is a `|`). */
function readmeRows(): Row[] {
  const text = fs.readFileSync(path.join(REPO, 'README.md'), 'utf8');
  const start = text.indexOf('| case | command | message');
  expect(start, 'the bad-input table in README.md').toBeGreaterThan(0);
  const rows: Row[] = [];
  for (const line of text.slice(start).split('\n').slice(2)) {
    if (!line.startsWith('|')) break;
    const cells = line.slice(1, -1).split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
    const code = (c: string) => /^`(.*)`$/.exec(c)?.[1] ?? c;
    rows.push({ name: cells[0] as string, command: code(cells[1] as string), message: code(cells[2] as string), exit: Number(cells[3]) });
  }
  return rows;
}

/** Split a command line as a shell would for these rows (no quotes are used in them). */
const words = (s: string) => s.split(/\s+/).filter(Boolean);

describe('README "bad input" table: each row refused as written, nothing changed (issue 16.7)', () => {
  let dir: string;
  const ph: Record<string, string> = {};
  beforeAll(async () => {
    dir = makeTemp('badinput');
    ph.WS = path.join(dir, 'ws');
    ph.ST = path.join(dir, 'state');
    ph.MNT = path.join(dir, 'mnt');
    ph.FILE = path.join(dir, 'file');
    fs.mkdirSync(ph.WS);
    fs.mkdirSync(ph.MNT);
    fs.writeFileSync(ph.FILE, '');
    fs.writeFileSync(path.join(ph.WS, 'p.yaml'), 'backend: {type: local, path: .}\nroots: [{path: /}]\n');
    const j = await openTestJournal(ph.WS, ph.ST, 'bad-input-session');
    await vfsFs.write(j.vfs, '/a.txt', 'one\n');
    await vfsFs.write(j.vfs, '/a.txt', 'two\n');
    await j.close();
  });
  afterAll(() => rmTemp(dir));

  const fill = (s: string) => s.replace(/\b(WS|ST|MNT|FILE)\b/g, (k) => ph[k] as string);
  /** the workspace, the journal directory and the mount table, as bytes */
  const snapshot = () => {
    const files: Record<string, string> = {};
    const walk = (d: string) => {
      for (const e of fs.readdirSync(d, { withFileTypes: true })) {
        const p = path.join(d, e.name);
        if (e.isDirectory()) walk(p);
        // the journal index is a cache any reader may (re)write, like git's index on `git status`
        else if (e.name !== 'journal-index.json') files[p] = fs.readFileSync(p, 'utf8');
      }
    };
    walk(dir);
    // this test's mounts and /'s (other engineers' tests mount and unmount elsewhere meanwhile)
    const ours = listMounts().filter((m) => m.mountpoint === '/' || m.mountpoint.startsWith(dir + path.sep));
    return { files, mounts: ours.map((m) => `${m.mountpoint} ${m.fstype} ${m.source}`) };
  };

  const rows = readmeRows();
  it('the table has its rows', () => expect(rows.length).toBeGreaterThanOrEqual(15));
  for (const row of rows) {
    it(`${row.name}: ledgerfs ${row.command}`, () => {
      const before = snapshot();
      const r = spawnSync(process.execPath, [CLI, ...words(fill(row.command))], {
        encoding: 'utf8', env: { ...process.env, XDG_STATE_HOME: path.join(dir, 'xdg') }, timeout: 30_000,
      });
      const stderr = r.stderr.split('\n').filter((l) => l && !l.startsWith('{"level"'));
      expect(stderr).toHaveLength(1);
      expect(stderr[0]).toContain(`ledgerfs: ${fill(row.message)}`);
      expect(r.status).toBe(row.exit);
      expect(snapshot()).toEqual(before);
      expect(fs.existsSync(path.join(dir, 'xdg'))).toBe(false);
    });
  }
});
