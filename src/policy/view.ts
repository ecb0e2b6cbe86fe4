import { createHash } from 'node:crypto';
import { type Attr, type Backend, type BackendCapabilities, type BackendFile, type DirEntry, type FsStats, joinPath, type Logger, type OpenMode, parentOf, type TimeSpec, VfsError } from '../core/index.js';
import { POLICY_DEFAULTS } from '../config/index.js';
import { CompiledRoot, isKeptName, META_FILES, type CompiledPolicy, type MetaFileName } from './compile.js';
import { sameRoot, whereChange, whereCreate } from './decide.js';
import type { DenialLog } from './denials.js';
import { describeDenials, describePolicy, describeMode, describeSession, describeUsage, type SessionInfo } from './describe.js';
import type { ChangeLimits } from './limits.js';
import type { UsageTable } from './usage.js';

/** A read-only file whose content was fixed when it was opened (/.ledgerfs/*). */
class SnapshotFile implements BackendFile {
  readonly writable = false;
  constructor(
    private readonly data: Buffer,
    private readonly attr: Attr,
  ) {}
  async read(buf: Buffer, length: number, position: number): Promise<number> {
    if (position >= this.data.length) return 0;
    return this.data.copy(buf, 0, position, Math.min(this.data.length, position + length));
  }
  async write(): Promise<number> {
    throw new VfsError('EROFS', `${POLICY_DEFAULTS.metaDir} is read-only`);
  }
  async truncate(): Promise<void> {
    throw new VfsError('EROFS', `${POLICY_DEFAULTS.metaDir} is read-only`);
  }
  async stat(): Promise<Attr> {
    return this.attr;
  }
  async sync(): Promise<void> {}
  async close(): Promise<void> {}
}

/**
 * The backend as the policy shows it: a Backend layer over the real one. It translates view
 * paths to backend paths (a root's `source` prefix), synthesizes the read-only parents of
 * roots, hides what the policy hides (ENOENT, left out of listings), serves /.ledgerfs, and
 * answers statfs from the root's quota. Mutations reaching it were already decided by the
 * policy stage (which also decides opens for writing); here they are only translated, and
 * refused if they fall outside the shape of the view (which no caller, operator included, may
 * cross). Keeps vfs/ free of policy.
 */
export class PolicyView implements Backend {
  readonly kind: string;
  readonly location: string;
  readonly capabilities: BackendCapabilities;
  private readonly uid = process.getuid?.() ?? 0;
  private readonly gid = process.getgid?.() ?? 0;
  private readonly bornNs = BigInt(Date.now()) * 1_000_000n;
  /**
   * The latest content of each /.ledgerfs file as last reported by stat. An open serves exactly
   * this text, so the size the kernel got from getattr always matches what read returns (the
   * kernel caches the size for --attr-timeout and would cut a longer text or pad a shorter one).
   */
  private readonly snapshots = new Map<MetaFileName, Buffer>();
  /**
   * The last name the backend reported missing. The kernel looks a name up right before it
   * creates it, so the policy stage can count a create as a new file without a second stat
   * (which costs more than all the policy checks together). Anything made through this view
   * clears it; changes made beside the mount are not seen, as for usage in general.
   */
  private missing: string | null = null;
  /** hidden subdirectories counted per directory, good while its mtime and link count hold */
  private readonly hiddenDirs = new Map<string, { mtimeNs: bigint; nlink: number; hidden: number }>();

  /** The session /.ledgerfs/session names: told by the mount once its journal is open. */
  session: SessionInfo = { id: null, mode: 'live' };
  /** extra lines for /.ledgerfs/usage from above (the journal's state directory running low on space) */
  usageNotes: (() => string | null) | undefined;

  constructor(
    readonly inner: Backend,
    readonly policy: CompiledPolicy,
    readonly usage: UsageTable,
    readonly denials: DenialLog,
    /** where the operator is told what the program must not learn (hidden names kept by rmdir) */
    private readonly log?: Logger,
    /** the mass-change guard's counts, for /.ledgerfs/session */
    readonly limits?: ChangeLimits,
  ) {
    this.kind = `policy(${inner.kind})`;
    this.location = inner.location;
    this.capabilities = inner.capabilities;
    if (!inner.keepCopy) this.keepCopy = undefined;
    if (!inner.copyOut) this.copyOut = undefined;
  }

