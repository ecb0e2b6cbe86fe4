import { type Mutation, type OpenFileState, VfsError } from '../core/index.js';
import { formatSize, LIMIT_NAMES, type LimitName, type Limits } from '../config/index.js';
import type { CompiledPolicy, CompiledRoot } from './compile.js';

/**
 * The mass-change guard: how much one session (this mount) may change, in all roots together
 * (the mount file's `limits`) and in each root (`roots[i].limits`). A mutation that would pass
 * a limit is refused before it reaches the journal or the backend: EPERM for deletes and
 * renames (the program may not do this at all any more), EDQUOT for files and bytes written
 * (the program ran out of an allowance, as of a quota).
 *
 * Counts are reserved before the change is applied and given back if it fails, in one
 * synchronous step with the check: parallel calls cannot both squeeze under a limit (the
 * quota's rule, policy/stage.ts). Operator actions (a rollback) are neither limited nor counted.
 */

export type Counts = Record<LimitName, number>;

const zero = (): Counts => ({ deletes: 0, renames: 0, filesWritten: 0, bytesWritten: 0 });

/** What each limit counts, for refusals and /.ledgerfs/session. */
const WHAT: Record<LimitName, string> = {
  deletes: 'deleted files and directories',
  renames: 'renames',
  filesWritten: 'files created or written, each once',
  bytesWritten: 'bytes written',
};

const ERRNO: Record<LimitName, 'EPERM' | 'EDQUOT'> = {
  deletes: 'EPERM',
  renames: 'EPERM',
  filesWritten: 'EDQUOT',
  bytesWritten: 'EDQUOT',
};

/** A session's counts as kept between its mounts (app/limit-counts.ts): per root by the root's path. */
export interface LimitCountsSnapshot {
  session: Counts;
  byRoot: Record<string, Counts>;
  /** the view paths counted as written (a file written again counts once) */
  files: string[];
}

/** A reservation: give it back when the change failed. */
export type Release = () => void;
const NOTHING: Release = () => undefined;

export class ChangeLimits {
  /** this session's counts, all roots together */
  readonly session: Counts = zero();
  /** this session's counts per root, indexed like policy.roots */
  readonly byRoot: Counts[];
  /**
   * Files counted as written, by their view path when first counted (and open files already
   * counted): a file written many times counts once. Kept only where a filesWritten limit
   * applies (it then holds at most that many names); elsewhere filesWritten is not counted.
   */
  private readonly writtenPaths = new Set<string>();
  private readonly writtenFiles = new WeakSet<OpenFileState>();
  constructor(private readonly policy: CompiledPolicy) {
    this.byRoot = policy.roots.map(() => zero());
  }

  /** Bumped at every change of the counts (and of the files counted with them): a keeper of
   * the counts compares it instead of a snapshot. */
  version = 0;

  /** The counts so far, to be kept for a later mount of the same session. */
  snapshot(): LimitCountsSnapshot {
    const byRoot: Record<string, Counts> = {};
    this.policy.roots.forEach((r, i) => (byRoot[r.path] = { ...(this.byRoot[i] as Counts) }));
    return { session: { ...this.session }, byRoot, files: [...this.writtenPaths] };
  }

  /**
   * Go on from what an earlier mount of this session counted (a remount must not hand the
   * session a fresh allowance). Roots are matched by path; a root the policy no longer has is
   * counted in the session's total only.
   */
  restore(s: LimitCountsSnapshot): void {
    this.version++;
    for (const n of LIMIT_NAMES) this.session[n] += s.session[n] ?? 0;
    this.policy.roots.forEach((r, i) => {
      const was = s.byRoot[r.path];
      if (was) for (const n of LIMIT_NAMES) (this.byRoot[i] as Counts)[n] += was[n] ?? 0;
    });
    for (const f of s.files) this.writtenPaths.add(f);
  }

  get sessionLimits(): Limits {
    return this.policy.config.limits;
  }

  limitsOf(root: CompiledRoot): Limits {
    return root.config.limits;
  }

  /** Whether filesWritten is counted in `root` (a limit applies there). */
  tracksFiles(root: CompiledRoot): boolean {
    return this.sessionLimits.filesWritten !== undefined || root.config.limits.filesWritten !== undefined;
  }

