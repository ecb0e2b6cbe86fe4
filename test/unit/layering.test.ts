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
  beforeAll(() => {
    dir = makeTemp('layering');
    fs.cpSync(path.join(ROOT, 'src'), path.join(dir, 'src'), { recursive: true });
    for (const f of ['.dependency-cruiser.cjs', 'tsconfig.json', 'package.json']) fs.copyFileSync(path.join(ROOT, f), path.join(dir, f));
  });
  afterAll(() => rmTemp(dir));

  it('src/ has no upward import, no cycle and no reach past an index.ts', () => {
    const r = cruise(ROOT);
    expect(r.out).toContain('no dependency violations found');
    expect(r.ok).toBe(true);
  });

  it('fails on a planted upward import (backend -> cli)', () => {
    const planted = path.join(dir, 'src/backend/planted.ts');
    fs.writeFileSync(planted, "import { buildProgram } from '../cli/main.js';\nexport const p = buildProgram;\n");
    try {
      const r = cruise(dir);
      expect(r.ok).toBe(false);
      expect(r.out).toMatch(/upward-from-backend: src\/backend\/planted\.ts → src\/cli\/main\.ts/);
    } finally {
      fs.rmSync(planted);
    }
  });

  it('fails on a planted cycle and on an import past a layer index', () => {
    const a = path.join(dir, 'src/core/planted-a.ts');
    const b = path.join(dir, 'src/core/planted-b.ts');
    const c = path.join(dir, 'src/vfs/planted-c.ts');
    fs.writeFileSync(a, "import { b } from './planted-b.js';\nexport const a = () => b;\n");
    fs.writeFileSync(b, "import { a } from './planted-a.js';\nexport const b = () => a;\n");
    fs.writeFileSync(c, "import { VfsError } from '../core/errors.js';\nexport const c = VfsError;\n");
    try {
      const r = cruise(dir);
      expect(r.ok).toBe(false);
      expect(r.out).toMatch(/no-circular: src\/core\/planted-a\.ts/);
      expect(r.out).toMatch(/through-the-index: src\/vfs\/planted-c\.ts → src\/core\/errors\.ts/);
    } finally {
      for (const f of [a, b, c]) fs.rmSync(f);
    }
  });
});
