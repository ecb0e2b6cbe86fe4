import { DEFAULTS } from '../../config/index.js';
import { LRUCache } from 'lru-cache';
import { type Attr, type Backend, type BackendFile, type Clock, type DirEntry, type ErrnoCode, systemClock, isWithin, type NodeType, type OpenMode, parentOf, rebase, type TimeSpec, typeOfMode, VfsError } from '../../core/index.js';
import { ForwardingFile, ForwardingLayer } from './forward.js';

export interface MetadataCacheOptions {
  /** how long an answer from the store is trusted, ms (changes made by other clients show up after this) */
  ttlMs: number;
  /** entries kept at most (attributes and listings each) */
  maxEntries: number;
  maxListings: number;
  /** tree walks remembered at once */
  maxWalks?: number;
  /** what the TTL is measured with (tests move a FakeClock instead of sleeping) */
  clock?: Clock;
}

/** A writable handle open through the layer: its path follows renames; gone once unlinked. */
interface Writer {
  path: string;
  gone: boolean;
}

/** A walk of the tree below `root` a page of objects at a time (Backend.readdirTree). */
interface TreeWalk {
  root: string;
  /** the next page's token; undefined once the walk is complete (or failed) */
  next?: string | undefined;
  /** the path of the last object seen (directories sorting after it are not listed yet) */
  last?: string | undefined;
  pending?: Promise<void> | undefined;
}

/** What the cache knows about a path: its attributes, or that nothing is there. */
type Known = { attr: Attr; target?: string } | { missing: true };

/**
 * Stat/type and listing caches around a backend whose lookups are remote (GCS): attributes,
 * negative entries ("nothing at this path") and directory listings, each trusted for `ttlMs`.
 * A listing (with readdirPlus) fills the attributes of every entry, so `ls -l` of a directory is
 * one listing, not one lookup per entry; a cached listing also answers lookups of names it does
 * not contain (ENOENT) without asking the store.
 *
 * Every mutation through the layer updates or drops what it touches, and bumps an epoch so that
 * a lookup that was in flight while it ran does not store a stale answer afterwards. Files open
 * for writing are never answered from the cache (their size and mtime change with every write).
 * Changes made by other clients of the store are seen after at most `ttlMs`.
 */
export class MetadataCacheLayer extends ForwardingLayer {
  private readonly nodes: LRUCache<string, Known>;
  private readonly lists: LRUCache<string, Map<string, NodeType>>;
  /** writable handles open (or opening) through this layer; their paths follow renames */
  private readonly writers = new Set<Writer>();
  private epoch = 0;
  /** tree walks (readdirTree) by their root; kept while their listings would be */
  private readonly walks: LRUCache<string, TreeWalk>;
  /** lookups that missed per directory, within the TTL (relistAfterMisses) */
  private readonly missesIn: LRUCache<string, number>;
  /** entries of each directory's last listing, kept beyond the TTL (relistMaxEntries) */
  private readonly listedSize: LRUCache<string, number>;
  /** listings made for lookups, running: `touched` once a change in the directory may make them stale */
  private readonly relisting = new Map<string, { done: Promise<void>; touched: boolean }>();
  /** listings made instead of lookups (tests, the bench) */
  relists = 0;
  /** lookups answered by the store (for tests and the bench) */
  misses = 0;
  hits = 0;
  /** tree pages fetched (readdirTree) */
  treePages = 0;

  constructor(inner: Backend, opts: MetadataCacheOptions) {
    super(inner);
    const clock = opts.clock ?? systemClock;
    // an injected clock is read every time: lru-cache's 1 ms memo of now() would hide its moves
    const timing = { ttl: Math.max(1, opts.ttlMs), updateAgeOnGet: false, perf: clock, ...(clock === systemClock ? {} : { ttlResolution: 0 }) };
    this.nodes = new LRUCache({ max: opts.maxEntries, ...timing });
    this.lists = new LRUCache({ max: opts.maxListings, ...timing });
    this.walks = new LRUCache({ max: opts.maxWalks ?? DEFAULTS.gcsCache.metadataMaxWalks, ...timing });
    this.missesIn = new LRUCache({ max: opts.maxListings, ...timing });
    this.listedSize = new LRUCache({ max: opts.maxListings });
    if (opts.ttlMs <= 0) this.enabled = false;
    const { setxattr, removexattr } = inner;
    if (setxattr) this.setxattr = (p, n, v, f) => this.change([p], false, () => setxattr.call(inner, p, n, v, f));
    if (removexattr) this.removexattr = (p, n) => this.change([p], false, () => removexattr.call(inner, p, n));
  }

