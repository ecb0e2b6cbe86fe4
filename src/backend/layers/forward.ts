import type { Attr, Backend, BackendCapabilities, BackendFile, DirEntry, FsStats, MkdirHint, OpenMode, RenameHint, TimeSpec, TreePage } from '../../core/index.js';

/**
 * A layer that passes every call to the backend it wraps (OpenDAL's layer model): concrete
 * layers extend it and override only what they change, so a method added to Backend cannot be
 * silently dropped by a layer.
 */
export class ForwardingLayer implements Backend {
  readonly kind: string;
  readonly location: string;
  readonly capabilities: BackendCapabilities;

  constructor(readonly inner: Backend) {
    this.kind = inner.kind;
    this.location = inner.location;
    this.capabilities = inner.capabilities;
    // Optional methods exist on the layer exactly when the inner backend has them, unless a
    // concrete layer implements one itself.
    const base = ForwardingLayer.prototype as unknown as Record<string, unknown>;
    const self = this as unknown as Record<string, unknown>;
    for (const m of ['tryStat', 'readdirPlus', 'readdirTree', 'mknod', 'dirChange', 'copyOut', 'keepCopy', 'expectVersions', 'getxattr', 'setxattr', 'listxattr', 'removexattr'] as const) {
      if (!inner[m] && self[m] === base[m]) self[m] = undefined;
    }
  }

  stat(path: string): Promise<Attr> {
    return this.inner.stat(path);
  }
  tryStat?(path: string): Promise<Attr | null> {
    return (this.inner.tryStat as (p: string) => Promise<Attr | null>).call(this.inner, path);
  }
  readdir(path: string): Promise<DirEntry[]> {
    return this.inner.readdir(path);
  }
  readdirPlus?(path: string): Promise<Array<DirEntry & { attr?: Attr }>> {
    return (this.inner.readdirPlus as (p: string) => Promise<Array<DirEntry & { attr?: Attr }>>).call(this.inner, path);
  }
  readdirTree?(path: string, pageToken?: string): Promise<TreePage> {
    return (this.inner.readdirTree as NonNullable<Backend['readdirTree']>).call(this.inner, path, pageToken);
  }
  readlink(path: string): Promise<string> {
    return this.inner.readlink(path);
  }
  open(path: string, mode: OpenMode, createMode?: number): Promise<BackendFile> {
    return this.inner.open(path, mode, createMode);
  }
  mkdir(path: string, mode: number, hint?: MkdirHint): Promise<Attr | void> {
    return this.inner.mkdir(path, mode, hint);
  }
  rmdir(path: string): Promise<void> {
    return this.inner.rmdir(path);
  }
  unlink(path: string): Promise<void> {
    return this.inner.unlink(path);
  }
  rename(from: string, to: string, hint?: RenameHint): Promise<void> {
    return this.inner.rename(from, to, hint);
  }
  symlink(target: string, path: string): Promise<void> {
    return this.inner.symlink(target, path);
  }
  mknod?(path: string, mode: number, rdev: number): Promise<void> {
    return (this.inner.mknod as NonNullable<Backend['mknod']>).call(this.inner, path, mode, rdev);
  }
  link(existing: string, newPath: string): Promise<void> {
    return this.inner.link(existing, newPath);
  }
  dirChange?(path: string): { mtimeNs: bigint; nlink: number } | undefined {
    return (this.inner.dirChange as NonNullable<Backend['dirChange']>).call(this.inner, path);
  }
  chmod(path: string, mode: number): Promise<Attr | void> {
    return this.inner.chmod(path, mode);
  }
  chown(path: string, uid: number, gid: number): Promise<Attr | void> {
    return this.inner.chown(path, uid, gid);
  }
  utimens(path: string, times: TimeSpec): Promise<Attr | void> {
    return this.inner.utimens(path, times);
  }
  truncate(path: string, size: number): Promise<void> {
    return this.inner.truncate(path, size);
  }
  statfs(path: string): Promise<FsStats> {
    return this.inner.statfs(path);
  }
  getxattr?(path: string, name: string): Promise<Buffer> {
    return (this.inner.getxattr as NonNullable<Backend['getxattr']>).call(this.inner, path, name);
  }
  setxattr?(path: string, name: string, value: Buffer, flags: number): Promise<void> {
    return (this.inner.setxattr as NonNullable<Backend['setxattr']>).call(this.inner, path, name, value, flags);
  }
  listxattr?(path: string): Promise<string[]> {
    return (this.inner.listxattr as NonNullable<Backend['listxattr']>).call(this.inner, path);
  }
  removexattr?(path: string, name: string): Promise<void> {
    return (this.inner.removexattr as NonNullable<Backend['removexattr']>).call(this.inner, path, name);
  }
  copyOut?(path: string, hostFile: string): Promise<void> {
    return (this.inner.copyOut as NonNullable<Backend['copyOut']>).call(this.inner, path, hostFile);
  }
  keepCopy?(path: string, size: number): Promise<string | null> {
    return (this.inner.keepCopy as NonNullable<Backend['keepCopy']>).call(this.inner, path, size);
  }
  expectVersions?(pins: ReadonlyMap<string, string | null>): () => void {
    return (this.inner.expectVersions as NonNullable<Backend['expectVersions']>).call(this.inner, pins);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

/** A file handle that passes every call to the one it wraps; layers' handles extend it. */
export class ForwardingFile implements BackendFile {
  readonly flush?: () => Promise<void>;

  constructor(protected readonly f: BackendFile) {
    if (f.flush) this.flush = () => (f.flush as () => Promise<void>).call(f);
  }

  get writable(): boolean {
    return this.f.writable;
  }
  get version(): string | undefined {
    return this.f.version;
  }
  read(buf: Buffer, length: number, position: number): Promise<number> {
    return this.f.read(buf, length, position);
  }
  write(buf: Buffer, length: number, position: number): Promise<number> {
    return this.f.write(buf, length, position);
  }
  truncate(size: number): Promise<void> {
    return this.f.truncate(size);
  }
  stat(): Promise<Attr> {
    return this.f.stat();
  }
  sync(dataOnly: boolean): Promise<void> {
    return this.f.sync(dataOnly);
  }
  close(): Promise<void> {
    return this.f.close();
  }
}
