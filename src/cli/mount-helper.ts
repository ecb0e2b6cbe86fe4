import path from 'node:path';
import { startDaemon, UserError } from '../app/index.js';

/*
 * mount(8)'s helper for type fuse.ledgerfs (bin/mount.fuse.ledgerfs, linked as
 * /sbin/mount.fuse.ledgerfs by scripts/setup, as rclone links mount.rclone):
 *   mount.fuse.ledgerfs SOURCE DIR [-sfnv] [-N NS] [-o OPTIONS] [-t fuse.ledgerfs]
 * translates OPTIONS into `ledgerfs mount` flags and runs `ledgerfs mount --daemon`, which returns
 * once DIR answers stat (or fails with the daemon's sentence): mount(8) and `mount -a` then see
 * a finished mount, as with any file system.
 */

/** -o name -> the flag taking its value */
const VALUED: Record<string, string> = {
  policy: '--policy', state: '--state', session: '--session', actor: '--actor', preset: '--preset', binding: '--binding',
  uid: '--uid', gid: '--gid', file_mode: '--file-mode', dir_mode: '--dir-mode',
  log_file: '--log-file', log_format: '--log-format', log_level: '--log-level', metrics: '--metrics',
  attr_timeout: '--attr-timeout', entry_timeout: '--entry-timeout', busy_poll: '--busy-poll', metadata_ttl: '--metadata-ttl',
};
/** -o name -> its flag, without a value */
const SWITCHES: Record<string, string> = { allow_other: '--allow-other', no_journal: '--no-journal', shared_source: '--shared-source' };
/** what mount(8) and fstab add that a FUSE daemon has nothing to do with (the kernel, systemd or mount(8) handle them) */
const GENERIC = new Set(['rw', 'defaults', 'auto', 'noauto', 'user', 'nouser', 'users', 'owner', 'group', '_netdev', 'nofail', 'suid', 'nosuid', 'dev', 'nodev', 'exec', 'noexec', 'async', 'sync', 'atime', 'noatime', 'relatime', 'norelatime', 'diratime', 'nodiratime', 'loud', 'silent']);

/** The `ledgerfs mount` arguments (flags, then DIR) of one mount(8) call. */
export function mountArgsFromOptions(source: string, dir: string, options: string): string[] {
  const flags: string[] = [];
  let policy = false;
  for (const opt of options.split(',').filter(Boolean)) {
    const eq = opt.indexOf('=');
    const name = (eq < 0 ? opt : opt.slice(0, eq)).replace(/-/g, '_');
    const value = eq < 0 ? undefined : opt.slice(eq + 1);
    if (GENERIC.has(name) || opt.startsWith('x-') || name === 'comment') continue;
    if (name === 'ro') throw new UserError(`-o ro: ledgerfs has no read-only mount option; give the roots mode: ro in the policy file (-o policy=FILE)`);
    const sw = SWITCHES[name];
    if (sw) {
      if (value !== undefined) throw new UserError(`-o ${opt}: ${name} takes no value`);
      flags.push(sw);
      continue;
    }
    const flag = VALUED[name];
    if (!flag) throw new UserError(`-o ${opt}: unknown option; ledgerfs takes ${[...Object.keys(SWITCHES), ...Object.keys(VALUED).map((k) => `${k}=...`)].join(', ')} (and ignores ${[...GENERIC].slice(0, 6).join(', ')}, ...)`);
    if (value === undefined || value === '') throw new UserError(`-o ${name}: expected ${name}=VALUE`);
    if (name === 'policy') policy = true;
    flags.push(flag, value);
  }
  // with a policy file the file names the backend: SOURCE is a label (fstab's first field)
  if (!policy) flags.unshift('--source', source);
  return [...flags, path.resolve(dir)];
}

/** argv after the helper's name: SOURCE DIR and mount(8)'s flags in any order. */
export function parseHelperArgv(argv: readonly string[]): { source: string; dir: string; options: string } {
  const positional: string[] = [];
  const options: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    if (a === '-o' || a === '-t' || a === '-N') {
      const v = argv[++i];
      if (v === undefined) throw new UserError(`${a} needs a value`);
      if (a === '-o') options.push(v);
    } else if (/^-[sfnv]+$/.test(a)) {
      // sloppy, fake, no mtab, verbose: nothing for a FUSE daemon to do
    } else if (a.startsWith('-')) {
      throw new UserError(`unknown flag ${a}; usage: mount.fuse.ledgerfs SOURCE DIR [-o OPTIONS] (mount(8) runs this for: mount -t fuse.ledgerfs SOURCE DIR -o OPTIONS)`);
    } else positional.push(a);
  }
  if (positional.length !== 2) throw new UserError('usage: mount.fuse.ledgerfs SOURCE DIR [-o OPTIONS] (mount(8) runs this for: mount -t fuse.ledgerfs SOURCE DIR -o OPTIONS, or an fstab line of type fuse.ledgerfs)');
  return { source: positional[0] as string, dir: positional[1] as string, options: options.join(',') };
}

/** The helper: `ledgerfs mount --daemon` with the translated flags; its exit code. */
export async function runMountHelper(argv: readonly string[], cli: string): Promise<number> {
  const { source, dir, options } = parseHelperArgv(argv);
  const args = mountArgsFromOptions(source, dir, options);
  // mount(8) prints what its helper prints: the banner on stderr, not the pid
  return startDaemon([process.execPath, cli, 'mount', '--daemon', ...args], args[args.length - 1] as string, { printPid: false });
}
