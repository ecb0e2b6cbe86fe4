import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface MountEntry {
  mountpoint: string;
  fstype: string;
  source: string;
}

/** Octal escapes (\040 for space) in /proc/self/mountinfo. */
function unescape(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)));
}

export function listMounts(): MountEntry[] {
  const text = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  const out: MountEntry[] = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    const [left, right] = line.split(' - ');
    const f = (left ?? '').split(' ');
    const r = (right ?? '').split(' ');
    if (f[4] === undefined) continue;
    out.push({ mountpoint: unescape(f[4]), fstype: r[0] ?? '', source: unescape(r[1] ?? '') });
  }
  return out;
}

export function mountAt(mountpoint: string): MountEntry | undefined {
  const abs = path.resolve(mountpoint);
  let found: MountEntry | undefined;
  for (const m of listMounts()) if (m.mountpoint === abs) found = m; // the last one is on top
  return found;
}

/** A clear, actionable reason why `mountpoint` cannot take a mount now, or null if it can. */
export function mountpointProblem(mountpoint: string): string | null {
  const abs = path.resolve(mountpoint);
  if (!fs.existsSync('/dev/fuse')) {
    return 'FUSE is unavailable: /dev/fuse does not exist. On Debian: apt-get install -y fuse3 libfuse2; in a container: run it with --device /dev/fuse --cap-add SYS_ADMIN.';
  }
  try {
    fs.accessSync('/dev/fuse', fs.constants.R_OK | fs.constants.W_OK);
  } catch {
    return 'FUSE is unavailable: /dev/fuse is not readable and writable by this user (run as root, or add the user to the fuse group).';
  }
  const existing = mountAt(abs);
  if (existing) {
    return `mount point ${abs} is busy: ${existing.fstype} (${existing.source}) is already mounted there. Unmount it first: ledgerfs unmount ${abs}`;
  }
  let st: fs.Stats;
  try {
    st = fs.statSync(abs);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return `mount point ${abs} does not exist. Create it first: mkdir -p ${abs}`;
    if (code === 'ENOTCONN') return `mount point ${abs} is a dead FUSE mount (transport endpoint is not connected). Clean it up: ledgerfs unmount ${abs}`;
    return `mount point ${abs} is not usable: ${(err as Error).message}`;
  }
  if (!st.isDirectory()) return `mount point ${abs} is not a directory`;
  if (fs.readdirSync(abs).length > 0) {
    return `mount point ${abs} is not empty; mounting would hide its contents. Use an empty directory.`;
  }
  return null;
}

/** Unmount by path with the system tools; `lazy` detaches even while files are open. */
export async function unmountPath(mountpoint: string, lazy = false): Promise<void> {
  const abs = path.resolve(mountpoint);
  const attempts: [string, string[]][] = [
    ['fusermount3', [lazy ? '-uz' : '-u', abs]],
    ['fusermount', [lazy ? '-uz' : '-u', abs]],
    ['umount', lazy ? ['-l', abs] : [abs]],
  ];
  let last: Error | undefined;
  for (const [cmd, args] of attempts) {
    try {
      await run(cmd, args);
      return;
    } catch (err) {
      const e = err as NodeJS.ErrnoException & { stderr?: string };
      if (e.code === 'ENOENT') continue; // tool not installed
      last = new Error(`${cmd} ${args.join(' ')}: ${(e.stderr ?? e.message).trim()}`);
      if (/busy/i.test(last.message)) break;
    }
  }
  if (!mountAt(abs)) return;
  throw last ?? new Error(`could not unmount ${abs}`);
}