  /**
   * Not offered through the view: the vfs above lists with readdir, and the metadata caches that
   * use these sit below the view. Declared so that the exhaustiveness check below holds.
   */
  readonly readdirPlus: undefined = undefined;
  readonly readdirTree: undefined = undefined;
  readonly dirChange: undefined = undefined;
  /** store paths: apply pins them on the store beneath the view (app/staged.ts) */
  readonly expectVersions: undefined = undefined;
  /** a LOOKUP through the view takes stat, whose miss keeps the view's note of a missing name */
  readonly statOrNull: undefined = undefined;

  // ---- synthesized nodes ---------------------------------------------------------------------

  /** `subdirs`: nlink is 2 + subdirectories, as find's leaf optimization expects */
  private dirAttr(ino: number, subdirs: number): Attr {
    return {
      type: 'dir', mode: 0o040555, size: 0, nlink: 2 + subdirs, uid: this.uid, gid: this.gid, ino, blocks: 0,
      atimeNs: this.bornNs, mtimeNs: this.bornNs, ctimeNs: this.bornNs,
    };
  }

  private fileAttr(size: number, ino: number): Attr {
    const now = BigInt(Date.now()) * 1_000_000n;
    return {
      type: 'file', mode: 0o100444, size, nlink: 1, uid: this.uid, gid: this.gid, ino, blocks: Math.ceil(size / 512),
      atimeNs: now, mtimeNs: now, ctimeNs: now,
    };
  }

  private render(name: MetaFileName): string {
    switch (name) {
      case 'policy':
        return describePolicy(this.policy, 'program');
      case 'usage': {
        const note = this.usageNotes?.();
        return describeUsage(this.policy, this.usage) + (note ? `\n${note}\n` : '');
      }
      case 'denials':
        return describeDenials(this.denials.list());
      case 'session':
        return this.limits ? describeSession(this.policy, this.limits, this.session) : [`session: ${this.session.id ?? 'none'}`, ...describeMode(this.session)].join('\n') + '\n';
    }
  }

  private snapshot(name: MetaFileName, refresh: boolean): Buffer {
    const cur = this.snapshots.get(name);
    if (cur && !refresh) return cur;
    const next = Buffer.from(this.render(name));
    if (cur && cur.equals(next)) return cur;
    this.snapshots.set(name, next);
    return next;
  }

  // ---- translation ---------------------------------------------------------------------------

  private change(path: string, verb: string, removes: boolean): string {
    return this.changedRoot(path, verb, removes).toBackend(path);
  }

  /** the root a change of `path` happens in, or the refusal thrown */
  private changedRoot(path: string, verb: string, removes: boolean): CompiledRoot {
    const r = whereChange(this.policy, path, verb, removes);
    if (r instanceof VfsError) throw r;
    return r;
  }

  private create(path: string, verb: string, replaces: boolean): string {
    const r = whereCreate(this.policy, path, verb, replaces);
    if (r instanceof VfsError) throw r;
    return r.toBackend(path);
  }

  /** True (once) if the backend said `path` does not exist and nothing made it since. */
  takeMissing(path: string): boolean {
    if (this.missing !== path) return false;
    this.missing = null;
    return true;
  }

  /** A name is being made (or moved) through the view: it is no longer known to be missing. */
  private made(path: string): void {
    if (this.missing === path) this.missing = null;
  }

  // ---- Backend: reads ------------------------------------------------------------------------

  async stat(path: string): Promise<Attr> {
    const loc = this.policy.locate(path);
    if (loc === null) throw new VfsError('ENOENT', `${path} does not exist in this view`);
    if (loc.kind === 'root') {
      if (loc.isHidden(path)) throw new VfsError('ENOENT', `${path} does not exist in this view`);
      try {
        const attr = await this.inner.stat(loc.toBackend(path));
        if (this.missing === path) this.missing = null; // it appeared beside the mount
        return await this.visibleLinks(loc, path, attr);
      } catch (err) {
        if (err instanceof VfsError && err.code === 'ENOENT') this.missing = path;
        throw err;
      }
    }
    if (loc.kind === 'synth') return this.dirAttr(loc.ino, loc.children.size + (path === '/' ? 1 : 0));
    if (loc.name === '') return this.dirAttr(loc.ino, 0);
    return this.fileAttr(this.snapshot(loc.name, true).length, loc.ino);
  }