  private enabled = true;

  // ---- reads ---------------------------------------------------------------------------------

  /** The cached answer for `path`, or undefined when the store must be asked. */
  private known(path: string): Known | undefined {
    if (!this.enabled || this.isWriting(path)) return undefined;
    const k = this.nodes.get(path);
    if (k) return k;
    if (path === '/') return undefined;
    const list = this.lists.get(parentOf(path));
    if (list && !list.has(path.slice(path.lastIndexOf('/') + 1))) return { missing: true };
    return undefined;
  }

  private remember(path: string, k: Known, epoch: number): void {
    if (this.enabled && epoch === this.epoch && !this.isWriting(path)) this.nodes.set(path, k);
  }

  private isWriting(path: string): boolean {
    for (const w of this.writers) if (w.path === path) return true;
    return false;
  }

  override async stat(path: string): Promise<Attr> {
    const a = await this.tryStat(path);
    if (!a) throw new VfsError('ENOENT', `${path} does not exist`);
    return a;
  }

  override async tryStat(path: string): Promise<Attr | null> {
    const k = this.known(path);
    if (k) {
      this.hits++;
      return 'missing' in k ? null : { ...k.attr };
    }
    this.misses++;
    const listed = await this.relistFor(path);
    if (listed) {
      this.hits++;
      return 'missing' in listed ? null : { ...listed.attr };
    }
    const epoch = this.epoch;
    let attr: Attr | null;
    try {
      attr = this.inner.tryStat ? await this.inner.tryStat(path) : await this.inner.stat(path);
    } catch (err) {
      if (err instanceof VfsError && err.code === 'ENOENT') attr = null;
      else if (err instanceof VfsError && err.code === 'ENOTDIR') return null;
      else throw err;
    }
    this.remember(path, attr ? { attr } : { missing: true }, epoch);
    return attr ? { ...attr } : null;
  }

  override async readdir(path: string): Promise<DirEntry[]> {
    let cached = this.enabled ? this.lists.get(path) : undefined;
    if (!cached && this.enabled && this.inner.readdirTree) cached = await this.fromWalk(path);
    if (cached) {
      this.hits++;
      this.listedSize.set(path, cached.size);
      return [...cached].map(([name, type]) => ({ name, type }));
    }
    this.misses++;
    const epoch = this.epoch;
    let entries: DirEntry[];
    if (this.inner.readdirPlus) {
      const plus = await this.inner.readdirPlus(path);
      this.fill(path, plus, epoch);
      entries = plus.map(({ name, type }) => ({ name, type }));
    } else {
      entries = await this.inner.readdir(path);
      if (this.enabled && epoch === this.epoch) this.lists.set(path, new Map(entries.map((e) => [e.name, e.type])));
    }
    // a directory with subdirectories: the next lookups are likely below it (find, du, a tree
    // of stats); list them a page of objects at a time, in the background
    if (this.enabled && this.inner.readdirTree && entries.some((e) => e.type === 'dir')) this.walkPage({ root: path });
    return entries;
  }

  /**
   * A lookup missed: when lookups keep missing in the same directory (a program reading a tree
   * whose listing expired: git's lstat of every tracked file, a second `find`), list the
   * directory, a request per 1,000 entries, and answer from that. Only a directory listed
   * before with at most relistMaxEntries entries: a stat never pays for a large listing. A small
   * one is listed at the first miss (one request where the lookup makes two).
   */
  private async relistFor(path: string): Promise<Known | undefined> {
    if (!this.enabled || path === '/' || !this.inner.readdirPlus) return undefined;
    const dir = parentOf(path);
    // a listing of it is cached: the miss is a node it has no attributes for (a file just
    // written, or with local changes), which listing again would not give either
    if (this.lists.has(dir)) return undefined;
    const size = this.listedSize.get(dir);
    if (size === undefined || size > DEFAULTS.gcsCache.relistMaxEntries) return undefined;
    let run = this.relisting.get(dir);
    if (!run) {
      const n = (this.missesIn.get(dir) ?? 0) + 1;
      if (n < DEFAULTS.gcsCache.relistAfterMisses && size > DEFAULTS.gcsCache.relistFirstMissMaxEntries) {
        this.missesIn.set(dir, n);
        return undefined;
      }
      this.missesIn.delete(dir);
      this.relists++;
      const r = { done: Promise.resolve(), touched: false };
      r.done = (this.inner.readdirPlus as NonNullable<Backend['readdirPlus']>)
        .call(this.inner, dir)
        .then(
          (plus) => {
            // changes elsewhere (git writing its objects meanwhile) do not make it stale
            if (!r.touched) this.fill(dir, plus, this.epoch);
          },
          () => undefined, // only a shortcut: the lookup asks as usual
        )
        .finally(() => this.relisting.delete(dir));
      this.relisting.set(dir, (run = r));
    }
    await run.done;
    return this.known(path);
  }

