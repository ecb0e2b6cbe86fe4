import { type Attr, type Caller, type Mutation, type MutationStage, type OpenFileState, VfsError } from '../core/index.js';
import { formatSize, POLICY_DEFAULTS } from '../config/index.js';
import type { CompiledPolicy, CompiledRoot } from './compile.js';
import { rules, sameRoot, whereChange, whereCreate } from './decide.js';
import type { DenialLog } from './denials.js';
import { mayNeedPrivilege, needsCurrent, privilegeRefusal } from './privileges.js';
import type { ChangeLimits } from './limits.js';
import { chargeOf, type Usage, type UsageTable } from './usage.js';
import type { PolicyView } from './view.js';

interface Detached {
  root: CompiledRoot;
  /** bytes charged to the root only because this file is open */
  bytes: number;
  /** the inode count is charged only because this file is open */
  file: boolean;
}

const META_VERBS: Record<string, string> = {
  chmod: 'change mode of',
  chown: 'change owner of',
  utimens: 'change times of',
  setxattr: 'set an attribute of',
  removexattr: 'remove an attribute of',
};

/**
 * The policy's mutation stage (first in the pipeline, before the journal): every mutation is
 * decided here before it reaches the backend, so nothing refused is journaled or applied.
 * Refusals carry the errno a program expects (EROFS, EACCES, EFBIG, EDQUOT, EXDEV) and a reason,
 * are logged and kept for /.ledgerfs/denials.
 *
 * It also keeps per-root usage exact as mutations succeed: growth is reserved before the
 * backend applies it (so concurrent writes cannot both squeeze under a quota) and given back if
 * it fails; space freed by unlink, truncate or rename-over is released after success. A file
 * unlinked while open keeps its space until its last close, as on a disk.
 *
 * `caller.operator` (rollback run by the CLI) passes the rules and limits but is still counted.
 * Paths here are view paths; the view below translates them.
 */
export class PolicyStage implements MutationStage {
  readonly name = 'policy';
  /**
   * Open files whose name went away (unlink, rename over them). Each owns what it keeps alive
   * beyond the tree, charged to its root until the last close, as a disk does: its bytes and
   * its inode when it was the last name, and any growth written after the inode left the tree.
   */
  private readonly detached = new Map<OpenFileState, Detached>();
  /** inode numbers of open files, once an fstat told them (reservations are kept by inode) */
  private readonly inodes = new WeakMap<OpenFileState, number>();
  /**
   * A handle whose name went away while its inode kept another name (`ln a b; rm a` with `a`
   * open) is a second way to the inode that nlink does not show: a size it changes is not seen
   * by the state open under the other name, whose remembered size then charges growth from the
   * wrong start (and usage drifts, down as well as up). Such a handle never remembers a size,
   * and each change through it makes every remembered size older than it unknown (fstat again).
   */
  private sizeEpoch = 0;
  private readonly sizeAt = new WeakMap<OpenFileState, number>();

  constructor(
    private readonly policy: CompiledPolicy,
    private readonly view: PolicyView,
    private readonly usage: UsageTable,
    private readonly denials: DenialLog,
    private readonly limits: ChangeLimits,
  ) {}

