import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { DEFAULTS } from '../config/index.js';
import { findOnPath } from '../core/index.js';

export interface SandboxSpec {
  /** host path of the mounted workspace */
  workspace: string;
  /** where the program sees it (also its working directory) */
  at: string;
  network: boolean;
  /** host paths bound read-only at the same path */
  readOnly: string[];
  command: string[];
  /**
   * Whom the program runs as: that uid/gid in a new user namespace, with no capabilities, no new
   * privileges and the seccomp filter at `seccompFd`; null (--privileged) is the caller itself,
   * capabilities and all.
   */
  user: SandboxUser | null;
  /** bwrap's descriptor that holds the seccomp program (needed unless user is null) */
  seccompFd?: number;
  /**
   * Host paths the program must never reach (the journal, the backend): where a read-only bind
   * would show one, an empty read-only tmpfs covers it.
   */
  hidden: string[];
}

export interface SandboxUser {
  uid: number;
  gid: number;
}

/**
 * Whom the program runs as unless --uid/--gid say otherwise: the caller's own ids, or, when root
 * started `run`, DEFAULTS.run.rootUser (an ordinary user, not nobody: nobody is also how every
 * file of an unmapped owner shows inside, and the program would take those for its own).
 */
export function defaultSandboxUser(): SandboxUser {
  const uid = process.getuid?.() ?? 0;
  if (uid !== 0) return { uid, gid: process.getgid?.() ?? uid };
  return { ...DEFAULTS.run.rootUser };
}

/** Host system directories the program may read (never write); missing ones are skipped. */
const SYSTEM_DIRS = ['/usr', '/etc', '/opt', '/var/lib/dpkg'];

/** Debian's merged-/usr links (or directories), recreated in the sandbox. */
const LINK_DIRS = ['/bin', '/lib', '/lib32', '/lib64', '/libx32', '/sbin'];

/** Where the program cannot be given the workspace: the sandbox's own mounts live there. */
const RESERVED = [...SYSTEM_DIRS, '/proc', '/dev', ...LINK_DIRS];

/** The program's home: private, like /tmp (a home in the workspace would fill it with caches). */
const HOME = '/tmp/home';

export class SandboxError extends Error {}

/** Where bwrap is, or a clear error saying how to get it. */
export function findBwrap(): string {
  const found = findOnPath('bwrap', process.env.PATH ?? '/usr/bin:/bin');
  if (found) return found;
  throw new SandboxError('bubblewrap (bwrap) is not installed or not on PATH: apt-get install -y bubblewrap');
}

/**
 * The namespaces a sandbox gets; the probe asks for exactly these. A user namespace unless
 * privileged (in which the program's uid is its own, and no user namespace can be made again:
 * there it would get every capability back).
 */
function namespaceArgs(network: boolean, user: SandboxUser | null): string[] {
  const userArgs = user ? ['--unshare-user', '--disable-userns', '--uid', String(user.uid), '--gid', String(user.gid), '--cap-drop', 'ALL'] : [];
  return [...userArgs, '--unshare-pid', '--unshare-ipc', '--unshare-uts', ...(network ? [] : ['--unshare-net'])];
}

/** bwrap needs new namespaces; as non-root it needs unprivileged user namespaces. */
export function checkNamespaces(bwrap: string, network = false, user: SandboxUser | null = defaultSandboxUser()): void {
  try {
    execFileSync(bwrap, [...namespaceArgs(network, user), '--ro-bind', '/', '/', '--', 'true'], { stdio: 'pipe' });
  } catch (err) {
    const msg = ((err as { stderr?: Buffer }).stderr?.toString() ?? String(err)).trim();
    throw new SandboxError(
      `bubblewrap cannot create namespaces here (${msg}). As non-root this needs unprivileged user namespaces ` +
        '(sysctl kernel.unprivileged_userns_clone=1, and on Ubuntu 24.04+ kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap); ' +
        'in a container, run it with --privileged (or seccomp/AppArmor unconfined), or use `ledgerfs mount --allow-other` and bind the mount into the container instead.',
    );
  }
}