  /** A listing and its entries' attributes, unless a mutation ran meanwhile (`epoch` moved). */
  private fill(path: string, plus: Array<DirEntry & { attr?: Attr }>, epoch: number): void {
    this.listedSize.set(path, plus.length);
    if (!this.enabled || epoch !== this.epoch) return;
    const dir = path === '/' ? '' : path;
    for (const e of plus) if (e.attr) this.remember(`${dir}/${e.name}`, { attr: e.attr }, epoch);
    this.lists.set(path, new Map(plus.map((e) => [e.name, e.type])));
  }

  /**
   * The listing of `path` from a tree walk above it: the page on its way, or the walk's next
   * page when `path` sorts after what the walk has seen (a tree read in order).
   */
  private async fromWalk(path: string): Promise<Map<string, NodeType> | undefined> {
    let walk: TreeWalk | undefined;
    for (const w of this.walks.values()) if (isWithin(path, w.root) && (!walk || w.root.length > walk.root.length)) walk = w;
    if (!walk) return undefined;
    if (!walk.pending && walk.next && walk.last && Buffer.compare(Buffer.from(`${path}/`), Buffer.from(walk.last)) > 0) this.walkPage(walk);
    if (walk.pending) await walk.pending;
    return this.lists.get(path);
  }

  /** Fetch the walk's next page (its first, for a new walk) and fill the listings it holds. */
  private walkPage(walk: TreeWalk): void {
    const readdirTree = this.inner.readdirTree as NonNullable<Backend['readdirTree']>;
    const epoch = this.epoch;
    this.walks.set(walk.root, walk);
    walk.pending = readdirTree
      .call(this.inner, walk.root, walk.next)
      .then(
        (page) => {
          walk.next = page.nextPageToken;
          walk.last = page.last;
          this.treePages++;
          for (const [dir, plus] of page.dirs) this.fill(dir, plus, epoch);
        },
        () => {
          walk.next = undefined; // a walk is only a shortcut: lookups list as usual
        },
      )
      .finally(() => (walk.pending = undefined));
  }

  override async readdirPlus(path: string): Promise<Array<DirEntry & { attr?: Attr }>> {
    const dir = path === '/' ? '' : path;
    const entries = await this.readdir(path);
    return entries.map((e) => {
      const k = this.known(`${dir}/${e.name}`);
      return k && 'attr' in k ? { ...e, attr: { ...k.attr } } : e;
    });
  }

  override async readlink(path: string): Promise<string> {
    const k = this.known(path);
    if (k && 'attr' in k && k.target !== undefined) return k.target;
    const epoch = this.epoch;
    const target = await this.inner.readlink(path);
    if (k && 'attr' in k) this.remember(path, { attr: k.attr, target }, epoch);
    return target;
  }

  /**
   * A read-only open asks the store for the object's current version (close-to-open): when that
   * differs from the attributes cached for the path (another host rewrote it), the cached ones
   * are forgotten, so a stat after the open (the kernel's, whose size cuts reads) sees the new size.
   */
  private async openToRead(path: string, mode: OpenMode, createMode?: number): Promise<BackendFile> {
    const k0 = mode.create ? undefined : this.known(path);
    const hint = k0 && 'attr' in k0 && k0.attr.type === 'file' ? { ...mode, knownFile: true } : mode;
    let file: BackendFile;
    try {
      file = await this.inner.open(path, hint, createMode);
    } catch (err) {
      // removed by another host: the kernel looks the name up again (ESTALE) and must not be
      // told the file is still there
      if (err instanceof VfsError && err.code === 'ENOENT') this.forget(path);
      throw err;
    }
    const k = this.nodes.peek(path);
    if (k) {
      const now = await file.stat().catch(() => null);
      if (!now || 'missing' in k || now.size !== k.attr.size || now.mtimeNs !== k.attr.mtimeNs) this.forget(path);
    }
    return file;
  }

  // ---- invalidation --------------------------------------------------------------------------

