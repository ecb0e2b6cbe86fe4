import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startMount, sh, type TestMount } from '../helpers/mount.js';

describe('mount: basics', () => {
  let m: TestMount;
  beforeEach(async () => {
    m = await startMount({ populate: (src) => fs.writeFileSync(path.join(src, 'hello.txt'), 'hi\n') });
  });
  afterEach(async () => {
    await m.stop();
  });

  it('shows the source and writes through to it', () => {
    expect(sh('cat hello.txt', m.mnt)).toBe('hi\n');
    sh('echo data > new.txt && mkdir d && mv new.txt d/', m.mnt);
    expect(fs.readFileSync(path.join(m.src, 'd/new.txt'), 'utf8')).toBe('data\n');
  });
});
