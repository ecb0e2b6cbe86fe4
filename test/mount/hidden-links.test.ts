import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onGcs, sh, startMount, type TestMount } from '../helpers/mount.js';
import { putFiles } from '../helpers/policy.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * "Nothing tells a program that hidden names exist" (README, Policy): a directory's link count
 * did. It is 2 + its subdirectories, and the kernel counts the hidden ones (.ssh, .aws, a
 * directory kept for its hidden names) too, so `stat -c %h .` answered how many directories
 * the program could not see. The view counts only what it shows.
 */
describe.skipIf(onGcs)('hidden directories and link counts', () => {
  let m: TestMount;
  let dir: string;
  beforeAll(async () => {
    dir = makeTemp('hidden-links');
    const ws = path.join(dir, 'workspace');
    putFiles(ws, { 'case/notes.md': 'n', 'case/visible/a.txt': 'a', 'case/.ssh/id_rsa': 'KEY', 'case/.aws/credentials': 'AWS', 'case/drafts/private/p.txt': 'p', 'case/drafts/public/q.txt': 'q' });
    fs.writeFileSync(path.join(dir, 'case.yaml'), 'preset: sandboxed\nbackend: { type: local, path: ./workspace }\nroots:\n  - path: /case\n    mode: rw\n    hide: ["drafts/private"]\n');
    m = await startMount({ src: ws, omitSource: true, args: ['--policy', path.join(dir, 'case.yaml')] });
  }, 120_000);
  afterAll(async () => {
    await m?.stop();
    if (dir) rmTemp(dir);
  });

  it('a directory counts only the subdirectories the program sees', () => {
    // case: visible, drafts shown; .ssh, .aws hidden. drafts: public shown, private hidden
    expect(sh('stat -c %h case case/drafts case/visible', m.mnt).trim().split('\n')).toEqual(['4', '3', '2']);
    // find's leaf optimisation (nlink - 2 subdirectories) still finds every visible directory
    expect(sh('find case -type d | sort', m.mnt).trim().split('\n')).toEqual(['case', 'case/drafts', 'case/drafts/public', 'case/visible']);
  });

  it('counted again when the directory changes (a hidden one appears beside the mount, a visible one inside)', async () => {
    expect(sh('stat -c %h case/visible', m.mnt).trim()).toBe('2');
    fs.mkdirSync(path.join(dir, 'workspace/case/visible/.ssh'));
    sh('mkdir case/visible/sub', m.mnt);
    // (past the kernel's attribute cache: the view answers again)
    await new Promise((r) => setTimeout(r, 1100));
    expect(sh('stat -c %h case/visible', m.mnt).trim()).toBe('3');
    sh('rmdir case/visible/sub', m.mnt);
    fs.rmdirSync(path.join(dir, 'workspace/case/visible/.ssh'));
    await new Promise((r) => setTimeout(r, 1100));
    expect(sh('stat -c %h case/visible', m.mnt).trim()).toBe('2');
  });

  it('a directory moved aside for its hidden names is not counted either', () => {
    // drafts/private is hidden: drafts looks like it holds only public; remove public, then drafts
    sh('rm -r case/drafts/public && rmdir case/drafts', m.mnt);
    expect(fs.readdirSync(path.join(dir, 'workspace/case')).some((n) => n.startsWith('.ledgerfs-kept.'))).toBe(true);
    expect(sh('stat -c %h case', m.mnt).trim()).toBe('3');
  });
});
