import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * The layering rule (.dependency-cruiser.cjs) holds for src/, and it can fail: the same checker
 * run on a copy of src/ with one planted import reports exactly that import.
 */
const ROOT = path.resolve(import.meta.dirname, '../..');
const CRUISE = path.join(ROOT, 'node_modules/dependency-cruiser/bin/dependency-cruise.mjs');

function cruise(cwd: string): { ok: boolean; out: string } {
  try {
    const out = execFileSync(process.execPath, [CRUISE, 'src', '--config', '.dependency-cruiser.cjs', '--output-type', 'err'], { cwd, encoding: 'utf8', stdio: 'pipe' });
    return { ok: true, out };
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string };
    return { ok: false, out: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}

describe('layering', () => {
  let dir: string;
  /** one run of the checker over a copy of src/ with every planted violation below (a run takes seconds) */
  let planted: { ok: boolean; out: string };
  beforeAll(() => {
    dir = makeTemp('layering');
    fs.cpSync(path.join(ROOT, 'src'), path.join(dir, 'src'), { recursive: true });
    for (const f of ['.dependency-cruiser.cjs', 'tsconfig.json', 'package.json']) fs.copyFileSync(path.join(ROOT, f), path.join(dir, f));
    const plant = (file: string, text: string) => fs.writeFileSync(path.join(dir, 'src', file), text);
    // an upward import (backend -> cli)
    plant('backend/planted.ts', "import { buildProgram } from '../cli/main.js';\nexport const p = buildProgram;\n");
    // an upward import made with import() (the CLI loads GCS, metrics and the emulator that way)
    plant('backend/planted-dynamic.ts', "export const p = async () => (await import('../app/index.js')).UserError;\n");
    // a cycle
    plant('core/planted-a.ts', "import { b } from './planted-b.js';\nexport const a = () => b;\n");
    plant('core/planted-b.ts', "import { a } from './planted-a.js';\nexport const b = () => a;\n");
    // an import past a layer's index.ts
    plant('vfs/planted-c.ts', "import { VfsError } from '../core/errors.js';\nexport const c = VfsError;\n");
    planted = cruise(dir);
  });
  afterAll(() => rmTemp(dir));

  it('src/ has no upward import, no cycle and no reach past an index.ts', () => {
    const r = cruise(ROOT);
    expect(r.out).toContain('no dependency violations found');
    expect(r.ok).toBe(true);
  });

  it('fails on a planted upward import (backend -> cli)', () => {
    expect(planted.ok).toBe(false);
    expect(planted.out).toMatch(/upward-from-backend: src\/backend\/planted\.ts → src\/cli\/main\.ts/);
  });

  it('fails on a planted upward import made with import()', () => {
    expect(planted.ok).toBe(false);
    expect(planted.out).toMatch(/upward-from-backend: src\/backend\/planted-dynamic\.ts → src\/app\/index\.ts/);
  });

  it('fails on a planted cycle and on an import past a layer index', () => {
    expect(planted.ok).toBe(false);
    expect(planted.out).toMatch(/no-circular: src\/core\/planted-a\.ts/);
    expect(planted.out).toMatch(/through-the-index: src\/vfs\/planted-c\.ts → src\/core\/errors\.ts/);
  });
});