  /** stat without the cost of an exception for what is absent (the journal asks before every create). */
  async tryStat(path: string): Promise<Attr | null> {
    const loc = this.policy.locate(path);
    if (loc?.kind !== 'root') return loc === null ? null : this.stat(path);
    if (loc.isHidden(path)) return null;
    const b = loc.toBackend(path);
    const attr = this.inner.tryStat ? await this.inner.tryStat(b) : await this.inner.stat(b).catch((err: unknown) => {
      if (err instanceof VfsError && (err.code === 'ENOENT' || err.code === 'ENOTDIR')) return null;
      throw err;
    });
    if (attr === null) this.missing = path;
    else if (this.missing === path) this.missing = null; // it appeared beside the mount
    return attr === null ? null : this.visibleLinks(loc, path, attr);
  }

  /**
   * A directory's link count is 2 + its subdirectories, hidden ones (and directories kept for
   * their hidden names) included: `stat -c %h` would tell a program how many it cannot see.
   * Counted without them, where the root hides anything and there are subdirectories at all.
   */
  private async visibleLinks(loc: CompiledRoot, path: string, attr: Attr): Promise<Attr> {
    if (attr.type !== 'dir' || attr.nlink <= 2 || loc.hideRe === null) return attr;
    // (a subdirectory made, removed or renamed changes the directory's mtime or link count: a
    // tree walk stats each directory once per listing, not once per entry)
    const known = this.hiddenDirs.get(path);
    let hidden: number;
    if (known && known.mtimeNs === attr.mtimeNs && known.nlink === attr.nlink) {
      hidden = known.hidden;
    } else {
      hidden = 0;
      for (const e of await this.inner.readdir(loc.toBackend(path))) {
        if (e.type === 'dir' && loc.isHidden(joinPath(path, e.name))) hidden++;
      }
      if (this.hiddenDirs.size >= POLICY_DEFAULTS.hiddenLinkCacheEntries) this.hiddenDirs.delete(this.hiddenDirs.keys().next().value as string);
      this.hiddenDirs.set(path, { mtimeNs: attr.mtimeNs, nlink: attr.nlink, hidden });
    }
    return hidden === 0 ? attr : { ...attr, nlink: Math.max(2, attr.nlink - hidden) };
  }

  async readdir(path: string): Promise<DirEntry[]> {
    const loc = this.policy.locate(path);
    if (loc === null) throw new VfsError('ENOENT', `${path} does not exist in this view`);
    const metaEntry: DirEntry = { name: this.policy.metaDir.slice(1), type: 'dir' };
    if (loc.kind === 'synth') {
      const out: DirEntry[] = loc.names.map((name) => ({ name, type: 'dir' }));
      if (path === '/' && this.policy.config.listMeta !== false) out.push(metaEntry);
      return out;
    }
    if (loc.kind === 'meta') {
      if (loc.name !== '') throw new VfsError('ENOTDIR', `${path} is not a directory`);
      return META_FILES.map((name) => ({ name, type: 'file' }));
    }
    if (loc.isHidden(path)) throw new VfsError('ENOENT', `${path} does not exist in this view`);
    let ents = await this.inner.readdir(loc.toBackend(path));
    if (loc.hideRe !== null || ents.some((e) => isKeptName(e.name))) ents = ents.filter((e) => !loc.isHidden(joinPath(path, e.name)));
    if (path === '/') {
      // a root at "/": /.ledgerfs shadows whatever the backend has under that name
      ents = ents.filter((e) => e.name !== metaEntry.name);
      if (this.policy.config.listMeta !== false) ents.push(metaEntry);
    }
    return ents;
  }

