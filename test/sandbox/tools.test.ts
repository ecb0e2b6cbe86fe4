import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { changeLines, sandboxDir, type RunOutcome, type SandboxDir } from '../helpers/sandbox.js';
import { snapshotTree } from '../helpers/tree.js';

/** A case folder as an intake clerk leaves it. */
const CASE: Record<string, string | Buffer> = {
  'case/intake.md': '# Intake\n\n- client called on Monday\n',
  'case/notes-1.txt': 'first interview\n',
  'case/notes-2.txt': 'second interview\n',
  'case/photo1.jpg': Buffer.from(Array.from({ length: 5000 }, (_, i) => (i * 7) % 256)),
  'case/photo2.jpg': Buffer.from(Array.from({ length: 3000 }, (_, i) => (i * 13) % 256)),
  'case/letter.txt': 'Dear client,\n',
  'case/old-draft.docx': 'outdated draft\n',
  'case/scratch.tmp': 'scratch\n',
};

/** The program under test: moves files into subfolders, renames, deletes, writes a report. */
const REORGANISE = `
import os, shutil, sys
case = sys.argv[1]
done = []
for sub in ('notes', 'photos'):
    os.mkdir(os.path.join(case, sub))
for name in sorted(os.listdir(case)):
    p = os.path.join(case, name)
    if name.startswith('notes-') and name.endswith('.txt'):
        shutil.move(p, os.path.join(case, 'notes', name)); done.append('filed ' + name)
    elif name.endswith('.jpg'):
        shutil.move(p, os.path.join(case, 'photos', name)); done.append('filed ' + name)
os.rename(os.path.join(case, 'letter.txt'), os.path.join(case, 'letter-to-client.txt'))
done.append('renamed letter.txt')
for junk in ('old-draft.docx', 'scratch.tmp'):
    os.remove(os.path.join(case, junk)); done.append('deleted ' + junk)
with open(os.path.join(case, 'report.md'), 'w') as f:
    f.write('# Reorganised\\n' + ''.join('- %s\\n' % d for d in done))
print(len(done), 'changes')
`;

function populate(src: string): void {
  for (const [rel, body] of Object.entries(CASE)) {
    fs.mkdirSync(path.dirname(path.join(src, rel)), { recursive: true });
    fs.writeFileSync(path.join(src, rel), body);
  }
}

function expectOk(r: RunOutcome): void {
  expect(r.code, `ledgerfs run failed\n--- stdout ---\n${r.stdout}\n--- stderr ---\n${r.stderr}`).toBe(0);
}

