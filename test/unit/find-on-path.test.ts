import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { findOnPath } from '../../src/core/find-on-path.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

// The one PATH lookup (bwrap for `ledgerfs run`, the tests' real python3).
describe('findOnPath', () => {
  let dir: string;
  beforeEach(() => {
    dir = makeTemp('find-on-path');
  });
  afterEach(() => rmTemp(dir));

  const put = (sub: string, mode: number) => {
    fs.mkdirSync(path.join(dir, sub), { recursive: true });
    const p = path.join(dir, sub, 'tool');
    fs.writeFileSync(p, '#!/bin/sh\n', { mode });
    return p;
  };

  it('the first executable one, skipping files that are not executable and relative entries', () => {
    put('a', 0o644);
    const b = put('b', 0o755);
    put('c', 0o755);
    const PATH = ['', 'relative', path.join(dir, 'a'), path.join(dir, 'b'), path.join(dir, 'c')].join(':');
    expect(findOnPath('tool', PATH)).toBe(b);
    // a relative entry that names a directory holding one is still skipped
    expect(findOnPath('tool', `${path.relative(process.cwd(), path.join(dir, 'c'))}:${path.join(dir, 'a')}`)).toBeUndefined();
    expect(findOnPath('no-such-tool', PATH)).toBeUndefined();
  });
});
