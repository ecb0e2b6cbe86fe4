import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { RUNNING_BINDING, onGcs, sh, startMount, type TestMount } from '../helpers/mount.js';

/**
 * `mount --uid/--gid/--file-mode/--dir-mode` (as bindfs and gcsfuse): every node shows them,
 * whichever request told the kernel its attributes. A lookup, and a create, mkdir, symlink,
 * mknod, chmod, chown or utimens that answers with the node's attributes, must answer with the
 * shown ones: with long kernel caches the kernel keeps what the answer said.
 */
describe('display options on every answer that carries attributes', () => {
  let m: TestMount | undefined;
  afterEach(async () => {
    await m?.stop();
    m = undefined;
  });

  it('lookup, create, mkdir, symlink, mknod, chmod, chown and utimens all show the display owner and modes', async () => {
    m = await startMount({
      populate: (src) => fs.writeFileSync(path.join(src, 'old.txt'), 'there before\n'),
      args: ['--uid', '65534', '--gid', '65534', '--file-mode', '600', '--dir-mode', '700', '--attr-timeout', '60', '--entry-timeout', '60'],
    });
    const out = sh(
      [
        'stat -c "%n %u:%g %a" old.txt',
        'touch f && stat -c "%n %u:%g %a" f',
        'mkdir d && stat -c "%n %u:%g %a" d',
        'ln -s f l && stat -c "%n %u:%g" l',
        ...(onGcs ? [] : ['mkfifo p && stat -c "%n %u:%g %a" p']),
        // (fuse-native does not know the caller: under --uid its chmod and chown are refused, README)
        ...(RUNNING_BINDING === 'fuse-native' ? [] : ['chmod 644 f && stat -c "%n %u:%g %a" f', 'chown 0:0 f && stat -c "%n %u:%g %a" f']),
        'touch -d 2001-01-01 f && stat -c "%n %u:%g %a" f',
      ].map((c) => `{ ${c}; } || echo "failed: ${c.replace(/"/g, "'")}"`).join('; '),
      m.mnt,
    );
    expect(out.trim().split('\n')).toEqual([
      'old.txt 65534:65534 600',
      'f 65534:65534 600',
      'd 65534:65534 700',
      'l 65534:65534',
      ...(onGcs ? [] : ['p 65534:65534 600']),
      ...(RUNNING_BINDING === 'fuse-native' ? [] : ['f 65534:65534 600', 'f 65534:65534 600']),
      'f 65534:65534 600',
    ]);
  });
});
