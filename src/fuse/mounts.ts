/**
 * The mount table, in one place: every reader of /proc/self/mountinfo and every unmount by path
 * (the daemon, `ledgerfs unmount`, `ledgerfs run`, the test helpers and the bench) goes through
 * here, so "is this ours?" is answered one way. Node built-ins only: scripts/bench imports the
 * compiled file (dist/fuse/mounts.js) as it is.
 */
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** The kernel type of a ledgerfs mount (libfuse `-o subtype=ledgerfs`). */
const LEDGERFS_FSTYPE = 'fuse.ledgerfs';
/** fsname of a local workspace: `ledgerfs:/abs/path`; a GCS workspace is named by its URL. */
const LOCAL_FSNAME_PREFIX = 'ledgerfs:';

export interface MountEntry {
  mountpoint: string;
  /** e.g. fuse.ledgerfs, fuse.bindfs, tmpfs */
  fstype: string;
  /** the fsname: what /proc/mounts and df show in their first column */
  source: string;
  /** major:minor of the mount's device (a FUSE connection's number in /sys/fs/fuse/connections) */
  dev: string;
  /** per-superblock options (rw, user_id=0, ...) */
  superOptions: string;
}

/** Octal escapes (\040 for space) in /proc/self/mountinfo. */
function unescape(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)));
}

function parseMountInfo(text: string): MountEntry[] {
  const out: MountEntry[] = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    const [left, right] = line.split(' - ');
    const f = (left ?? '').split(' ');
    const r = (right ?? '').split(' ');
    if (f[4] === undefined) continue;
    out.push({ mountpoint: unescape(f[4]), fstype: r[0] ?? '', source: unescape(r[1] ?? ''), dev: f[2] ?? '', superOptions: r[2] ?? '' });
  }
  return out;
}

export function listMounts(): MountEntry[] {
  return parseMountInfo(fs.readFileSync('/proc/self/mountinfo', 'utf8'));
}

/** The topmost mount at `mountpoint`, if any. */
export function mountAt(mountpoint: string): MountEntry | undefined {
  const abs = canonicalMountpoint(mountpoint);
  let found: MountEntry | undefined;
  for (const m of listMounts()) if (m.mountpoint === abs) found = m; // the last one is on top
  return found;
}


/**
 * A mount point as the mount table names it: absolute, symlinks resolved (a mount made through
 * `link -> real` is listed at `real`). Never a stat of the mount point itself, which a hung
 * daemon would answer never (and a dead one ENOTCONN): the parent is resolved, and the last
 * component followed only while it is a symlink (readlink of a directory asks no daemon).
 */
export function canonicalMountpoint(mountpoint: string): string {
  const throughParent = (p: string) => {
    try {
      return path.join(fs.realpathSync(path.dirname(p)), path.basename(p));
    } catch {
      return p;
    }
  };
  let p = throughParent(path.resolve(mountpoint));
  for (let hops = 0; hops < 40; hops++) {
    let target: string;
    try {
      target = fs.readlinkSync(p);
    } catch {
      break;
    }
    p = throughParent(path.resolve(path.dirname(p), target));
  }
  return p;
}

/** The fsname a mount of this backend location carries: `ledgerfs:/abs/dir` or `gs://bucket/prefix`. */
export function fsNameFor(location: string): string {
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(location) ? location : `${LOCAL_FSNAME_PREFIX}${path.resolve(location)}`;
}

/**
 * Whether a mount is ledgerfs's: its type is fuse.ledgerfs, or it is a plain `fuse` mount (libfuse
 * without a subtype, e.g. one left dead by an older daemon) whose fsname is ours.
 */
export function isLedgerfsMount(m: MountEntry): boolean {
  if (m.fstype === LEDGERFS_FSTYPE) return true;
  return m.fstype === 'fuse' && (m.source === 'ledgerfs' || m.source.startsWith(LOCAL_FSNAME_PREFIX) || m.source.startsWith('gs://'));
}

/** Any FUSE mount (for tools that clean up other FUSE file systems too: tests, bench). */
export function isFuseMount(m: MountEntry): boolean {
  return m.fstype === 'fuse' || m.fstype.startsWith('fuse.');
}

export class NotOurMountError extends Error {}

/** Why ledgerfs will not unmount `mountpoint`, or null when the mount on top there is its own. */
export function notOurMount(mountpoint: string, accept: (m: MountEntry) => boolean = isLedgerfsMount): string | null {
  const abs = path.resolve(mountpoint);
  const m = mountAt(abs);
  if (!m) return `${abs} is not a mount point`;
  if (accept(m)) return null;
  return `${abs} is not a ledgerfs mount (it is ${m.fstype} from ${m.source}); ledgerfs unmounts only its own mounts (type ${LEDGERFS_FSTYPE}): use umount(8) for others`;
}