  run<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    const limited = m.caller.operator === true ? apply : () => this.withinLimits(m, apply);
    if (mayNeedPrivilege(m, this.policy.privileges)) return this.privileged(m, limited);
    return this.decide(m, limited);
  }

  /**
   * The mass-change guard (limits.ts), last of the checks: it runs as the change is applied, so
   * every rule and quota refused first, and the count is reserved in the same synchronous step
   * as its check, given back if the change fails.
   */
  private async withinLimits<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    const loc = m.path === '' ? this.detachedRoot(m.file) : this.policy.locate(m.path);
    if (loc === undefined || loc === null || loc.kind !== 'root') return apply();
    let release;
    try {
      release = this.limits.take(m, loc);
    } catch (err) {
      if (err instanceof VfsError) throw this.deny(m, m.path, err);
      throw err;
    }
    let r: T;
    try {
      r = await apply();
    } catch (err) {
      release();
      throw err;
    }
    if (m.op === 'write' && m.allocate === undefined && typeof r === 'number') this.limits.shortWrite(loc, (m.length ?? 0) - r);
    return r;
  }

  /** setid bits, chown to others, device nodes: refused unless the policy grants them */
  private async privileged<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    const current = needsCurrent(m) ? await this.statOrNull(m.path) : null;
    const e = privilegeRefusal(m, this.policy.privileges, current);
    if (e) throw this.deny(m, m.path, e);
    return this.decide(m, apply);
  }

  private decide<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    switch (m.op) {
      case 'write':
        return this.write(m, apply);
      case 'create':
        return this.create(m, apply);
      case 'truncate':
        return this.truncate(m, apply);
      case 'unlink':
        return this.unlink(m, apply);
      case 'mkdir':
        return this.mkdir(m, apply);
      case 'rmdir':
        return this.rmdir(m, apply);
      case 'rename':
        return this.rename(m, apply);
      case 'symlink':
        return this.symlink(m, apply);
      case 'link':
        return this.link(m, apply);
      case 'mknod':
        return this.mknod(m, apply);
      default:
        return this.metadata(m, apply);
    }
  }

  /** Refuse an open for writing where writes are forbidden (EROFS/EACCES at open, as a
   * read-only file system does, rather than at the first write). */
  async openingForWrite(path: string, caller: Caller): Promise<void> {
    const m: Mutation = { op: 'write', path, caller };
    const r = whereChange(this.policy, path, 'write to', false);
    if (r instanceof VfsError) throw this.deny(m, path, r, 'open');
    if (caller.operator !== true) {
      const e = rules(this.policy, r, path, 'write to', true);
      if (e) throw this.deny(m, path, e, 'open');
    }
  }

  async released(file: OpenFileState): Promise<void> {
    const d = this.detached.get(file);
    if (d === undefined) return;
    this.detached.delete(file);
    const u = this.usage.of(d.root);
    if (u === null) return;
    u.bytes -= d.bytes;
    if (d.file) u.files -= 1;
  }

  // ---- decisions -----------------------------------------------------------------------------

  /** Record (for programs, not operators) and return the refusal, for `throw`. */
  private deny(m: Mutation, path: string, err: VfsError, op: string = m.op): VfsError {
    if (!m.caller.operator && err.code !== 'ENOENT' && err.code !== 'EEXIST') {
      this.denials.record(op, path || '(a file deleted while open)', err, m.caller.pid);
    }
    return err;
  }

  /** The root of an existing node being changed, or throw the refusal. */
  private changing(m: Mutation, path: string, verb: string, removes: boolean, content: boolean): CompiledRoot {
    const r = whereChange(this.policy, path, verb, removes);
    if (r instanceof VfsError) throw this.deny(m, path, r);
    if (m.caller.operator !== true) {
      const e = rules(this.policy, r, path, verb, content);
      if (e) throw this.deny(m, path, e);
    }
    return r;
  }

  /** The root in which a new name `path` is made, or throw the refusal. */
  private creating(m: Mutation, path: string, verb: string, content: boolean): CompiledRoot {
    const r = whereCreate(this.policy, path, verb, false);
    if (r instanceof VfsError) throw this.deny(m, path, r);
    if (m.caller.operator !== true) {
      const e = rules(this.policy, r, path, verb, content);
      if (e) throw this.deny(m, path, e);
    }
    return r;
  }

  private tooBig(m: Mutation, path: string, verb: string, root: CompiledRoot, size: number): VfsError {
    const max = root.maxFileBytes as number;
    return this.deny(m, path, new VfsError(
      'EFBIG',
      `${verb} ${path || 'a file deleted while open'} refused: the file would grow to ${formatSize(size)}, past the largest file size of ${root.path} (${formatSize(max)})`,
    ));
  }

  private overBytes(m: Mutation, path: string, verb: string, root: CompiledRoot, u: Usage, growth: number): VfsError {
    const q = root.quota.bytes as number;
    return this.deny(m, path, new VfsError(
      'EDQUOT',
      `${verb} ${path || 'a file deleted while open'} refused: ${root.path} would use ${formatSize(u.bytes + growth)} of its ${formatSize(q)} quota (${formatSize(u.bytes)} used, ${formatSize(Math.max(0, q - u.bytes))} free)`,
    ));
  }

  private checkFiles(m: Mutation, path: string, verb: string, root: CompiledRoot, u: Usage): void {
    const q = root.quota.files;
    if (q === undefined || m.caller.operator === true || u.files + 1 <= q) return;
    throw this.deny(m, path, new VfsError(
      'EDQUOT',
      `${verb} ${path} refused: ${root.path} already holds ${u.files} files and directories, its quota is ${q}`,
    ));
  }

  // ---- sizes ---------------------------------------------------------------------------------

  private async sizeOf(of: OpenFileState): Promise<number> {
    const st = await of.file.stat();
    // a file with other names may change through them: only a single-name size is remembered
    if (st.nlink <= 1 && !this.linkedDetached(of)) this.remember(of, st.size);
    return st.size;
  }

  /** The size `of` remembers, unless a change through a detached handle may have made it old. */
  private known(of: OpenFileState): number | undefined {
    if (of.size === undefined || this.sizeEpoch === 0 || this.sizeAt.get(of) === this.sizeEpoch) return of.size;
    of.size = undefined;
    return undefined;
  }

  private remember(of: OpenFileState, size: number): void {
    of.size = size;
    if (this.sizeEpoch !== 0) this.sizeAt.set(of, this.sizeEpoch);
  }

  /** `of` lost its name but its inode kept another one (see sizeEpoch). */
  private linkedDetached(of: OpenFileState): boolean {
    return this.detached.get(of)?.file === false;
  }

  /** A size changed through `of`: if it is a linked detached handle, other states' sizes may be old. */
  private changedThrough(of: OpenFileState | undefined): void {
    if (of !== undefined && this.linkedDetached(of)) this.sizeEpoch++;
  }

  private async statOrNull(path: string): Promise<Attr | null> {
    try {
      return await this.view.stat(path);
    } catch (err) {
      if (err instanceof VfsError && err.code === 'ENOENT') return null;
      throw err;
    }
  }

  /** After a failed or short write, charge what the file really grew to. */
  private async resync(of: OpenFileState, u: Usage | null, charged: number, reservedTo: number): Promise<void> {
    let actual: number;
    try {
      actual = (await of.file.stat()).size;
    } catch {
      return;
    }
    if (u !== null) u.bytes += chargeOf(actual, reservedTo) - chargeOf(charged, reservedTo);
    if (of.size !== undefined) of.size = actual;
  }

  /**
   * Where the blocks fallocate --keep-size reserved past the end of an open file end (0: none).
   * Costs nothing while no file has a reservation; else an fstat once per open file.
   */
  private async reservedToOf(of: OpenFileState): Promise<number> {
    if (this.usage.reserved.size === 0) return 0;
    if (of.reservedTo !== undefined) return of.reservedTo;
    const st = await of.file.stat();
    this.inodes.set(of, st.ino);
    of.reservedTo = this.usage.reserved.get(st.ino) ?? 0;
    return of.reservedTo;
  }

  /** The reservation of `of` (or of inode `ino`) is gone: the file costs its size again. */
  private dropReservation(of: OpenFileState | undefined, ino?: number): void {
    const i = ino ?? (of ? this.inodes.get(of) : undefined);
    if (i !== undefined) this.usage.reserved.delete(i);
    if (of) of.reservedTo = 0;
  }

  /**
   * The name `before` described went away. The last name of an inode frees its space, unless
   * the file is open under that name (then it stays charged until the last close).
   */
  private forget(root: CompiledRoot, u: Usage, before: Attr, of: OpenFileState | undefined): void {
    const last = before.nlink <= 1;
    const charge = chargeOf(before.size, this.usage.reserved.get(before.ino) ?? 0);
    if (last) this.usage.reserved.delete(before.ino);
    if (of !== undefined) {
      of.size = last ? (of.size ?? before.size) : undefined;
      this.detached.set(of, { root, bytes: last ? charge : 0, file: last });
      return;
    }
    if (!last) return; // another name keeps the inode (and its count) alive
    u.bytes -= charge;
    u.files -= 1;
  }

  /** The root of a file written or truncated through an open handle whose name went away. */
  private detachedRoot(of: OpenFileState | undefined): CompiledRoot | undefined {
    return of === undefined ? undefined : this.detached.get(of)?.root;
  }

  /**
   * After a detached file changed size by `delta`: if its inode is no longer in the tree, the
   * change is this open file's to give back at close.
   */
  private async ownDetached(of: OpenFileState, delta: number): Promise<void> {
    const d = this.detached.get(of);
    if (d === undefined || delta === 0) return;
    if (d.file) {
      d.bytes += delta;
      return;
    }
    const st = await of.file.stat().catch(() => null);
    if (st !== null && st.nlink === 0) d.bytes += delta;
  }

  // ---- content -------------------------------------------------------------------------------

  private async write<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    const of = m.file;
    let root: CompiledRoot | undefined;
    if (m.path !== '') root = this.changing(m, m.path, 'write to', false, true);
    else root = this.detachedRoot(of);
    if (root === undefined || of === undefined) return apply();
    const u = this.usage.of(root);
    const max = root.maxFileBytes;
    if (u === null && max === undefined) return apply();

    const length = m.length ?? 0;
    const end = (m.offset ?? 0) + length;
    // a punched hole keeps the size (and frees blocks): nothing grows
    if (m.allocate === 'punch-hole') return apply();
    if (m.allocate === 'keep-size') return this.reserve(m, of, root, u, end, apply);
    const known = this.known(of);
    const before = known ?? (await this.sizeOf(of));
    if (end <= before) return apply(); // inside the file: nothing grows
    const op = m.caller.operator === true;
    const verb = m.allocate ? 'allocate space for' : 'write to';
    if (!op && max !== undefined && end > max) throw this.tooBig(m, m.path, verb, root, end);
    // blocks --keep-size reserved past the end are charged already: growing into them is free
    const reservedTo = await this.reservedToOf(of);
    const growth = chargeOf(end, reservedTo) - chargeOf(before, reservedTo);
    if (u !== null) {
      if (!op && root.quota.bytes !== undefined && growth > 0 && u.bytes + growth > root.quota.bytes) {
        throw this.overBytes(m, m.path, verb, root, u, growth);
      }
      u.bytes += growth; // reserved now, so a concurrent write sees it
    }
    if (of.size !== undefined) this.remember(of, end);
    let n: T;
    try {
      n = await apply();
    } catch (err) {
      this.changedThrough(of);
      await this.resync(of, u, end, reservedTo);
      throw err;
    }
    this.changedThrough(of);
    if (typeof n === 'number' && n < length) await this.resync(of, u, end, reservedTo);
    if (reservedTo > 0 && chargeOf(of.size ?? end, reservedTo) !== reservedTo) this.dropReservation(of); // grown past it
    if (m.path === '') await this.ownDetached(of, Math.max(0, growth));
    return n;
  }

  /**
   * fallocate --keep-size: blocks past the end, the size kept. Charged like the growth a write
   * to the same end would be (EDQUOT past the quota), since the program may fill them without
   * asking for space again; usage then counts the file by where its reservation ends (chargeOf),
   * as the file system reports it, until a write grows past it or a truncate frees it.
   */
  private async reserve<T>(m: Mutation, of: OpenFileState, root: CompiledRoot, u: Usage | null, end: number, apply: () => Promise<T>): Promise<T> {
    const op = m.caller.operator === true;
    const max = root.maxFileBytes;
    if (!op && max !== undefined && end > max) throw this.tooBig(m, m.path, 'allocate space for', root, end);
    if (u === null) return apply();
    // fallocate is rare: an fstat for the size and the inode costs nothing here
    const st = await of.file.stat();
    if (st.nlink <= 1 && !this.linkedDetached(of)) this.remember(of, st.size);
    this.inodes.set(of, st.ino);
    const had = this.usage.reserved.get(st.ino) ?? 0;
    const block = POLICY_DEFAULTS.reservationBlockBytes;
    const asked = Math.max(had, Math.ceil(end / block) * block);
    const before = chargeOf(st.size, had);
    const predicted = Math.max(before, chargeOf(st.size, asked));
    const growth = predicted - before;
    if (!op && root.quota.bytes !== undefined && growth > 0 && u.bytes + growth > root.quota.bytes) {
      throw this.overBytes(m, m.path, 'allocate space for', root, u, growth);
    }
    u.bytes += growth;
    let r: T;
    try {
      r = await apply();
    } catch (err) {
      u.bytes -= growth;
      throw err;
    }
    // what the file system holds now (it may have had blocks there already, or round further)
    let now = asked;
    if (of.file.allocatedEnd) now = await of.file.allocatedEnd().catch(() => asked);
    const after = chargeOf(st.size, now);
    u.bytes += after - predicted;
    if (after > st.size) {
      this.usage.reserved.set(st.ino, now);
      of.reservedTo = now;
    } else {
      this.dropReservation(of, st.ino);
    }
    if (m.path === '') await this.ownDetached(of, after - before);
    return r;
  }

  private async truncate<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    const of = m.file;
    let root: CompiledRoot | undefined;
    if (m.path !== '') root = this.changing(m, m.path, 'truncate', false, true);
    else root = this.detachedRoot(of);
    const size = m.size ?? 0;
    const u = root ? this.usage.of(root) : null;
    if (root === undefined || (u === null && root.maxFileBytes === undefined)) {
      const r = await apply();
      if (of !== undefined && of.size !== undefined) of.size = size;
      return r;
    }
    let before: number;
    let reservedTo = 0;
    let ino: number | undefined;
    if (of !== undefined) {
      before = this.known(of) ?? (await this.sizeOf(of));
      reservedTo = await this.reservedToOf(of);
    } else {
      const st = await this.view.stat(m.path);
      before = st.size;
      ino = st.ino;
      reservedTo = this.usage.reserved.get(st.ino) ?? 0;
    }
    const op = m.caller.operator === true;
    if (!op && root.maxFileBytes !== undefined && size > root.maxFileBytes && size > before) {
      throw this.tooBig(m, m.path, 'truncate', root, size);
    }
    // cutting (or keeping) the size frees every block past it, a reservation's too
    const keeps = size > before ? reservedTo : 0;
    const delta = chargeOf(size, keeps) - chargeOf(before, reservedTo);
    if (delta > 0 && u !== null) {
      if (!op && root.quota.bytes !== undefined && u.bytes + delta > root.quota.bytes) {
        throw this.overBytes(m, m.path, 'truncate', root, u, delta);
      }
      u.bytes += delta;
    }
    let r: T;
    try {
      r = await apply();
    } catch (err) {
      if (delta > 0 && u !== null) u.bytes -= delta;
      throw err;
    }
    this.changedThrough(of);
    if (delta < 0 && u !== null) u.bytes += delta;
    if (reservedTo > 0 && chargeOf(size, keeps) !== reservedTo) this.dropReservation(of, ino);
    if (of !== undefined && of.size !== undefined) this.remember(of, size);
    if (m.path === '' && of !== undefined) await this.ownDetached(of, delta);
    return r;
  }

  // ---- names ---------------------------------------------------------------------------------

  private async create<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    const root = this.creating(m, m.path, 'create', true);
    const u = this.usage.of(root);
    if (u === null) return apply();
    // the kernel's lookup just before the create usually told us already that the name is free;
    // an O_EXCL create needs no telling (it fails with EEXIST where a name is)
    const before = this.view.takeMissing(m.path) || m.exclusive ? null : await this.statOrNull(m.path);
    if (before === null) {
      this.checkFiles(m, m.path, 'create', root, u);
      u.files += 1;
      try {
        return await apply();
      } catch (err) {
        u.files -= 1;
        throw err;
      }
    }
    // O_CREAT on a name that exists (a race with the kernel's lookup): at most a truncate
    const r = await apply();
    if (m.truncate && before.type === 'file') {
      u.bytes -= chargeOf(before.size, this.usage.reserved.get(before.ino) ?? 0);
      this.usage.reserved.delete(before.ino);
    }
    return r;
  }

  private mkdir<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    return this.newName(m, 'make directory', false, apply);
  }

  /** a FIFO, socket or (granted) device node: a new name, counted as a file */
  private mknod<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    return this.newName(m, 'create', true, apply);
  }

  /** A name with no bytes of its own (a directory, a special file): it costs one file of the quota. */
  private async newName<T>(m: Mutation, verb: string, isFile: boolean, apply: () => Promise<T>): Promise<T> {
    const root = this.creating(m, m.path, verb, isFile);
    const u = this.usage.of(root);
    if (u === null) return apply();
    this.checkFiles(m, m.path, verb, root, u);
    u.files += 1;
    try {
      return await apply();
    } catch (err) {
      u.files -= 1;
      throw err;
    }
  }

  private async symlink<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    const root = this.creating(m, m.path, 'create symlink', true);
    const u = this.usage.of(root);
    if (u === null) return apply();
    const bytes = Buffer.byteLength(m.target ?? '');
    this.checkFiles(m, m.path, 'create symlink', root, u);
    if (m.caller.operator !== true && root.quota.bytes !== undefined && u.bytes + bytes > root.quota.bytes) {
      throw this.overBytes(m, m.path, 'create symlink', root, u, bytes);
    }
    u.files += 1;
    u.bytes += bytes;
    try {
      return await apply();
    } catch (err) {
      u.files -= 1;
      u.bytes -= bytes;
      throw err;
    }
  }

  private async unlink<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    const root = this.changing(m, m.path, 'delete', true, false);
    const u = this.usage.of(root);
    if (u === null) return apply();
    const before = await this.view.stat(m.path);
    const r = await apply();
    if (before.type !== 'dir') this.forget(root, u, before, m.file);
    return r;
  }

  private async rmdir<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    const root = this.changing(m, m.path, 'remove directory', true, false);
    const u = this.usage.of(root);
    const r = await apply();
    if (u !== null) u.files -= 1;
    return r;
  }

  /**
   * The two ends of a rename or link: `from` must be changeable, `to` creatable (replacing what
   * is there for a rename), and both in one root, else EXDEV so that `mv` copies and deletes.
   */
  private bothEnds(m: Mutation, op: 'rename' | 'link', from: string, to: string, verb: string, replaces: boolean): [CompiledRoot, CompiledRoot] {
    const a = whereChange(this.policy, from, op, replaces);
    if (a instanceof VfsError) throw this.deny(m, from, a);
    const b = whereCreate(this.policy, to, verb, replaces);
    if (b instanceof VfsError) throw this.deny(m, to, b);
    const x = sameRoot(op, from, a, to, b);
    if (x) throw this.deny(m, from, x);
    return [a, b];
  }

  private async link<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    const existing = m.path;
    const target = m.target as string;
    const verb = `link ${existing} as`;
    const [a, b] = this.bothEnds(m, 'link', existing, target, verb, false);
    if (m.caller.operator !== true) {
      const e = rules(this.policy, b, target, verb, true);
      if (e) throw this.deny(m, target, e);
      // A second name must not make writable what is not writable under its own name (a
      // read-only pattern, or a name without an allowed suffix).
      const own = rules(this.policy, a, existing, 'write to', true);
      if (own) {
        throw this.deny(m, existing, new VfsError(
          own.code,
          `link ${existing} as ${target} refused: a second name would make it writable, and ${own.reason.replace(/^write to \S+ refused: /, '')}`,
        ));
      }
    }
    const r = await apply();
    // two names now: the size may change through the other one (usage counts the inode once)
    if (m.file !== undefined) m.file.size = undefined;
    return r;
  }

  private async rename<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    const from = m.path;
    const to = m.target as string;
    const verb = `rename ${from} to`;
    const [a, b] = this.bothEnds(m, 'rename', from, to, verb, true);
    const src = await this.view.stat(from);
    if (m.caller.operator !== true) {
      const e = rules(this.policy, a, from, 'rename', false);
      if (e) throw this.deny(m, from, e);
      const f = rules(this.policy, b, to, verb, src.type !== 'dir');
      if (f) throw this.deny(m, to, f);
      if (src.type === 'dir' && a.positional) await this.checkSubtree(m, a, from, to);
    }
    const u = this.usage.of(a);
    if (u === null) return apply();
    const dst = await this.statOrNull(to);
    const r = await apply();
    if (dst !== null && !(dst.ino !== 0 && dst.ino === src.ino)) {
      if (dst.type === 'dir') u.files -= 1;
      else this.forget(a, u, dst, m.targetFile);
    }
    return r;
  }

  /**
   * Moving a directory moves everything below it; with globs that look at more than names, that
   * could reveal a hidden file or free a read-only one (or the reverse). Walk and refuse if so.
   */
  private async checkSubtree(m: Mutation, root: CompiledRoot, from: string, to: string): Promise<void> {
    const inner = this.view.inner;
    const stack = [''];
    while (stack.length) {
      const rel = stack.pop() as string;
      for (const e of await inner.readdir(root.toBackend(from + rel))) {
        const r = `${rel}/${e.name}`;
        const oldP = from + r;
        const newP = to + r;
        const hidden = root.isHidden(oldP);
        if (hidden !== root.isHidden(newP)) {
          // never name what is hidden, not even in a refusal
          throw this.deny(m, from, new VfsError('EACCES', `rename ${from} to ${to} refused: it would change what the policy hides inside it`));
        }
        if (root.isReadonly(oldP) !== root.isReadonly(newP)) {
          throw this.deny(m, from, new VfsError(
            'EACCES',
            `rename ${from} to ${to} refused: it would change what is read-only inside it (${oldP} would become ${newP})`,
          ));
        }
        if (e.type === 'dir') stack.push(r);
      }
    }
  }

  private async metadata<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    this.changing(m, m.path, META_VERBS[m.op] ?? m.op, false, false);
    return apply();
  }
}
