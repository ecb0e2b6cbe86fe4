import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, REPO } from '../helpers/mount.js';
import { openTestJournal, vfsFs } from '../helpers/journal.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

const ledgerfs = (...args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8' });

describe('ledgerfs --version (issue 16.6)', () => {
  it('prints package.json\'s version and exits 0', () => {
    const version = (JSON.parse(fs.readFileSync(path.join(REPO, 'package.json'), 'utf8')) as { version: string }).version;
    for (const flag of ['--version', '-V']) {
      const r = ledgerfs(flag);
      expect(r.stdout).toBe(`${version}\n`);
      expect(r.status).toBe(0);
    }
  });
});

describe('--json outputs: every time is ISO 8601 with zone (issue 16.6)', () => {
  let dir: string;
  let ws: string[];
  beforeAll(async () => {
    dir = makeTemp('cli');
    const src = path.join(dir, 'src');
    fs.mkdirSync(src);
    const j = await openTestJournal(src, path.join(dir, 'state'), 's1');
    await vfsFs.write(j.vfs, '/a.txt', 'one\n');
    await vfsFs.write(j.vfs, '/a.txt', 'two\n');
    await j.close();
    ws = ['--source', src, '--state', path.join(dir, 'state')];
  });
  afterAll(() => rmTemp(dir));

  /** every value under a key that names a moment, anywhere in `v` */
  function times(v: unknown, out: unknown[] = []): unknown[] {
    if (Array.isArray(v)) for (const x of v) times(x, out);
    else if (v && typeof v === 'object') {
      for (const [k, x] of Object.entries(v)) {
        if (['time', 'endTime', 'started', 'cutoff'].includes(k)) out.push(x);
        times(x, out);
      }
    }
    return out;
  }

  for (const args of [['log', '--json'], ['show', '2', '--json'], ['rollback', '--to', '0', '--dry-run', '--json'], ['diff', '--session', 's1', '--json']]) {
    it(args.join(' '), () => {
      const r = ledgerfs(...args, ...ws);
      expect(r.stderr).toBe('');
      const found = times(JSON.parse(r.stdout));
      if (args[0] !== 'diff') expect(found.length).toBeGreaterThan(0);
      for (const t of found) expect(t).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
    });
  }
});

describe('documentation refers to what is in the repository (issue 16.6)', () => {
  const docs = ['README.md', 'docs/architecture.md', 'native/README.md', 'src/backend/gcs/README.md', 'scripts/bench'];
  for (const doc of docs) {
    it(doc, () => {
      const text = fs.readFileSync(path.join(REPO, doc), 'utf8');
      expect(text).not.toMatch(/\/work\/|outside this repository|ARCHITECTURE\.md/);
      expect(text).not.toMatch(/soon, a Google Cloud Storage/);
      for (const m of text.matchAll(/`((?:src|native|docs|test|scripts|bin|patches)\/[A-Za-z0-9_./-]+)`/g)) {
        expect(fs.existsSync(path.join(REPO, (m[1] as string).replace(/\.$/, ''))), `${doc} names ${m[1]}`).toBe(true);
      }
    });
  }
  it('mount --help names exactly the bindings there are', () => {
    const help = ledgerfs('mount', '--help').stdout.replace(/\s+/g, ' ');
    expect(help).toContain('(choices: "native-ll", "fuse-native")');
    expect(help).toContain('default: native-ll');
  });
});