  async readlink(path: string): Promise<string> {
    const loc = this.policy.locate(path);
    if (loc === null || (loc.kind === 'root' && loc.isHidden(path))) throw new VfsError('ENOENT', `${path} does not exist in this view`);
    if (loc.kind !== 'root') throw new VfsError('EINVAL', `${path} is not a symlink`);
    return this.inner.readlink(loc.toBackend(path));
  }

  /** Before-images kept by the store itself (GCS server-side copies), for a file in a root. */
  keepCopy?(path: string, size: number): Promise<string | null> {
    const loc = this.policy.locate(path);
    if (loc?.kind !== 'root' || loc.isHidden(path)) return Promise.resolve(null);
    return (this.inner.keepCopy as NonNullable<Backend['keepCopy']>).call(this.inner, loc.toBackend(path), size);
  }

  /** Before-images copied by the store (a reflink on the local backend), for a file in a root. */
  copyOut?(path: string, hostFile: string): Promise<void> {
    const loc = this.policy.locate(path);
    if (loc?.kind !== 'root' || loc.isHidden(path)) return Promise.reject(new VfsError('ENOENT', `${path} does not exist in this view`));
    return (this.inner.copyOut as NonNullable<Backend['copyOut']>).call(this.inner, loc.toBackend(path), hostFile);
  }

  async open(path: string, mode: OpenMode, createMode?: number): Promise<BackendFile> {
    const loc = this.policy.locate(path);
    if (loc?.kind === 'meta') {
      if (mode.write || mode.create) {
        const r = whereChange(this.policy, path, 'write to', false);
        throw r instanceof VfsError ? r : new VfsError('EROFS', `${path} is read-only`);
      }
      if (loc.name === '') throw new VfsError('EISDIR', `${path} is a directory`);
      const data = this.snapshot(loc.name, false);
      return new SnapshotFile(data, this.fileAttr(data.length, loc.ino));
    }
    const verb = mode.create ? 'create' : mode.write ? 'write to' : 'open';
    const r = mode.create ? whereCreate(this.policy, path, verb, false) : whereChange(this.policy, path, verb, false);
    if (r instanceof VfsError) throw r.code === 'EEXIST' ? new VfsError('EISDIR', `${path} is a directory`) : r;
    if (mode.create) this.made(path);
    return this.inner.open(r.toBackend(path), mode, createMode);
  }

  async statfs(path: string): Promise<FsStats> {
    const loc = this.policy.locate(path);
    if (!(loc instanceof CompiledRoot)) return this.inner.statfs('/');
    const base = await this.inner.statfs(loc.source);
    const u = this.usage.of(loc);
    const q = loc.quota;
    if (u === null || (q.bytes === undefined && q.files === undefined)) return base;
    const out: FsStats = { ...base };
    if (q.bytes !== undefined) {
      // df shows the root's quota as the size; free is the smaller of quota left and disk left
      const bs = POLICY_DEFAULTS.statfsBlockSize;
      const diskFree = Math.floor((base.bavail * base.bsize) / bs);
      out.bsize = bs;
      out.blocks = Math.ceil(q.bytes / bs);
      out.bavail = Math.min(diskFree, Math.max(0, Math.floor((q.bytes - u.bytes) / bs)));
      out.bfree = out.bavail;
    }
    if (q.files !== undefined) {
      out.files = q.files;
      out.ffree = Math.min(base.ffree, Math.max(0, q.files - u.files));
    }
    return out;
  }

  // ---- Backend: mutations (decided by the policy stage; translated here) ---------------------

  async mkdir(path: string, mode: number): Promise<void> {
    this.made(path);
    const b = this.create(path, 'make directory', false);
    // a directory of this name was kept for its hidden names: it comes back, as if new
    if (this.usage.kept > 0) {
      const root = this.policy.locate(path) as CompiledRoot;
      const kept = await this.keptAt(root, path, 'last');
      if (kept !== null) {
        await this.inner.rename(root.toBackend(kept), b);
        this.usage.kept--;
        const h = this.usage.hiddenOf(root);
        if (h) h.files--;
        await this.inner.chmod(b, mode);
        await this.inner.utimens(b, { atimeNs: 'now', mtimeNs: 'now' });
        this.log?.info({ path, from: kept }, `mkdir ${path}: brought back the directory kept for the hidden names it holds`);
        return;
      }
    }
    await this.inner.mkdir(b, mode);
  }

