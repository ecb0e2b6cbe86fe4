import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { StagingFiles } from '../../src/backend/gcs/staging-files.js';
import { waitUntil } from '../helpers/sandbox.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

describe('gcs staging files', () => {
  let dir = '';
  afterEach(() => rmTemp(dir));

  it('a small file is emptied and handed out again; a large one is removed, not truncated on the event loop', async () => {
    dir = makeTemp('staging');
    const files = new StagingFiles(dir, 4, 1024 * 1024);
    const small = await files.take('small');
    fs.writeSync(small.fd, Buffer.alloc(4096, 1));
    small.size = 4096; // the writer keeps the length (GcsFile does)
    files.give(small);
    const again = await files.take('next');
    expect(again.file).toBe(small.file);
    expect(fs.fstatSync(again.fd).size).toBe(0);
    expect(again.size).toBe(0);

    const large = await files.take('large');
    fs.writeSync(large.fd, Buffer.alloc(2 * 1024 * 1024, 2));
    large.size = 2 * 1024 * 1024;
    files.give(large);
    expect(await waitUntil(() => !fs.existsSync(large.file), 5000)).toBe(true);
    const fresh = await files.take('after');
    expect(fresh.file).not.toBe(large.file);
    files.give(again);
    files.give(fresh);
    files.close();
    expect(fs.readdirSync(dir)).toEqual([]);
  });
});