/** A clear reason why `at` cannot be where the workspace appears, or null. */
export function atProblem(at: string): string | null {
  if (!path.isAbsolute(at)) return `--at ${at}: expected an absolute path such as ${DEFAULTS.run.at}`;
  const p = path.resolve(at);
  if (p === '/' || p === '/tmp' || p === HOME) return `--at ${at}: the workspace needs a directory of its own, not ${p}`;
  const clash = RESERVED.find((r) => p === r || p.startsWith(`${r}/`));
  return clash ? `--at ${at}: ${clash} holds the sandbox's system files; pick another place such as ${DEFAULTS.run.at}` : null;
}

/** A system path that is a symlink on the host (merged /usr: /bin -> usr/bin) is recreated. */
function systemLink(host: string, args: string[], bound: string[]): void {
  let st: fs.Stats;
  try {
    st = fs.lstatSync(host);
  } catch {
    return;
  }
  if (st.isSymbolicLink()) {
    args.push('--symlink', fs.readlinkSync(host), host);
  } else {
    args.push('--ro-bind', host, host);
    bound.push(host);
  }
}

const realish = (p: string): string => {
  try {
    return fs.realpathSync(p);
  } catch {
    return path.resolve(p);
  }
};
const inside = (p: string, dir: string): boolean => dir === '/' || p === dir || p.startsWith(`${dir}/`);

/**
 * The journal and the backend may lie below a directory the sandbox shows read-only (a source in
 * /opt, a state dir in /etc): cover each with an empty read-only tmpfs, so the program reads
 * nothing there past the policy. One that holds such a directory cannot be covered without
 * taking the system away: refuse.
 */
function coverArgs(hidden: string[], bound: string[]): string[] {
  const out: string[] = [];
  const binds = bound.map((b) => ({ at: b, real: realish(b) }));
  for (const h of hidden) {
    const real = realish(h);
    for (const b of binds) {
      if (inside(b.real, real)) {
        throw new SandboxError(`${h} holds ${b.at}, which the sandbox shows the program read-only: move it out of ${b.at} (or run it as a --source of its own)`);
      }
      if (inside(real, b.real)) {
        // the same path inside the sandbox as on the host, whatever link led there
        const at = path.join(b.at, path.relative(b.real, real));
        out.push('--tmpfs', at, '--remount-ro', at);
      }
    }
  }
  return out;
}

/**
 * Entries below the system directories that the sandbox user could read only because it is the
 * host's root to the kernel: when root starts `run`, the program's uid and gid map to host 0, and
 * file permission checks match the owner and group by those host ids, capabilities or not. So
 * /etc/shadow (root:shadow 0640), SSH host keys, /etc/ssl/private or a 0600 token under /opt
 * would be the program's to read. Each entry that others may not read (a directory others may
 * not list or enter) and that the host ids own, or whose group they are in, is covered: a file
 * by /dev/null (empty), a directory by an empty read-only tmpfs. /usr is not walked (most of a
 * system's files, seconds to walk; it holds programs, not secrets).
 */
export function hostOnlyEntries(dirs: string[], uid: number, gids: number[], skip: (p: string) => boolean = () => false): { files: string[]; dirs: string[] } {
  const out = { files: [] as string[], dirs: [] as string[] };
  const ours = (st: fs.Stats) => st.uid === uid || gids.includes(st.gid);
  const walk = (dir: string): void => {
    let names: string[];
    try {
      names = fs.readdirSync(dir);
    } catch {
      return;
    }
    for (const name of names) {
      const p = path.join(dir, name);
      if (skip(p)) continue;
      let st: fs.Stats;
      try {
        st = fs.lstatSync(p);
      } catch {
        continue;
      }
      if (st.isDirectory()) {
        if ((st.mode & 0o005) !== 0o005 && ours(st)) out.dirs.push(p);
        else walk(p);
      } else if (st.isFile() && (st.mode & 0o004) === 0 && ours(st)) {
        out.files.push(p);
      }
    }
  };
  for (const d of dirs) walk(d);
  return out;
}

