import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { findOnPath } from '../../src/core/find-on-path.js';

/**
 * Tests start python3 a few hundred times (helpers' py(), spawned writers, `sh` lines). Where
 * python3 on PATH is a version manager's shim (pyenv: a bash script that looks up the version,
 * 0.05-0.1 s of CPU before Python starts), put a directory holding only a `python3` link to the
 * interpreter the shim picks first on PATH, so every later `python3` (also inside shell commands)
 * skips the shim. Where python3 is already the interpreter (or is missing), PATH stays as it is.
 * Returns the directory made (the caller removes it), or undefined.
 */
export function pathWithRealPython(env: NodeJS.ProcessEnv, tmpRoot = os.tmpdir()): string | undefined {
  const r = spawnSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8', env, timeout: 30_000 });
  const exe = r.status === 0 ? r.stdout.trim() : '';
  if (!path.isAbsolute(exe) || !fs.existsSync(exe)) return undefined;
  const onPath = findOnPath('python3', env.PATH ?? '');
  if (onPath && fs.realpathSync(onPath) === fs.realpathSync(exe)) return undefined;
  const dir = fs.mkdtempSync(path.join(tmpRoot, 'ledgerfs-python-'));
  // a link, not a copy: Python finds its standard library from the link's target
  fs.symlinkSync(exe, path.join(dir, 'python3'));
  env.PATH = `${dir}${path.delimiter}${env.PATH ?? ''}`;
  return dir;
}
