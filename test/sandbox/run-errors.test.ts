import { afterEach, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { sandboxDir, type SandboxDir } from '../helpers/sandbox.js';

describe('ledgerfs run -- a program that is not there (issue 16.6)', () => {
  let sb: SandboxDir | undefined;
  afterEach(() => {
    sb?.cleanup();
    sb = undefined;
  });

  it('exits 127 with a sentence, as a shell does, and mounts nothing', async () => {
    sb = sandboxDir();
    for (const prog of ['nosuchprog', '/usr/bin/nosuchprog']) {
      const r = await sb.run(['--source', sb.src, '--state', sb.state, '--', prog, 'arg']);
      expect(r.stderr).toMatch(new RegExp(`^ledgerfs: ${prog}: (command not found in the sandbox|no such program in the sandbox)`));
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.code).toBe(127);
    }
    expect(fs.existsSync(sb.state)).toBe(false);
    const ok = await sb.run(['--source', sb.src, '--state', sb.state, '--', 'sh', '-c', 'exit 3']);
    expect(ok.code).toBe(3);
  });

  it('--mount of a FUSE mount that is not ledgerfs (bindfs) is refused: its changes would go unjournaled', async () => {
    sb = sandboxDir();
    const src = path.join(sb.dir, 'bind-src');
    const t = path.join(sb.dir, 'bindfs');
    fs.mkdirSync(src);
    fs.mkdirSync(t);
    execFileSync('bindfs', [src, t]);
    try {
      const r = await sb.run(['--mount', t, '--', 'touch', 'x']);
      expect(r.stderr).toMatch(new RegExp(`ledgerfs: --mount ${t}: fuse(\\.bindfs)? \\(${src}\\) is mounted there, not ledgerfs`));
      expect(r.code).toBe(125);
      expect(fs.readdirSync(src)).toEqual([]);
    } finally {
      execFileSync('umount', [t]);
    }
  });
});
