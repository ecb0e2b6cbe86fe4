import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, onGcs, py, TEST_BINDING, type TestMount } from '../helpers/mount.js';
import { startJournaledMount, type JournaledMount } from '../helpers/journaled-mount.js';

/*
 * What the operator reviews cannot be redrawn by the program it reviews. A sandboxed program
 * chooses its file names and their content; `ledgerfs log`, `diff`, `show` and `rollback
 * --dry-run` print them to the operator's terminal. A newline in a name forged a whole line
 * ("D notes.md" where nothing was deleted), a carriage return or ESC sequence
 * (cursor up, erase line) could erase the line that shows a deletion before anyone read it.
 * Each such character is printed as an escape (`\x1b`, `\x0a`, `\u{202e}`) instead.
 */

// ESC [1A ESC [2K: cursor up one line, erase it. \r: back to the line's start. U+202E: right-to-left override.
const NAMES = ['erase\x1b[1A\x1b[2K.txt', 'cr\rD forged.txt', 'nl\nD forged-too.txt', 'bidi\u202etxt.exe', 'c1\u009b2J.txt'];
const CONTENT = 'line one\n\x1b[1A\x1b[2Khidden\r\n';

function ledgerfs(m: TestMount, args: string[]): string {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: { ...process.env, ...m.env }, timeout: 60_000 });
  if (r.status !== 0) throw new Error(`ledgerfs ${args.join(' ')} exited ${r.status}\n${r.stderr}\n${r.stdout}`);
  return r.stdout;
}

/** A character a terminal acts on rather than shows (tab and the line breaks we print aside). */
const ACTIVE = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]/u;

describe.skipIf(TEST_BINDING === 'fuse-native' || onGcs)('review output: names and content a program chose', () => {
  let j: JournaledMount;
  beforeAll(async () => {
    j = await startJournaledMount('review-run');
    py(`import json, sys\nfor n in json.loads(sys.argv[1]):\n    open(n, 'w').write(sys.argv[2])\nopen('notes.txt', 'w').write('x')\n`, j.m.mnt, [JSON.stringify(NAMES), CONTENT]);
  }, 120_000);
  afterAll(async () => {
    await j?.finish();
  });

  const outputs = (): Record<string, string> => {
    const args = ['--source', j.m.src, '--state', j.state];
    return {
      log: ledgerfs(j.m, ['log', ...args]),
      diff: ledgerfs(j.m, ['diff', ...args, '--session', 'review-run']),
      show: ledgerfs(j.m, ['show', ...args, '1']),
      rollback: ledgerfs(j.m, ['rollback', ...args, '--session', 'review-run', '--dry-run']),
    };
  };

  it('prints no character a terminal would act on, and one line per change', () => {
    const out = outputs();
    for (const [cmd, text] of Object.entries(out)) {
      expect(ACTIVE.exec(text), `${cmd} printed ${JSON.stringify(text)}`).toBeNull();
      expect(text, cmd).not.toMatch(/^D forged/m);
    }
    // every line of the log is a record's, none begun by a name's newline
    for (const l of out.log.trim().split('\n')) expect(l, out.log).toMatch(/^#\d+ /);
    expect(out.diff.split('\n').filter((l) => /^[A-Z] \//.test(l)), out.diff).toHaveLength(NAMES.length + 1);
    expect(out.diff).toContain('A /erase\\x1b[1A\\x1b[2K.txt');
    expect(out.diff).toContain('A /nl\\x0aD forged-too.txt');
    expect(out.diff).toContain('A /bidi\\u{202e}txt.exe');
    // the content's ESC is shown too, its line breaks kept
    expect(out.diff).toContain('+\\x1b[1A\\x1b[2Khidden\\x0d');
  });

  it('--json keeps every character as it is', () => {
    const rows = JSON.parse(ledgerfs(j.m, ['diff', '--source', j.m.src, '--state', j.state, '--session', 'review-run', '--json', '--no-content'])) as { path: string }[];
    expect(rows.map((r) => r.path).sort()).toEqual([...NAMES, 'notes.txt'].map((n) => `/${n}`).sort());
  });
});