  /** Forget `path` (and with `below`, everything under it); in-flight lookups will not store. */
  private forget(path: string, below = false): void {
    this.epoch++;
    for (const [dir, r] of this.relisting) if (parentOf(path) === dir || isWithin(dir, path)) r.touched = true;
    this.nodes.delete(path);
    if (below) {
      for (const k of [...this.nodes.keys()]) if (isWithin(k, path)) this.nodes.delete(k);
      for (const k of [...this.lists.keys()]) if (isWithin(k, path)) this.lists.delete(k);
    }
  }

  /**
   * Keep a cached listing of the parent exact: the mutation's outcome is known. The parent's
   * mtime, ctime and link count moved with its entries: its cached attributes take the store's new ones
   * (no request: a create in a directory stays one request), or are forgotten.
   */
  private entry(path: string, type: NodeType | null): void {
    if (path === '/') return;
    this.parentChanged(parentOf(path));
    const dir = parentOf(path);
    const size = this.listedSize.get(dir);
    const list = this.lists.get(dir);
    if (!list) {
      if (size !== undefined) this.listedSize.set(dir, Math.max(0, size + (type ? 1 : -1)));
      return;
    }
    const name = path.slice(path.lastIndexOf('/') + 1);
    if (type) list.set(name, type);
    else list.delete(name);
    this.listedSize.set(dir, list.size);
  }

  private parentChanged(dir: string): void {
    const known = this.nodes.get(dir);
    const c = this.inner.dirChange?.(dir);
    if (known && 'attr' in known && c !== undefined) {
      const t = c.mtimeNs;
      known.attr = { ...known.attr, mtimeNs: t, ctimeNs: known.attr.ctimeNs > t ? known.attr.ctimeNs : t, nlink: c.nlink };
    } else {
      this.forget(dir);
    }
  }

  /** Run a mutation: forget before (so no reader trusts the old answer while it runs) and after. */
  private async change<T>(paths: string[], below: boolean, fn: () => Promise<T>): Promise<T> {
    for (const p of paths) this.forget(p, below);
    try {
      return await fn();
    } catch (err) {
      // the outcome is unknown (a failure may come after the change): forget the parents'
      // listings too (the paths themselves are forgotten below, as after a success); unless the
      // store refused it before changing anything (git tries link() before rename() for every
      // object: a listing dropped each time is a lookup per file in its directory after)
      if (!refusedUnchanged(err)) for (const p of paths) if (p !== '/') this.lists.delete(parentOf(p));
      throw err;
    } finally {
      for (const p of paths) this.forget(p, below);
    }
  }

  // ---- mutations -----------------------------------------------------------------------------

  override async open(path: string, mode: OpenMode, createMode?: number): Promise<BackendFile> {
    if (!mode.write) return this.openToRead(path, mode, createMode);
    const hint = mode.create && this.knownAbsent(path) ? { ...mode, knownAbsent: true } : mode;
    const token: Writer = { path, gone: false };
    this.writers.add(token);
    let file: BackendFile;
    try {
      file = await this.change([path], false, () => this.inner.open(path, hint, createMode));
    } catch (err) {
      this.doneWriting(token);
      throw err;
    }
    if (mode.create) this.entry(path, 'file');
    return new WritingFile(file, token, this);
  }

  /** Known (within the TTL) that nothing is at `path` and its parent is a directory. */
  private knownAbsent(path: string): boolean {
    const k = this.known(path);
    if (!k || !('missing' in k) || path === '/') return false;
    const parent = parentOf(path);
    if (parent === '/' || this.lists.has(parent)) return true; // a listing exists only for a directory
    const p = this.known(parent);
    return p !== undefined && 'attr' in p && p.attr.type === 'dir';
  }

  /**
   * A writable handle closed: its path may be cached again, with `attr` (what the file is now,
   * when the closed handle could still say it without asking the store).
   */
  doneWriting(token: Writer, attr?: Attr): void {
    this.writers.delete(token);
    this.forget(token.path);
    if (attr && !token.gone && this.enabled && !this.isWriting(token.path)) this.nodes.set(token.path, { attr });
  }

  override async mkdir(path: string, mode: number): Promise<Attr | void> {
    const hint = this.knownAbsent(path) ? { knownAbsent: true } : undefined;
    const attr = await this.change([path], false, () => this.inner.mkdir(path, mode, hint));
    this.entry(path, 'dir');
    if (attr) this.remember(path, { attr }, this.epoch);
    // A new directory is empty: lookups in it (tar, cp -r create right after) need not ask.
    if (this.enabled) this.lists.set(path, new Map());
    // and small: once that expires, lookups that keep missing in it list it again (git's
    // objects/xx, written to for the whole of a long `git add`)
    this.listedSize.set(path, 0);
  }