/**
 * /proc's own host-wide entries go the same way: root-only by their mode alone, not by a
 * capability, are /proc/slabinfo, kpageflags, kpagecount, vmallocinfo, timer_list (every timer
 * of the host, with the command names and pids of its processes), /proc/tty/driver. The
 * sandbox's processes (/proc/PID, self) and /proc/sys (bound read-only) are left as they are.
 */
export function procHostOnlyEntries(uid: number, gids: number[]): { files: string[]; dirs: string[] } {
  return hostOnlyEntries(['/proc'], uid, gids, (p) => {
    const rel = p.slice('/proc/'.length);
    return /^\d+$/.test(rel) || rel === 'self' || rel === 'thread-self' || rel === 'sys';
  });
}

function hostOnlyArgs(bound: string[], chosen: string[]): string[] {
  const uid = process.getuid?.() ?? 0;
  if (uid !== 0) return []; // a user's sandbox reads what that user may: the user chose to run it
  const gids = [...new Set([process.getgid?.() ?? 0, ...(process.getgroups?.() ?? [])])];
  const { files, dirs } = hostOnlyEntries(bound.filter((b) => b !== '/usr'), uid, gids);
  const proc = procHostOnlyEntries(uid, gids);
  files.push(...proc.files);
  dirs.push(...proc.dirs);
  // a --ro path the operator named stays shown, also below a root-only directory
  const keep = (p: string) => !chosen.some((c) => inside(c, p));
  return [...files.filter(keep).flatMap((f) => ['--ro-bind', '/dev/null', f]), ...dirs.filter(keep).flatMap((d) => ['--tmpfs', d, '--remount-ro', d])];
}

/**
 * With a network, name resolution needs /etc/resolv.conf; on systemd hosts that is a symlink
 * into /run, which the sandbox does not otherwise see.
 */
function resolverArgs(): string[] {
  try {
    const target = fs.realpathSync('/etc/resolv.conf');
    if (SYSTEM_DIRS.some((d) => target.startsWith(`${d}/`))) return [];
    const dir = path.dirname(target);
    return ['--ro-bind', dir, dir];
  } catch {
    return [];
  }
}

function sandboxEnv(spec: SandboxSpec): string[] {
  const out: string[] = [];
  const from = process.env; // only DEFAULTS.run.passEnv names are taken from it
  for (const k of DEFAULTS.run.passEnv) {
    const v = from[k];
    if (v !== undefined) out.push('--setenv', k, v);
  }
  out.push('--setenv', 'HOME', HOME, '--setenv', 'TMPDIR', '/tmp', '--setenv', 'LEDGERFS_WORKSPACE', spec.at);
  return out;
}

/**
 * The bwrap argument list: system directories read-only, a private /tmp (and home in it),
 * /proc and /dev, new PID/IPC/UTS (and network unless asked) namespaces, a new session (no
 * controlling terminal to push input into), a cleared environment, the workspace read-write at
 * `at` and the working directory there; the sandbox's root is read-only, so nothing else of the
 * host exists, and nothing can be created beside the workspace.
 */
export function bwrapArgs(spec: SandboxSpec): string[] {
  const problem = atProblem(spec.at);
  if (problem) throw new SandboxError(problem);
  const at = path.resolve(spec.at);
  if (spec.user && spec.seccompFd === undefined) throw new SandboxError('internal: a sandbox without --privileged needs its seccomp filter');
  const args = ['--die-with-parent', '--new-session', ...namespaceArgs(spec.network, spec.user), '--hostname', 'ledgerfs-sandbox', '--clearenv'];
  if (spec.user) args.push('--seccomp', String(spec.seccompFd));
  const bound: string[] = [];
  for (const d of SYSTEM_DIRS) {
    if (!fs.existsSync(d)) continue;
    args.push('--ro-bind', d, d);
    bound.push(d);
  }
  for (const l of LINK_DIRS) systemLink(l, args, bound);
  if (spec.network) {
    const resolver = resolverArgs();
    args.push(...resolver);
    if (resolver.length) bound.push(resolver[1] as string);
  }
  // /proc/sys read-only: the sysctls check only that the writer's uid is host root (no
  // capability), and root's sandbox runs as host uid 0 to the kernel; bwrap covers /proc/sys
  // only where the user it sets up as could write it, which it cannot tell from the directory
  args.push('--proc', '/proc', '--ro-bind', '/proc/sys', '/proc/sys', '--dev', '/dev', '--tmpfs', '/tmp', '--dir', HOME);
  for (const p of spec.readOnly) {
    const abs = path.resolve(p);
    if (!fs.existsSync(abs)) throw new SandboxError(`--ro ${p}: no such file or directory on the host`);
    args.push('--ro-bind', abs, abs);
    bound.push(abs);
  }
  args.push(...coverArgs(spec.hidden, bound));
  // the host's root-only files, which the mapping to host root would open to the program
  if (spec.user) args.push(...hostOnlyArgs(bound.filter((b) => SYSTEM_DIRS.includes(b)), spec.readOnly.map((p) => path.resolve(p))));
  args.push('--bind', spec.workspace, at, '--remount-ro', '/', '--chdir', at, ...sandboxEnv(spec));
  args.push('--', ...spec.command);
  return args;
}

