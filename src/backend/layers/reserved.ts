import { type Attr, type Backend, type BackendFile, type DirEntry, isWithin, type MkdirHint, type OpenMode, type RenameHint, type TimeSpec, type TreePage, VfsError } from '../../core/index.js';
import { ForwardingLayer } from './forward.js';

/**
 * Keeps one top-level name of a backend out of the view: the GCS workspace's reserved area
 * (`<prefix>/.ledgerfs/`, the journal's mirror in the bucket). It is never listed; reading,
 * changing or removing anything in it is ENOENT (it does not exist in the view); making a name
 * there (create, mkdir, symlink, link, rename onto it) is EACCES, as the policy refuses names
 * it hides, because "does not exist" would invite the caller to retry the create.
 */
export class ReservedNameLayer extends ForwardingLayer {
  private readonly top: string;

  constructor(inner: Backend, name: string) {
    super(inner);
    this.top = '/' + name;
    // as in ForwardingLayer: an optional method exists here exactly when the inner one does
    const self = this as unknown as Record<string, unknown>;
    for (const m of ['tryStat', 'readdirPlus', 'readdirTree', 'copyOut', 'keepCopy'] as const) if (!inner[m]) self[m] = undefined;
  }

  private reserved(path: string): boolean {
    return isWithin(path, this.top);
  }

  private absent(path: string): void {
    if (this.reserved(path)) throw new VfsError('ENOENT', `${path} does not exist in this view`);
  }

  private refuseNew(path: string, verb: string): void {
    if (this.reserved(path)) throw new VfsError('EACCES', `${verb} ${path} refused: ${this.top} is reserved for the journal in the bucket`);
  }

  private visible<T extends DirEntry>(path: string, ents: T[]): T[] {
    return path === '/' ? ents.filter((e) => '/' + e.name !== this.top) : ents;
  }

  override async stat(path: string): Promise<Attr> {
    this.absent(path);
    return super.stat(path);
  }
  override async tryStat(path: string): Promise<Attr | null> {
    if (this.reserved(path)) return null;
    return (this.inner.tryStat as (p: string) => Promise<Attr | null>).call(this.inner, path);
  }
  override async readdir(path: string): Promise<DirEntry[]> {
    this.absent(path);
    return this.visible(path, await super.readdir(path));
  }
  override async readdirPlus(path: string): Promise<Array<DirEntry & { attr?: Attr }>> {
    this.absent(path);
    const inner = this.inner.readdirPlus as (p: string) => Promise<Array<DirEntry & { attr?: Attr }>>;
    return this.visible(path, await inner.call(this.inner, path));
  }
  override async readdirTree(path: string, pageToken?: string): Promise<TreePage> {
    this.absent(path);
    const page = await (this.inner.readdirTree as NonNullable<Backend['readdirTree']>).call(this.inner, path, pageToken);
    const dirs = new Map<string, Array<DirEntry & { attr?: Attr }>>();
    for (const [dir, ents] of page.dirs) if (!this.reserved(dir)) dirs.set(dir, this.visible(dir, ents));
    return { ...page, dirs };
  }
  override async readlink(path: string): Promise<string> {
    this.absent(path);
    return super.readlink(path);
  }
  override async copyOut(path: string, hostFile: string): Promise<void> {
    this.absent(path);
    return (this.inner.copyOut as (p: string, h: string) => Promise<void>).call(this.inner, path, hostFile);
  }
  override async keepCopy(path: string, size: number): Promise<string | null> {
    this.absent(path);
    return (this.inner.keepCopy as (p: string, s: number) => Promise<string | null>).call(this.inner, path, size);
  }
  override async open(path: string, mode: OpenMode, createMode?: number): Promise<BackendFile> {
    if (mode.create) this.refuseNew(path, 'create');
    this.absent(path);
    return super.open(path, mode, createMode);
  }
  override async mkdir(path: string, mode: number, hint?: MkdirHint): Promise<Attr | void> {
    this.refuseNew(path, 'mkdir');
    return super.mkdir(path, mode, hint);
  }
  override async rmdir(path: string): Promise<void> {
    this.absent(path);
    return super.rmdir(path);
  }
  override async unlink(path: string): Promise<void> {
    this.absent(path);
    return super.unlink(path);
  }
  override async rename(from: string, to: string, hint?: RenameHint): Promise<void> {
    this.absent(from);
    this.refuseNew(to, 'rename to');
    return super.rename(from, to, hint);
  }
  override async symlink(target: string, path: string): Promise<void> {
    this.refuseNew(path, 'symlink');
    return super.symlink(target, path);
  }
  override async mknod(path: string, mode: number, rdev: number): Promise<void> {
    this.refuseNew(path, 'mknod');
    if (!this.inner.mknod) throw new VfsError('EPERM', `the ${this.kind} backend cannot keep special files`);
    return (this.inner.mknod as NonNullable<Backend['mknod']>).call(this.inner, path, mode, rdev);
  }
  override async link(existing: string, newPath: string): Promise<void> {
    this.absent(existing);
    this.refuseNew(newPath, 'link');
    return super.link(existing, newPath);
  }
  override async chmod(path: string, mode: number): Promise<Attr | void> {
    this.absent(path);
    return super.chmod(path, mode);
  }
  override async chown(path: string, uid: number, gid: number): Promise<Attr | void> {
    this.absent(path);
    return super.chown(path, uid, gid);
  }
  override async utimens(path: string, times: TimeSpec): Promise<Attr | void> {
    this.absent(path);
    return super.utimens(path, times);
  }
  override async truncate(path: string, size: number): Promise<void> {
    this.absent(path);
    return super.truncate(path, size);
  }
}
