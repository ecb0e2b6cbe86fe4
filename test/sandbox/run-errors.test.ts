import { afterEach, describe, expect, it } from 'vitest';
import fs from 'node:fs';
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
});