describe('ledgerfs run: real tools in the sandbox', () => {
  let sb: SandboxDir;
  beforeEach(() => {
    sb = sandboxDir(populate);
  });
  afterEach(() => {
    const left = sb.mounts();
    sb.cleanup();
    expect(left).toEqual([]);
  });

  it('python3 reorganises a case folder; diff --session lists exactly that; rollback --session restores it byte for byte', async () => {
    const script = path.join(sb.dir, 'tools', 'reorganise.py');
    fs.mkdirSync(path.dirname(script));
    fs.writeFileSync(script, REORGANISE);
    const before = snapshotTree(sb.src);

    const r = await sb.run(['--source', sb.src, '--state', sb.state, '--ro', script, '--', 'python3', script, 'case']);
    expectOk(r);
    expect(r.stdout).toBe('7 changes\n');
    expect(r.session).toMatch(/^run-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-[0-9a-f]{4}$/);
    expect(r.stderr).toContain(`ledgerfs rollback --state ${sb.state} --session ${r.session}`);
    const session = r.session as string;
    expect(fs.readdirSync(path.join(sb.src, 'case')).sort()).toEqual(['intake.md', 'letter-to-client.txt', 'notes', 'photos', 'report.md']);
    expect(fs.readFileSync(path.join(sb.src, 'case/report.md'), 'utf8')).toContain('- deleted scratch.tmp\n');

    const log = JSON.parse(sb.cli(['log', '--state', sb.state, '--json'])) as { session: string; actor: string }[];
    expect(log.length).toBeGreaterThanOrEqual(10);
    expect(log.every((e) => e.session === session && e.actor === 'run')).toBe(true);

    expect(changeLines(sb.cli(['diff', '--state', sb.state, '--session', session]))).toEqual([
      'A /case/notes/',
      'A /case/photos/',
      'A /case/report.md',
      'D /case/old-draft.docx',
      'D /case/scratch.tmp',
      'R /case/letter.txt -> /case/letter-to-client.txt',
      'R /case/notes-1.txt -> /case/notes/notes-1.txt',
      'R /case/notes-2.txt -> /case/notes/notes-2.txt',
      'R /case/photo1.jpg -> /case/photos/photo1.jpg',
      'R /case/photo2.jpg -> /case/photos/photo2.jpg',
    ]);

    expect(sb.cli(['rollback', '--state', sb.state, '--session', session])).toMatch(/Rolled back \d+ mutation\(s\) \(on the unmounted workspace\)/);
    expect(snapshotTree(sb.src)).toEqual(before);
    for (const [rel, body] of Object.entries(CASE)) expect(fs.readFileSync(path.join(sb.src, rel)).equals(Buffer.from(body)), rel).toBe(true);
  });

  it('git init, add, commit: the repository is whole on the host', async () => {
    const r = await sb.run([
      '--source', sb.src, '--state', sb.state, '--',
      'sh', '-c', 'git init -q -b main && git add -A && git -c user.name=Agent -c user.email=agent@example.com commit -qm "case as received" && git log --format=%s',
    ]);
    expectOk(r);
    expect(r.stdout).toBe('case as received\n');
    expect(execFileSync('git', ['-C', sb.src, 'log', '--format=%an %s'], { encoding: 'utf8' })).toBe('Agent case as received\n');
    expect(execFileSync('git', ['-C', sb.src, 'status', '--porcelain'], { encoding: 'utf8' })).toBe('');
    execFileSync('git', ['-C', sb.src, 'fsck', '--strict'], { stdio: 'pipe' });
    expect(execFileSync('git', ['-C', sb.src, 'ls-files'], { encoding: 'utf8' }).split('\n').filter(Boolean).sort()).toEqual(Object.keys(CASE).sort());
  });

  it('sqlite3 creates and queries a database that the host can read', async () => {
    const r = await sb.run([
      '--source', sb.src, '--state', sb.state, '--',
      'sqlite3', 'case/index.db',
      "create table docs(name text, bytes int); insert into docs values ('intake.md', 38), ('letter.txt', 13); select count(*), sum(bytes) from docs;",
    ]);
    expectOk(r);
    expect(r.stdout).toBe('2|51\n');
    expect(execFileSync('sqlite3', [path.join(sb.src, 'case/index.db'), 'pragma integrity_check; select name from docs order by name;'], { encoding: 'utf8' }))
      .toBe('ok\nintake.md\nletter.txt\n');
  });

  it('tar packs and unpacks the folder; the copy matches', async () => {
    const r = await sb.run([
      '--source', sb.src, '--state', sb.state, '--',
      'sh', '-c', 'tar -czf case.tgz case && mkdir restore && tar -xzf case.tgz -C restore && diff -r case restore/case && tar -tzf case.tgz | wc -l',
    ]);
    expectOk(r);
    expect(r.stdout.trim()).toBe(String(Object.keys(CASE).length + 1));
    expect(snapshotTree(path.join(sb.src, 'restore'))).toEqual(snapshotTree(sb.src, ['case.tgz', 'restore']));
  });

  it('passes stdin to the program and its stdout back', async () => {
    const r = await sb.run(
      ['--source', sb.src, '--state', sb.state, '--', 'python3', '-c', "import sys; d = sys.stdin.read(); open('case/dictated.txt', 'w').write(d); print(d.upper(), end='')"],
      { input: 'met the client\nsigned the retainer\n' },
    );
    expectOk(r);
    expect(r.stdout).toBe('MET THE CLIENT\nSIGNED THE RETAINER\n');
    expect(fs.readFileSync(path.join(sb.src, 'case/dictated.txt'), 'utf8')).toBe('met the client\nsigned the retainer\n');
  });
});
