import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

export interface SandboxSpec {
  /** host path of the mounted workspace */
  workspace: string;
  /** where the program sees it (also its working directory) */
  at: string;
  network: boolean;
  /** host paths bound read-only at the same path */
  readOnly: string[];
  command: string[];
  env?: Record<string, string>;
}

/** Host system directories the program may read (never write); missing ones are skipped. */
const SYSTEM_DIRS = ['/usr', '/etc', '/opt', '/var/lib/dpkg'];

export class SandboxError extends Error {}

/** Where bwrap is, or a clear error saying how to get it. */
export function findBwrap(): string {
  for (const dir of (process.env.PATH ?? '/usr/bin:/bin').split(':')) {
    const p = path.join(dir, 'bwrap');
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch {
      /* keep looking */
    }
  }
  throw new SandboxError('bubblewrap (bwrap) is not installed: apt-get install -y bubblewrap');
}

/** bwrap needs new namespaces; as non-root it needs unprivileged user namespaces. */
export function checkNamespaces(bwrap: string): void {
  try {
    execFileSync(bwrap, ['--unshare-pid', '--ro-bind', '/', '/', '--', 'true'], { stdio: 'pipe' });
  } catch (err) {
    const msg = ((err as { stderr?: Buffer }).stderr?.toString() ?? String(err)).trim();
    throw new SandboxError(
      `bubblewrap cannot create namespaces here (${msg}). As non-root this needs unprivileged user namespaces ` +
        '(sysctl kernel.unprivileged_userns_clone=1); in a container, run it with --privileged or use `ledgerfs mount` and a bind mount instead.',
    );
  }
}

/**
 * The bwrap argument list: system directories read-only, a private /tmp, /proc and /dev, new
 * PID/IPC/UTS (and network unless asked) namespaces, the workspace read-write at `at`, nothing
 * else of the host. Debian's merged /usr makes /bin, /lib, /sbin symlinks; they are recreated.
 */
export function bwrapArgs(spec: SandboxSpec): string[] {
  const args = ['--die-with-parent', '--unshare-pid', '--unshare-ipc', '--unshare-uts', '--hostname', 'ledgerfs-sandbox'];
  if (!spec.network) args.push('--unshare-net');
  for (const d of SYSTEM_DIRS) if (fs.existsSync(d)) args.push('--ro-bind', d, d);
  for (const l of ['bin', 'lib', 'lib32', 'lib64', 'libx32', 'sbin']) {
    const host = `/${l}`;
    let st: fs.Stats | undefined;
    try {
      st = fs.lstatSync(host);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) args.push('--symlink', fs.readlinkSync(host), host);
    else args.push('--ro-bind', host, host);
  }
  args.push('--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp');
  for (const p of spec.readOnly) {
    const abs = path.resolve(p);
    if (!fs.existsSync(abs)) throw new SandboxError(`--ro ${p}: no such file or directory on the host`);
    args.push('--ro-bind', abs, abs);
  }
  args.push('--bind', spec.workspace, spec.at, '--chdir', spec.at);
  const env = { HOME: spec.at, TMPDIR: '/tmp', ...spec.env };
  for (const [k, v] of Object.entries(env)) args.push('--setenv', k, v);
  args.push('--', ...spec.command);
  return args;
}