  /**
   * Reserve what `m` counts against (none: a no-op). Throws the refusal (a VfsError) if a
   * limit would be passed; nothing is reserved then.
   */
  take(m: Mutation, root: CompiledRoot): Release {
    if (m.caller.operator === true) return NOTHING;
    switch (m.op) {
      case 'unlink':
      case 'rmdir':
        return this.reserve(m, root, 'deletes', 1);
      case 'rename':
        return this.reserve(m, root, 'renames', 1);
      case 'create':
      case 'mknod':
      case 'symlink':
        return this.fileWritten(m, root);
      case 'truncate':
        return this.fileWritten(m, root);
      case 'write': {
        if (m.allocate !== undefined) return NOTHING; // blocks, not bytes: the quota judges those
        const files = this.fileWritten(m, root);
        try {
          const bytes = this.reserve(m, root, 'bytesWritten', m.length ?? 0);
          return () => {
            bytes();
            files();
          };
        } catch (err) {
          files();
          throw err;
        }
      }
      default:
        return NOTHING;
    }
  }

  /** A write returned fewer bytes than it asked for: give back the rest. */
  shortWrite(root: CompiledRoot, unused: number): void {
    if (unused <= 0) return;
    this.session.bytesWritten -= unused;
    (this.byRoot[root.index] as Counts).bytesWritten -= unused;
  }

  private fileWritten(m: Mutation, root: CompiledRoot): Release {
    if (!this.tracksFiles(root)) return NOTHING;
    const of = m.file;
    if (of !== undefined && this.writtenFiles.has(of)) return NOTHING;
    const key = m.path;
    if (key !== '' && this.writtenPaths.has(key)) {
      if (of !== undefined) this.writtenFiles.add(of);
      return NOTHING;
    }
    const release = this.reserve(m, root, 'filesWritten', 1);
    if (key !== '') this.writtenPaths.add(key);
    if (of !== undefined) this.writtenFiles.add(of);
    return () => {
      release();
      if (key !== '') this.writtenPaths.delete(key);
      if (of !== undefined) this.writtenFiles.delete(of);
    };
  }

  private reserve(m: Mutation, root: CompiledRoot, name: LimitName, n: number): Release {
    if (n === 0) return NOTHING;
    const mine = this.byRoot[root.index] as Counts;
    const sessionMax = this.sessionLimits[name];
    const rootMax = root.config.limits[name];
    if (sessionMax !== undefined && this.session[name] + n > sessionMax) throw refusal(m, name, this.session[name], n, sessionMax, 'this session', 'limits');
    if (rootMax !== undefined && mine[name] + n > rootMax) {
      throw refusal(m, name, mine[name], n, rootMax, `this session in ${root.path}`, `roots[${root.index}].limits`);
    }
    this.session[name] += n;
    mine[name] += n;
    this.version++;
    return () => {
      this.session[name] -= n;
      mine[name] -= n;
      this.version++;
    };
  }
}

const VERBS: Partial<Record<Mutation['op'], string>> = {
  unlink: 'delete',
  rmdir: 'remove directory',
  rename: 'rename',
  create: 'create',
  mknod: 'create',
  symlink: 'create symlink',
  truncate: 'truncate',
  write: 'write to',
};

function amount(name: LimitName, n: number): string {
  return name === 'bytesWritten' ? formatSize(n) : String(n);
}

/**
 * `delete /a/x refused: this session has deleted 500 files and directories, its limit
 * (limits.deletes: 500); to allow more, raise limits.deletes in the mount file (or set it to
 * unlimited) and mount again`. The program reads this in /.ledgerfs/denials, so it names the
 * field, not where the mount file is.
 */
function refusal(m: Mutation, name: LimitName, used: number, n: number, max: number, who: string, field: string): VfsError {
  const what = m.op === 'rename' ? `${m.path} to ${m.target ?? ''}` : m.path || 'a file deleted while open';
  const more = name === 'bytesWritten' ? `, and ${amount(name, n)} more would pass its` : ', its';
  return new VfsError(
    ERRNO[name],
    `${VERBS[m.op] ?? m.op} ${what} refused: ${who} has ${name === 'bytesWritten' ? `written ${amount(name, used)}` : `${used} ${WHAT[name]}`}${more} limit (${field}.${name}: ${amount(name, max)}); to allow more, raise ${field}.${name} in the mount file (or set it to unlimited) and mount again`,
  );
}

/** The limit names in their order, with what each counts (for descriptions). */
export const LIMIT_WHAT: ReadonlyArray<[LimitName, string]> = LIMIT_NAMES.map((n) => [n, WHAT[n]]);

/** One limit as text: "500", "1 GiB", or "unlimited". */
export function limitText(name: LimitName, v: number | undefined): string {
  return v === undefined ? 'unlimited' : amount(name, v);
}