function unmountTries(abs: string, lazy: boolean): [string, string[]][] {
  return [
    ['fusermount3', [lazy ? '-uz' : '-u', abs]],
    ['fusermount', [lazy ? '-uz' : '-u', abs]],
    ['umount', lazy ? ['-l', abs] : [abs]],
  ];
}

export interface UnmountOptions {
  /** detach now even while files are open */
  lazy?: boolean;
  /** which mounts may be unmounted (default: ledgerfs's own); the top mount is looked at before each tool */
  accept?: (m: MountEntry) => boolean;
}

/**
 * Unmount by path with the system tools. Refuses (NotOurMountError) when the mount on top is not
 * one `accept` takes, so a path that is, or becomes, something else's mount is never unmounted.
 */
export async function unmountPath(mountpoint: string, opts: UnmountOptions | boolean = {}): Promise<void> {
  const o = typeof opts === 'boolean' ? { lazy: opts } : opts;
  const abs = path.resolve(mountpoint);
  let last: Error | undefined;
  for (const [cmd, args] of unmountTries(abs, o.lazy ?? false)) {
    const why = notOurMount(abs, o.accept);
    if (why) {
      if (!mountAt(abs)) return;
      throw new NotOurMountError(why);
    }
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

/** unmountPath for synchronous callers (test teardown, the bench's exit path): true once gone. */
export function unmountPathSync(mountpoint: string, opts: UnmountOptions = {}): boolean {
  const abs = path.resolve(mountpoint);
  for (const [cmd, args] of unmountTries(abs, opts.lazy ?? false)) {
    if (notOurMount(abs, opts.accept)) break;
    try {
      execFileSync(cmd, args, { stdio: 'ignore' });
    } catch {
      /* next tool */
    }
  }
  return !mountAt(abs) || notOurMount(abs, opts.accept) !== null;
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
    const hint = isLedgerfsMount(existing) ? ` Unmount it first: ledgerfs unmount ${abs}` : ' Pick another directory.';
    return `mount point ${abs} is busy: ${existing.fstype} (${existing.source}) is already mounted there.${hint}`;
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

/** A process using a mount: its working directory or root is in it, or it holds a file of it open. */
export interface MountHolder {
  pid: number;
  /** its command line (or name), for the operator */
  cmd: string;
  /** what ties it to the mount: cwd, root, or the path of an open file */
  uses: string[];
}

function readlinkOr(p: string): string | null {
  try {
    return fs.readlinkSync(p);
  } catch {
    return null;
  }
}

/**
 * Who keeps `mountpoint` busy, read from /proc alone: each process's cwd, root and open
 * descriptors are symlinks whose *text* names the path (readlink asks no file system, so the
 * daemon may call this on its own mount). A process in another mount namespace (a sandbox that
 * bind-mounted it elsewhere) is matched by the device number in its own mountinfo. Never stats
 * the mount point: from the daemon's process that would wait on itself.
 */
export function mountHolders(mountpoint: string): MountHolder[] {
  const abs = path.resolve(mountpoint);
  const dev = mountAt(abs)?.dev;
  if (!dev) return [];
  const pointsByNs = new Map<string, string[]>();
  const pointsOf = (pid: string): string[] => {
    const ns = readlinkOr(`/proc/${pid}/ns/mnt`) ?? `pid:${pid}`;
    let points = pointsByNs.get(ns);
    if (!points) {
      try {
        points = parseMountInfo(fs.readFileSync(`/proc/${pid}/mountinfo`, 'utf8')).filter((m) => m.dev === dev).map((m) => m.mountpoint);
      } catch {
        points = [];
      }
      pointsByNs.set(ns, points);
    }
    return points;
  };
  const out: MountHolder[] = [];
  for (const pid of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
    const points = pointsOf(pid);
    if (points.length === 0) continue;
    const inside = (p: string | null) => p !== null && points.some((mp) => p === mp || p.startsWith(mp === '/' ? '/' : mp + '/'));
    const uses: string[] = [];
    if (inside(readlinkOr(`/proc/${pid}/cwd`))) uses.push('cwd');
    const root = readlinkOr(`/proc/${pid}/root`);
    if (root !== '/' && inside(root)) uses.push('root');
    let fds: string[] = [];
    try {
      fds = fs.readdirSync(`/proc/${pid}/fd`);
    } catch {
      /* gone, or not ours to read */
    }
    for (const fd of fds) {
      const target = readlinkOr(`/proc/${pid}/fd/${fd}`);
      if (inside(target)) uses.push((target as string).replace(/ \(deleted\)$/, ''));
    }
    if (uses.length === 0) continue;
    let cmd = '';
    try {
      cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
    } catch {
      /* gone */
    }
    out.push({ pid: Number(pid), cmd: cmd || '?', uses: [...new Set(uses)] });
  }
  return out;
}
