import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { changeLines, sandboxDir, type SandboxDir } from '../helpers/sandbox.js';
import { snapshotTree } from '../helpers/tree.js';

/**
 * `ledgerfs run --staged` (issue 18): the program reorganises a case folder and sees its work;
 * the workspace is untouched until apply, which makes it exactly what the program saw; the
 * apply's rollback restores the original.
 */
const CASE: Record<string, string> = {
  'case/intake.md': '# Intake\n',
  'case/notes-1.txt': 'first interview\n',
  'case/notes-2.txt': 'second interview\n',
  'case/photos-old/p1.jpg': 'jpeg 1\n',
  'case/letter.txt': 'Dear client,\n',
  'case/scratch.tmp': 'scratch\n',
};

const REORGANISE = `
import os, shutil, sys
case = sys.argv[1]
os.mkdir(os.path.join(case, 'notes'))
for n in ('notes-1.txt', 'notes-2.txt'):
    shutil.move(os.path.join(case, n), os.path.join(case, 'notes', n))
os.rename(os.path.join(case, 'photos-old'), os.path.join(case, 'photos'))
os.remove(os.path.join(case, 'scratch.tmp'))
with open(os.path.join(case, 'intake.md'), 'a') as f: f.write('- filed\\n')
with open(os.path.join(case, 'report.md'), 'w') as f: f.write('# Reorganised\\n')
`;

/** what a tree holds, as the program prints it: path, type and sha256 of every node */
const LISTING = `
import hashlib, os, sys
for d, dirs, files in sorted(os.walk(sys.argv[1])):
    dirs.sort()
    for n in sorted(dirs): print('d', os.path.relpath(os.path.join(d, n), sys.argv[1]))
    for n in sorted(files):
        p = os.path.join(d, n)
        print('f', os.path.relpath(p, sys.argv[1]), hashlib.sha256(open(p, 'rb').read()).hexdigest()[:16])
`;

describe('ledgerfs run --staged', () => {
  let sb: SandboxDir;
  beforeEach(() => {
    sb = sandboxDir((src) => {
      for (const [rel, body] of Object.entries(CASE)) {
        fs.mkdirSync(path.dirname(path.join(src, rel)), { recursive: true });
        fs.writeFileSync(path.join(src, rel), body);
      }
    });
  });
  afterEach(() => {
    const left = sb.mounts();
    sb.cleanup();
    expect(left).toEqual([]);
  });

  it('the program sees its changes, the workspace none until apply; apply equals its view; rollback of the apply restores it', { timeout: 240_000 }, async () => {
    const tools = path.join(sb.dir, 'tools');
    fs.mkdirSync(tools);
    fs.writeFileSync(path.join(tools, 'reorganise.py'), REORGANISE);
    fs.writeFileSync(path.join(tools, 'listing.py'), LISTING);
    const before = snapshotTree(sb.src);
    const r = await sb.run(['--staged', '--session', 'staged-run-1', '--source', sb.src, '--state', sb.state, '--ro', tools, '--', 'sh', '-c', `python3 ${tools}/reorganise.py case && python3 ${tools}/listing.py case`]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`ledgerfs apply --state ${sb.state} --session staged-run-1`);
    const seen = r.stdout;
    expect(seen).toMatch(/^f notes\/notes-1\.txt /m);
    expect(seen).not.toMatch(/scratch\.tmp/);
    expect(snapshotTree(sb.src), 'nothing reached the workspace').toEqual(before);

    expect(changeLines(sb.cli(['diff', '--state', sb.state, '--session', 'staged-run-1']))).toEqual([
      'A /case/notes/',
      'A /case/report.md',
      'D /case/scratch.tmp',
      'M /case/intake.md',
      'R /case/notes-1.txt -> /case/notes/notes-1.txt',
      'R /case/notes-2.txt -> /case/notes/notes-2.txt',
      'R /case/photos-old -> /case/photos/',
    ]);

    const out = JSON.parse(sb.cli(['apply', '--state', sb.state, '--session', 'staged-run-1', '--json'])) as { applySession: string };
    const listing = execFileSync('python3', [path.join(tools, 'listing.py'), path.join(sb.src, 'case')], { encoding: 'utf8' });
    expect(listing, 'the workspace is what the program saw').toBe(seen);

    sb.cli(['rollback', '--state', sb.state, '--session', out.applySession]);
    expect(snapshotTree(sb.src), 'rollback of the apply restores the original').toEqual(before);
  });
});