  override async rmdir(path: string): Promise<void> {
    await this.change([path], true, () => this.inner.rmdir(path));
    this.entry(path, null);
    this.lists.delete(path);
  }

  override async unlink(path: string): Promise<void> {
    await this.change([path], false, () => this.inner.unlink(path));
    this.entry(path, null);
    this.gone(path);
  }

  /** Files open at `path` no longer have a name: their close must not cache one. */
  private gone(path: string): void {
    for (const w of this.writers) if (w.path === path) w.gone = true;
  }

  override async rename(from: string, to: string): Promise<void> {
    const type = (this.nodes.get(from) as { attr?: Attr } | undefined)?.attr?.type;
    // only a directory has a subtree to forget: a file's rename (git, editors' save) must not
    // walk the whole cache; an unknown type counts as a directory
    // (git renames each new object's temp file to a name it just found absent: the store need not look)
    const hint = type === 'file' && this.knownAbsent(to) ? { toKnownAbsent: true } : undefined;
    await this.change([from, to], type !== 'file' && type !== 'symlink', () => this.inner.rename(from, to, hint));
    if (from !== to) this.gone(to); // renamed over
    // writable handles follow the file (the backend retargets them)
    for (const w of this.writers) if (isWithin(w.path, from)) w.path = rebase(w.path, from, to);
    this.entry(from, null);
    if (type) this.entry(to, type);
    else if (to !== '/') {
      this.lists.delete(parentOf(to));
      this.parentChanged(parentOf(to));
    }
  }

  override async symlink(target: string, path: string): Promise<void> {
    await this.change([path], false, () => this.inner.symlink(target, path));
    this.entry(path, 'symlink');
  }

  override async mknod(path: string, mode: number, rdev: number): Promise<void> {
    if (!this.inner.mknod) throw new VfsError('EPERM', `the ${this.kind} backend cannot keep special files`);
    await this.change([path], false, () => (this.inner.mknod as NonNullable<Backend['mknod']>).call(this.inner, path, mode, rdev));
    this.entry(path, typeOfMode(mode));
  }

  override async link(existing: string, newPath: string): Promise<void> {
    await this.change([existing, newPath], false, () => this.inner.link(existing, newPath));
    this.entry(newPath, 'file');
  }

  override chmod(path: string, mode: number): Promise<Attr | void> {
    return this.changeAttrs(path, () => this.inner.chmod(path, mode));
  }

  override chown(path: string, uid: number, gid: number): Promise<Attr | void> {
    return this.changeAttrs(path, () => this.inner.chown(path, uid, gid));
  }

  override utimens(path: string, times: TimeSpec): Promise<Attr | void> {
    return this.changeAttrs(path, () => this.inner.utimens(path, times));
  }

  /** An attribute change; the attributes the store answered it with are kept (tar's directory fix-ups: no lookup after). */
  private async changeAttrs(path: string, fn: () => Promise<Attr | void>): Promise<Attr | void> {
    const attr = await this.change([path], false, fn);
    if (attr) this.remember(path, { attr }, this.epoch);
    return attr;
  }

  override truncate(path: string, size: number): Promise<void> {
    return this.change([path], false, () => this.inner.truncate(path, size));
  }
}

/**
 * Errors a store gives only for a request it refuses whole, before it changes anything, and that
 * say nothing about the names involved. Not EEXIST or ENOENT (the listing that let it be tried is
 * wrong), nor EACCES or EINVAL (GCS answers them too, and may halfway through a directory's rename).
 */
const UNCHANGED_REFUSALS = new Set<ErrnoCode>(['EPERM', 'EROFS', 'EXDEV', 'ENAMETOOLONG', 'ENOTSUP', 'EOPNOTSUPP', 'ENOSYS']);
const refusedUnchanged = (err: unknown): boolean => err instanceof VfsError && UNCHANGED_REFUSALS.has(err.code);

/**
 * A writable file opened through the cache layer: its path is not answered from the cache while
 * it is open, and is forgotten again at close (the upload made a new generation).
 */
class WritingFile extends ForwardingFile {
  private closed = false;

  constructor(
    f: BackendFile,
    private readonly token: Writer,
    private readonly layer: MetadataCacheLayer,
  ) {
    super(f);
  }

  override async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    let attr: Attr | undefined;
    try {
      await this.f.close();
      // After a successful close the GCS file knows the generation it uploaded: its stat is
      // local. (A local backend's closed file cannot answer: nothing is primed then.)
      attr = await this.f.stat().catch(() => undefined);
    } finally {
      this.layer.doneWriting(this.token, attr);
    }
  }
}