  async rmdir(path: string): Promise<void> {
    const b = this.change(path, 'remove directory', true);
    try {
      await this.inner.rmdir(b);
    } catch (err) {
      if (!(err instanceof VfsError && err.code === 'ENOTEMPTY')) throw err;
      if (!(await this.keepHidden(path, b, `rmdir ${path}`))) throw err;
    }
  }

  /**
   * The name of a kept directory of `path` (view path, beside it): the first free one
   * (`which: 'free'`), or the last one there is (`'last'`, null if none).
   */
  private async keptAt(root: CompiledRoot, path: string, which: 'free' | 'last'): Promise<string | null> {
    const name = path.slice(path.lastIndexOf('/') + 1);
    const parent = parentOf(path);
    // a name too long to carry the prefix goes by its hash
    const base = POLICY_DEFAULTS.keptPrefix.length + 12 + Buffer.byteLength(name) > 255 ? `#${createHash('sha256').update(name).digest('hex').slice(0, 32)}` : name;
    let last: string | null = null;
    for (let n = 1; ; n++) {
      const p = joinPath(parent, `${POLICY_DEFAULTS.keptPrefix}${n}.${base}`);
      const st = this.inner.tryStat ? await this.inner.tryStat(root.toBackend(p)) : await this.inner.stat(root.toBackend(p)).catch(() => null);
      if (st === null) return which === 'free' ? p : last;
      last = p;
    }
  }

  /**
   * `path` looks empty to the program but its directory still holds names the policy hides. A
   * program expects an empty directory to go (rmdir, or a rename over it); an ENOTEMPTY, or any
   * refusal, would tell it that hidden names are there, and deleting them would destroy what it
   * was never allowed to see. So the directory is moved aside, hidden names and all, to a kept
   * name beside it (hidden in every view), and a later mkdir of the name (a rollback's
   * included) brings it back. The operator is told at warn. False when a visible name is there:
   * the ENOTEMPTY is then the truth.
   */
  private async keepHidden(path: string, backendPath: string, what: string): Promise<boolean> {
    const root = this.policy.locate(path);
    if (!(root instanceof CompiledRoot)) return false;
    const ents = await this.inner.readdir(backendPath);
    if (ents.length === 0 || ents.some((e) => !root.isHidden(joinPath(path, e.name)))) return false;
    const kept = (await this.keptAt(root, path, 'free')) as string;
    await this.inner.rename(backendPath, root.toBackend(kept));
    this.usage.kept++;
    const h = this.usage.hiddenOf(root);
    if (h) h.files++;
    this.log?.warn(
      { path, kept: `${this.inner.location}${root.toBackend(kept)}`, hidden: ents.map((e) => e.name).slice(0, 20) },
      `${what}: the directory still held ${ents.length} name(s) the policy hides; kept them in ${this.inner.location}${root.toBackend(kept)} instead of answering ENOTEMPTY (which would reveal them) or deleting them; a mkdir of ${path} brings them back`,
    );
    return true;
  }

  unlink(path: string): Promise<void> {
    return this.inner.unlink(this.change(path, 'delete', true));
  }

  async rename(from: string, to: string): Promise<void> {
    const a = whereChange(this.policy, from, 'rename', true);
    if (a instanceof VfsError) throw a;
    const b = whereCreate(this.policy, to, `rename ${from} to`, true);
    if (b instanceof VfsError) throw b;
    const x = sameRoot('rename', from, a, to, b);
    if (x) throw x;
    this.made(to);
    try {
      return await this.inner.rename(a.toBackend(from), b.toBackend(to));
    } catch (err) {
      // over a directory that looks empty but holds hidden names: keep them aside, as rmdir does
      if (!(err instanceof VfsError && (err.code === 'ENOTEMPTY' || err.code === 'EEXIST'))) throw err;
      if (!(await this.keepHidden(to, b.toBackend(to), `rename ${from} to ${to}`))) throw err;
      return this.inner.rename(a.toBackend(from), b.toBackend(to));
    }
  }

