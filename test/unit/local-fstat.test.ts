import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { attrFromStats, LocalBackend } from '../../src/backend/index.js';
import { loadBeneath } from '../../src/backend/beneath.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * An open file's attributes (create's, every write session's end, fgetattr) come from the local
 * addon's fstat, filled into the record lstat uses, instead of a BigIntStats built per call.
 * The answer is what fs.fstatSync said, to the nanosecond.
 */
describe('fstat of the local store\'s open files', () => {
  let dir: string;
  beforeEach(() => {
    dir = makeTemp('fstat');
    fs.writeFileSync(path.join(dir, 'f'), 'some bytes');
    fs.utimesSync(path.join(dir, 'f'), new Date('2001-02-03T04:05:06.789Z'), new Date('1999-12-31T23:59:59.123Z'));
  });
  afterEach(() => rmTemp(dir));

  it('answers through the addon what fs.fstatSync answers', async () => {
    expect(loadBeneath()?.fstat(-1)).toBe(-9); // the addon has it (EBADF for a bad descriptor)
    const b = new LocalBackend(dir);
    const file = await b.open('/f', { write: true });
    try {
      await file.write(Buffer.from('more'), 4, 10);
      const fd = fs.openSync(path.join(dir, 'f'), 'r');
      const want = attrFromStats(fs.fstatSync(fd, { bigint: true }));
      fs.closeSync(fd);
      expect(await file.stat()).toEqual(want);
      expect((await file.stat()).size).toBe(14);
    } finally {
      await file.close();
    }
  });

  it('a bad descriptor is EBADF', () => {
    const b = new LocalBackend(dir);
    expect(() => b.fstatFd(-1, '/x')).toThrow(expect.objectContaining({ code: 'EBADF' }));
  });
});
