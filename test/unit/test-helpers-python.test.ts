import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { pathWithRealPython } from '../helpers/python.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/** The test run's python3 (global-setup): a version manager's shim is skipped, a real one kept. */
const real = spawnSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8' }).stdout?.trim();

describe.skipIf(!real)('test helpers: python3 without a version manager shim', () => {
  let tmp: string | undefined;
  afterEach(() => rmTemp(tmp));

  it('a shim first on PATH: PATH gets a directory whose python3 is the interpreter the shim runs', () => {
    tmp = makeTemp('python-path');
    const shims = path.join(tmp, 'shims');
    fs.mkdirSync(shims);
    // like pyenv's: a script that execs the interpreter (and counts that it ran)
    fs.writeFileSync(path.join(shims, 'python3'), `#!/bin/bash\necho shim >> ${tmp}/ran\nexec ${JSON.stringify(real)} "$@"\n`, { mode: 0o755 });
    const env: NodeJS.ProcessEnv = { HOME: process.env.HOME, PATH: `${shims}:/usr/bin:/bin` };
    const dir = pathWithRealPython(env, tmp);
    expect(dir).toBeDefined();
    expect(env.PATH).toBe(`${dir}:${shims}:/usr/bin:/bin`);
    fs.rmSync(path.join(tmp, 'ran'));
    // a bare `python3`, from a shell line as from execFile, now starts the interpreter itself
    const out = execFileSync('bash', ['-c', 'python3 -c "import sys; print(sys.prefix)"'], { encoding: 'utf8', env });
    expect(out.trim()).toBe(execFileSync(real as string, ['-c', 'import sys; print(sys.prefix)'], { encoding: 'utf8' }).trim());
    expect(fs.existsSync(path.join(tmp, 'ran'))).toBe(false);
  });

  it('python3 first on PATH is the interpreter: PATH is left alone', () => {
    tmp = makeTemp('python-path');
    const env: NodeJS.ProcessEnv = { PATH: `${path.dirname(real as string)}:/usr/bin:/bin` };
    expect(pathWithRealPython(env, tmp)).toBeUndefined();
    expect(env.PATH).toBe(`${path.dirname(real as string)}:/usr/bin:/bin`);
  });

  it('no python3 at all: PATH is left alone', () => {
    tmp = makeTemp('python-path');
    const env: NodeJS.ProcessEnv = { PATH: path.join(tmp, 'empty') };
    expect(pathWithRealPython(env, tmp)).toBeUndefined();
    expect(env.PATH).toBe(path.join(tmp, 'empty'));
  });
});
