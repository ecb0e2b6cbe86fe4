import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { constants as C } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { buildHistory } from '../../src/journal/history.js';
import { stateLayout } from '../../src/journal/layout.js';
import { readJournal } from '../../src/journal/reader.js';
import { CLI } from '../helpers/mount.js';
import { openTestJournal, vfsFs } from '../helpers/journal.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { snapshotTree } from '../helpers/tree.js';

// The before-images a rollback writes back are checked against their hashes first: a damaged
// one stops the rollback before it changes anything (issue 13.3), through the real CLI.

describe('rollback checks every before-image before it changes anything', () => {
  let dir: string;
  let src: string;
  let state: string;
  beforeEach(async () => {
    dir = makeTemp('rollback-integrity');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    fs.mkdirSync(src);
    fs.writeFileSync(path.join(src, 'a.txt'), 'the original text of a\n'.repeat(50));
    fs.writeFileSync(path.join(src, 'b.txt'), 'b as it was\n');
    fs.writeFileSync(path.join(src, 'gone.txt'), 'removed later\n');
    const j = await openTestJournal(src, state);
    await vfsFs.write(j.vfs, '/b.txt', 'b rewritten', C.O_WRONLY | C.O_TRUNC);
    await vfsFs.write(j.vfs, '/new.txt', 'made by the session');
    await vfsFs.write(j.vfs, '/a.txt', 'a overwritten', C.O_WRONLY, 0);
    await j.vfs.unlink('/gone.txt');
    await j.close();
  });
  afterEach(() => rmTemp(dir));

  const blobOf = (file: string) => {
    const h = buildHistory(readJournal(state).records);
    const op = h.ops.find((o) => o.paths[0] === file && (o.capture || o.before[0]?.blob));
    const blob = (op?.capture?.blob ?? op?.before[0]?.blob) as string;
    return path.join(stateLayout(state).blobsDir, blob.slice(0, 2), blob.slice(2));
  };
  const rollback = (...args: string[]) => spawnSync(process.execPath, [CLI, 'rollback', '--state', state, '--source', src, '--to', '0', ...args], { encoding: 'utf8' });

  const damages: Array<[string, (blob: string) => void]> = [
    ['a flipped byte', (b) => {
      const data = fs.readFileSync(b);
      data[3] = (data[3] as number) ^ 0x01;
      fs.chmodSync(b, 0o600);
      fs.writeFileSync(b, data);
    }],
    ['a truncated blob', (b) => fs.truncateSync(b, 5)],
    ['a missing blob', (b) => fs.rmSync(b)],
  ];
  for (const [what, damage] of damages) {
    it(`refuses with ${what}, naming the file and blob; the tree is unchanged`, () => {
      const before = snapshotTree(src);
      const blob = blobOf('/a.txt');
      damage(blob);
      for (const extra of [[], ['--force'], ['--dry-run']]) {
        const r = rollback(...extra);
        expect(r.status, r.stdout).not.toBe(0);
        expect(r.stderr).toMatch(/Rollback refused, nothing was changed: 1 before-image/);
        expect(r.stderr).toContain(`/a.txt: blob ${path.basename(path.dirname(blob))}${path.basename(blob).slice(0, 14)}`);
        expect(r.stderr).not.toMatch(/\n\s+at /); // a sentence, not a stack trace
        expect(snapshotTree(src)).toEqual(before);
      }
    });
  }

  it('restores everything when the before-images are intact', () => {
    const r = rollback();
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(fs.readFileSync(path.join(src, 'a.txt'), 'utf8')).toBe('the original text of a\n'.repeat(50));
    expect(fs.readFileSync(path.join(src, 'gone.txt'), 'utf8')).toBe('removed later\n');
    expect(fs.existsSync(path.join(src, 'new.txt'))).toBe(false);
  });
});