  symlink(target: string, path: string): Promise<void> {
    this.made(path);
    return this.inner.symlink(target, this.create(path, 'create symlink', false));
  }

  async mknod(path: string, mode: number, rdev: number): Promise<void> {
    const inner = this.inner;
    if (!inner.mknod) throw new VfsError('EPERM', `the ${inner.kind} backend cannot keep special files`);
    this.made(path);
    return inner.mknod(this.create(path, 'create', false), mode, rdev);
  }

  async link(existing: string, newPath: string): Promise<void> {
    const a = whereChange(this.policy, existing, 'link', false);
    if (a instanceof VfsError) throw a;
    const b = whereCreate(this.policy, newPath, `link ${existing} as`, false);
    if (b instanceof VfsError) throw b;
    const x = sameRoot('link', existing, a, newPath, b);
    if (x) throw x;
    this.made(newPath);
    return this.inner.link(a.toBackend(existing), b.toBackend(newPath));
  }

  async chmod(path: string, mode: number): Promise<Attr | void> {
    return this.changeAttrs(path, 'change mode of', (p) => this.inner.chmod(p, mode));
  }

  async chown(path: string, uid: number, gid: number): Promise<Attr | void> {
    return this.changeAttrs(path, 'change owner of', (p) => this.inner.chown(p, uid, gid));
  }

  async utimens(path: string, times: TimeSpec): Promise<Attr | void> {
    return this.changeAttrs(path, 'change times of', (p) => this.inner.utimens(p, times));
  }

  /** An attribute change, answered with the node's new attributes as stat shows them here when the store had them. */
  private async changeAttrs(path: string, verb: string, change: (backendPath: string) => Promise<Attr | void>): Promise<Attr | void> {
    const loc = this.changedRoot(path, verb, false);
    const attr = await change(loc.toBackend(path));
    return attr ? this.visibleLinks(loc, path, attr) : undefined;
  }

  truncate(path: string, size: number): Promise<void> {
    return this.inner.truncate(this.change(path, 'truncate', false), size);
  }

  // ---- xattrs: present when the inner backend stores them -----------------------------------

  private xattrInner() {
    const b = this.inner;
    if (!b.getxattr || !b.setxattr || !b.listxattr || !b.removexattr) {
      throw new VfsError('ENOTSUP', `the ${b.kind} backend does not store extended attributes`);
    }
    return b as Required<Pick<Backend, 'getxattr' | 'setxattr' | 'listxattr' | 'removexattr'>>;
  }

  private readTarget(path: string): string | null {
    const loc = this.policy.locate(path);
    if (loc === null || (loc.kind === 'root' && loc.isHidden(path))) throw new VfsError('ENOENT', `${path} does not exist in this view`);
    return loc.kind === 'root' ? loc.toBackend(path) : null;
  }

  async getxattr(path: string, name: string): Promise<Buffer> {
    const b = this.readTarget(path);
    if (b === null) throw new VfsError('ENODATA', `${path} has no attribute ${name}`);
    return this.xattrInner().getxattr(b, name);
  }

  async listxattr(path: string): Promise<string[]> {
    const b = this.readTarget(path);
    return b === null ? [] : this.xattrInner().listxattr(b);
  }

  setxattr(path: string, name: string, value: Buffer, flags: number): Promise<void> {
    return this.xattrInner().setxattr(this.change(path, 'set an attribute of', false), name, value, flags);
  }

  removexattr(path: string, name: string): Promise<void> {
    return this.xattrInner().removexattr(this.change(path, 'remove an attribute of', false), name);
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}

/**
 * Every Backend method, optional ones included, is translated by PolicyView or declared absent on
 * purpose: a method added to Backend fails to compile here until the view says what it means.
 * (A forwarding base would pass an unlisted method through with view paths and hidden names.)
 */
export type PolicyViewCoversBackend = Exclude<keyof Backend, keyof PolicyView> extends never ? true : never;
const covers: PolicyViewCoversBackend = true;
void covers;
