import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CLI, onGcs, startMount, type TestMount } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { mountAt } from '../../src/fuse/mounts.js';

function ledgerfs(args: string[]) {
  return spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8' });
}

/** The line of `df --output=source,fstype,target` for `mnt`. */
function dfLine(mnt: string): string {
  return execFileSync('df', ['--output=source,fstype,target', mnt], { encoding: 'utf8' }).trim().split('\n').pop() ?? '';
}

describe('the mount table: ledgerfs mounts carry their source and type fuse.ledgerfs', () => {
  let m: TestMount | undefined;
  afterEach(async () => {
    await m?.stop();
    m = undefined;
  });

  for (const binding of ['native-ll', 'fuse-native']) {
    it.skipIf(onGcs)(`${binding}: /proc/mounts and df show ledgerfs:/abs/source, fuse.ledgerfs; ledgerfs unmount takes it down`, async () => {
      m = await startMount({ args: ['--binding', binding] });
      const entry = mountAt(m.mnt);
      expect(entry?.fstype).toBe('fuse.ledgerfs');
      expect(entry?.source).toBe(`ledgerfs:${fs.realpathSync(m.src)}`);
      expect(fs.readFileSync('/proc/mounts', 'utf8')).toContain(`ledgerfs:${fs.realpathSync(m.src)} ${m.mnt} fuse.ledgerfs `);
      expect(dfLine(m.mnt).split(/\s+/)).toEqual([`ledgerfs:${fs.realpathSync(m.src)}`, 'fuse.ledgerfs', m.mnt]);
      const r = ledgerfs(['unmount', m.mnt]);
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      expect(mountAt(m.mnt)).toBeUndefined();
    });
  }
});

describe('ledgerfs unmount of a mount whose daemon died', () => {
  let m: TestMount | undefined;
  afterEach(async () => {
    await m?.stop().catch(() => undefined);
    m = undefined;
  });

  // (the CLI's side is the same whatever the backend; the GCS pass's test mount keeps more
  // around its daemon than this kill takes down, and the test timed out there)
  it.skipIf(onGcs)('takes the dead mount down (ENOTCONN at the mount point), as `status` and a new mount advise', async () => {
    m = await startMount();
    m.daemon.kill('SIGKILL');
    await new Promise<void>((r) => (m?.daemon.exitCode !== null || m?.daemon.signalCode ? r() : m?.daemon.once('exit', () => r())));
    // (the kernel answers stat from the attributes it caches until they time out, dead daemon or not)
    const deadline = Date.now() + 5_000;
    let err: unknown;
    while (!err && Date.now() < deadline) {
      try {
        fs.statSync(m.mnt);
        await new Promise((r) => setTimeout(r, 50));
      } catch (e) {
        err = e;
      }
    }
    expect(String(err)).toMatch(/ENOTCONN/);
    const r = ledgerfs(['unmount', m.mnt]);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(mountAt(m.mnt)).toBeUndefined();
  });
});

describe('a mount point named through a symlink', () => {
  let dir: string | undefined;
  afterEach(() => {
    // (its daemon exits when the mount goes)
    if (dir && mountAt(path.join(dir, 'real'))) spawnSync('fusermount3', ['-uz', path.join(dir, 'real')]);
    rmTemp(dir);
    dir = undefined;
  });

  // the mount table names the symlink's target: mount --daemon waited for the link's name to
  // appear there, timed out after 60 s and left the daemon serving (found by a GCS probe)
  it.skipIf(onGcs)('mount --daemon comes up, answers at both names, and unmount by the link takes it down', () => {
    dir = makeTemp('symlinked-mnt');
    for (const d of ['src', 'real']) fs.mkdirSync(path.join(dir, d));
    fs.symlinkSync('real', path.join(dir, 'link'));
    fs.writeFileSync(path.join(dir, 'src', 'f'), 'hi\n');
    const link = path.join(dir, 'link');
    // (no pipes: a daemon left behind by a failing launcher would hold them, and spawnSync wait for ever)
    const up = spawnSync(process.execPath, [CLI, 'mount', '--daemon', '--source', path.join(dir, 'src'), '--state', path.join(dir, 'state'), link], { stdio: 'ignore', timeout: 30_000, killSignal: 'SIGKILL' });
    expect(up.status).toBe(0);
    expect(mountAt(path.join(dir, 'real'))?.fstype).toBe('fuse.ledgerfs');
    expect(fs.readFileSync(path.join(link, 'f'), 'utf8')).toBe('hi\n');
    const down = ledgerfs(['unmount', link]);
    expect(down.stderr).toBe('');
    expect(down.status).toBe(0);
    expect(mountAt(path.join(dir, 'real'))).toBeUndefined();
  });
});

describe('ledgerfs unmount refuses mounts that are not its own, and leaves them mounted', () => {
  let dir: string | undefined;
  const mounted: string[] = [];
  afterEach(() => {
    for (const mnt of mounted.reverse()) {
      if (mountAt(mnt)) execFileSync('umount', ['-l', mnt]);
    }
    mounted.length = 0;
    rmTemp(dir);
    dir = undefined;
  });

  it('a tmpfs', () => {
    dir = makeTemp('unmount');
    const mnt = path.join(dir, 'tmpfs');
    fs.mkdirSync(mnt);
    execFileSync('mount', ['-t', 'tmpfs', 'ledgerfs-unit-tmpfs', mnt]);
    mounted.push(mnt);
    const r = ledgerfs(['unmount', mnt]);
    expect(r.status).toBe(2);
    expect(r.stderr).toBe(`ledgerfs: ${mnt} is not a ledgerfs mount (it is tmpfs from ledgerfs-unit-tmpfs); ledgerfs unmounts only its own mounts (type fuse.ledgerfs): use umount(8) for others\n`);
    expect(mountAt(mnt)?.fstype).toBe('tmpfs');
    expect(ledgerfs(['unmount', '--lazy', mnt]).status).toBe(2);
    expect(mountAt(mnt)?.fstype).toBe('tmpfs');
  });

  it('a bindfs mount (another FUSE file system)', async () => {
    dir = makeTemp('unmount');
    const src = path.join(dir, 'src');
    const mnt = path.join(dir, 'bindfs');
    fs.mkdirSync(src);
    fs.mkdirSync(mnt);
    fs.writeFileSync(path.join(src, 'kept'), 'still here\n');
    execFileSync('bindfs', [src, mnt]);
    mounted.push(mnt);
    const r = ledgerfs(['umount', mnt]);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(new RegExp(`^ledgerfs: ${mnt} is not a ledgerfs mount \\(it is fuse(\\.bindfs)? from `));
    expect(mountAt(mnt)?.fstype).toMatch(/^fuse/);
    expect(fs.readFileSync(path.join(mnt, 'kept'), 'utf8')).toBe('still here\n');
  });

  it('/', () => {
    const before = mountAt('/');
    const r = ledgerfs(['unmount', '/']);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/^ledgerfs: \/ is not a ledgerfs mount \(it is \S+ from \S+\)/);
    expect(mountAt('/')).toEqual(before);
  });

  it('a directory that is no mount point', () => {
    dir = makeTemp('unmount');
    const r = ledgerfs(['unmount', dir]);
    expect(r.status).toBe(2);
    expect(r.stderr).toBe(`ledgerfs: ${dir} is not a mount point\n`);
  });
});