/** Executable file on the host (following symlinks)? */
function executable(p: string): boolean {
  try {
    return fs.statSync(p).isFile() && (fs.accessSync(p, fs.constants.X_OK), true);
  } catch {
    return false;
  }
}

/**
 * Why the program cannot be started in the sandbox, or null: a bare name found in none of the
 * PATH directories the sandbox shows, or an absolute path in the host's system directories (or a
 * `--ro` path) that is no executable file. bwrap itself would say "execvp: No such file" and exit
 * 1, indistinguishable from the program's own 1; a shell answers 127. Paths inside the workspace
 * are not looked at (only the sandbox sees them).
 */
export function commandProblem(name: string, readOnly: readonly string[] = []): string | null {
  if (name.includes('/')) {
    if (!path.isAbsolute(name)) return null;
    const shown = [...SYSTEM_DIRS, ...LINK_DIRS, ...readOnly.map((r) => path.resolve(r))].some((d) => name === d || name.startsWith(`${d}/`));
    if (!shown || executable(name)) return null;
    return `${name}: no such program in the sandbox (not an executable file on the host)`;
  }
  const dirs = (process.env.PATH ?? '/usr/bin:/bin').split(':').filter((d) => path.isAbsolute(d));
  const visible = dirs.filter((d) => [...SYSTEM_DIRS, ...LINK_DIRS].some((s) => d === s || d.startsWith(`${s}/`)));
  if (visible.some((d) => executable(path.join(d, name)))) return null;
  return `${name}: command not found in the sandbox (PATH ${visible.join(':') || '(none of it visible)'}); name a program under /usr, /opt or a --ro path`;
}

const O_CLOEXEC = 0o2000000;

/**
 * Close the descriptors this process inherited and would pass on: bwrap closes none, so a
 * descriptor the shell or harness that started `ledgerfs run` left open (a pipe it reads, a
 * file, a socket) would be the program's, past every bind and the policy. Node opens its own
 * with O_CLOEXEC; what lacks it (read from /proc/self/fdinfo) came from outside and is not ours
 * to keep. stdin, stdout, stderr and Node's IPC channel stay. Returns the closed numbers.
 */
export function closeStrayDescriptors(): number[] {
  const keep = new Set([0, 1, 2]);
  const ipc = Number(process.env.NODE_CHANNEL_FD);
  if (Number.isInteger(ipc)) keep.add(ipc);
  const closed: number[] = [];
  let fds: string[];
  try {
    fds = fs.readdirSync('/proc/self/fd');
  } catch {
    return closed;
  }
  for (const name of fds) {
    const fd = Number(name);
    if (!Number.isInteger(fd) || keep.has(fd)) continue;
    let flags: number;
    try {
      const m = /^flags:\s*([0-7]+)/m.exec(fs.readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'));
      if (!m) continue;
      flags = parseInt(m[1] as string, 8);
    } catch {
      continue; // the descriptor readdir itself used, gone already
    }
    if (flags & O_CLOEXEC) continue;
    try {
      fs.closeSync(fd);
      closed.push(fd);
    } catch {
      /* gone meanwhile */
    }
  }
  return closed;
}
