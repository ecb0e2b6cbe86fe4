import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LocalBackend } from '../../src/backend/index.js';
import { kernelErrno, silentLogger } from '../../src/core/index.js';
import { OpCounters, vfsOps, type RequestMeters } from '../../src/fuse/adapter.js';
import { Vfs } from '../../src/vfs/index.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * A LOOKUP of a name that is not there (every name before its create) is answered without an
 * exception: ops.lookup resolves null. It still counts as the getattr answered ENOENT it
 * replaces (metrics, debug counters), and every other failure still rejects with its errno.
 */
describe('LOOKUP misses without an exception', () => {
  let dir: string;
  beforeEach(() => {
    dir = makeTemp('lookup');
    fs.mkdirSync(path.join(dir, 'd'));
    fs.writeFileSync(path.join(dir, 'file'), 'x');
  });
  afterEach(() => rmTemp(dir));

  const setup = () => {
    const seen: string[] = [];
    const meters: RequestMeters = {
      now: () => 0,
      forOp: (op) => ({ ok: () => void seen.push(`${op} ok`), failed: (_t0, err) => void seen.push(`${op} ${kernelErrno(err)}`) }),
    };
    const counters = new OpCounters();
    const log = { ...silentLogger, isLevelEnabled: () => true } as typeof silentLogger;
    const ops = vfsOps(new Vfs(new LocalBackend(dir)), log, counters, meters);
    return { ops, seen, counters };
  };

  it('answers null for a missing name, the attributes for one that is there', async () => {
    const { ops, seen, counters } = setup();
    expect(ops.lookup).toBeTypeOf('function');
    const c = {};
    expect(await ops.lookup?.(c, '/d/missing')).toBeNull();
    expect((await ops.lookup?.(c, '/d'))?.type).toBe('dir');
    expect(seen).toEqual(['getattr -2', 'getattr ok']);
    expect(counters.snapshot().getattr).toEqual({ calls: 2, errors: 1 });
  });

  it('any other failure still rejects with its own errno (a parent that is a file: ENOTDIR)', async () => {
    const { ops, seen } = setup();
    const err = await ops.lookup?.({}, '/file/x').then(() => null, (e: unknown) => e);
    expect(kernelErrno(err)).toBe(-20);
    // and getattr agrees
    expect(kernelErrno(await ops.getattr({}, '/file/x').then(() => null, (e: unknown) => e))).toBe(-20);
    expect(seen).toEqual(['getattr -20', 'getattr -20']);
  });
});
