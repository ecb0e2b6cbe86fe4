import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { addTextDiffs, netChanges } from '../../src/journal/diff.js';
import { buildHistory } from '../../src/journal/history.js';
import { readJournal } from '../../src/journal/reader.js';
import { unifiedDiff } from '../../src/journal/text-diff.js';
import { openTestJournal, vfsFs, type TestJournal } from '../helpers/journal.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/** Apply a unified diff to `before` (checks that the hunks say what changed, exactly). */
function patch(before: string, diff: string): string {
  const a = before === '' ? [] : before.replace(/\n$/, '').split('\n');
  const out: string[] = [];
  let i = 0;
  const lines = diff.split('\n').slice(2);
  for (let k = 0; k < lines.length; k++) {
    const l = lines[k] as string;
    const h = /^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@$/.exec(l);
    if (h) {
      const start = Number(h[1]) - (h[2] === '0' ? 0 : 1);
      while (i < start) out.push(a[i++] as string);
      continue;
    }
    if (l.startsWith(' ')) out.push(a[i++] as string);
    else if (l.startsWith('-')) i++;
    else if (l.startsWith('+')) out.push(l.slice(1));
  }
  while (i < a.length) out.push(a[i++] as string);
  return out.length ? out.join('\n') + '\n' : '';
}

describe('unified diff', () => {
  it('says exactly what changed (property)', () => {
    const text = fc.array(fc.constantFrom('a', 'b', 'c', 'dd', ''), { maxLength: 30 }).map((l) => (l.length ? l.join('\n') + '\n' : ''));
    fc.assert(
      fc.property(text, text, (x, y) => {
        const d = unifiedDiff(x, y, 'a/f', 'b/f');
        if (x === y) return d === null;
        return d !== null && patch(x, d) === y;
      }),
      { numRuns: 300, seed: 7 },
    );
  });

  it('is read by GNU patch, with and without a final newline (property)', () => {
    const dir = makeTemp('textdiff');
    try {
      const body = fc.array(fc.constantFrom('a', 'b', 'c', 'dd', ''), { maxLength: 20 }).map((l) => l.join('\n'));
      const text = fc.tuple(body, fc.boolean()).map(([b, nl]) => (b === '' ? b : nl ? `${b}\n` : b));
      fc.assert(
        fc.property(text, text, (x, y) => {
          const d = unifiedDiff(x, y, 'a/f', 'b/f');
          if (d === null) return x === y;
          const f = path.join(dir, 'f');
          fs.writeFileSync(f, x);
          execFileSync('patch', ['--quiet', '--force', f], { input: d, stdio: ['pipe', 'ignore', 'pipe'] });
          return fs.readFileSync(f, 'utf8') === y;
        }),
        { numRuns: 60, seed: 11 },
      );
    } finally {
      rmTemp(dir);
    }
  });

  it('looks like diff -u', () => {
    expect(unifiedDiff('one\ntwo\nthree\n', 'one\n2\nthree\nfour\n', 'a/f', 'b/f')).toBe(
      '--- a/f\n+++ b/f\n@@ -1,3 +1,4 @@\n one\n-two\n+2\n three\n+four\n',
    );
    expect(unifiedDiff('', 'x', '/dev/null', 'b/f')).toBe('--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+x\n\\ No newline at end of file\n');
  });
});

describe('net changes of a range', () => {
  let dir: string;
  let src: string;
  let state: string;
  let j: TestJournal;
  beforeEach(async () => {
    dir = makeTemp('journal');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    fs.mkdirSync(path.join(src, 'dir'), { recursive: true });
    fs.writeFileSync(path.join(src, 'keep.txt'), 'line 1\nline 2\n');
    fs.writeFileSync(path.join(src, 'dir/old.txt'), 'old\n');
    fs.writeFileSync(path.join(src, 'gone.txt'), 'bye\n');
    j = await openTestJournal(src, state);
  });
  afterEach(async () => {
    await j.close();
    rmTemp(dir);
  });

  it('collapses a session into added, modified, deleted and renamed paths with text diffs', async () => {
    const { vfs } = j;
    await vfsFs.append(vfs, '/keep.txt', 'line 3\n');
    await vfsFs.write(vfs, '/tmp.txt', 'scratch'); // created and removed: no change
    await vfs.unlink('/tmp.txt');
    await vfs.rename('/dir', '/moved');
    await vfs.unlink('/gone.txt');
    await vfsFs.write(vfs, '/new.txt', 'hello\n');
    await vfsFs.write(vfs, '/.edit', 'line 1\nLINE 2\nline 3\n'); // an editor's save: temp + rename over
    await vfs.rename('/.edit', '/keep.txt');
    await vfs.chmod('/moved/old.txt', 0o600);
    j.svc.writer.flush();
    const h = buildHistory(readJournal(state).records);
    const { changes, nodes } = netChanges(h.ops);
    await addTextDiffs(changes, nodes, { blobs: j.svc.blobs, backend: j.backend, later: [] });
    expect(changes.map((c) => `${c.kind} ${c.from ? `${c.from} -> ` : ''}${c.path}`)).toEqual([
      'deleted /gone.txt', 'modified /keep.txt', 'renamed /dir -> /moved', 'modified /moved/old.txt', 'added /new.txt',
    ]);
    const keep = changes.find((c) => c.path === '/keep.txt');
    expect(keep?.diff).toBe('--- a/keep.txt\n+++ b/keep.txt\n@@ -1,2 +1,3 @@\n line 1\n-line 2\n+LINE 2\n+line 3\n');
    expect(changes.find((c) => c.path === '/gone.txt')?.diff).toMatch(/^-bye$/m);
    expect(changes.find((c) => c.path === '/moved/old.txt')?.details).toEqual(['mode 644 -> 600']);
  });
});
