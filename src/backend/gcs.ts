import fs from 'node:fs';
import { LRUCache } from 'lru-cache';
import { type Attr, type Backend, type BackendCapabilities, type BackendFile, checkPath, type DirEntry, type FsStats, isWithin, type MkdirHint, type NodeType, type OpenMode, parentOf, rebase, type RenameHint, type TimeSpec, type TreePage, typeOfMode, VfsError } from '../core/index.js';
import { DEFAULTS } from '../config/index.js';
import { GcsRequests, makeStorage, type ListPage } from './gcs/client.js';
import { isNotFound, isPreconditionFailed, setupErrorMessage, toVfsError } from './gcs/errors.js';
import { GcsFile, type GcsFileHost } from './gcs/file.js';
import { GcsJournalRemote } from './gcs/journal-remote.js';
import { DirLinks } from './gcs/dir-links.js';
import { DirTimes } from './gcs/dir-times.js';
import { InodeNumbers } from './gcs/inodes.js';
import { attrOf, nodeMetaEntries, typeOfObject, readNodeMeta, type AttrDefaults, type NodeMeta, type ObjectInfo, type ObjectType } from './gcs/metadata.js';
import { ObjectNames, isPosixName } from './gcs/names.js';
import { resolveGcsOptions, type GcsBackendOptions, type GcsConflict, type ResolvedGcsOptions } from './gcs/options.js';
import { RenameIntents, inBatches, registerInstance, sameMetadata, unregisterInstance, type RenameIntent, type RenameRecovery } from './gcs/rename-intent.js';
import { readRange } from './gcs/read-range.js';
import { withRetries } from './gcs/retry.js';
import { keepsPlaceholders as probePlaceholders } from './gcs/server-checks.js';
import { StagingFiles } from './gcs/staging-files.js';
import { UploadQueue, type PendingVersion, type UploadQueueHost } from './gcs/upload-queue.js';

export type { GcsBackendOptions, GcsConflict } from './gcs/options.js';
export type { RenameRecovery } from './gcs/rename-intent.js';
export type { UploadQueueStats } from './gcs/upload-queue.js';

/** Thrown by createGcsBackend when the bucket cannot be used; the message says why and what to do. */
export class GcsSetupError extends Error {}

/**
 * Open a GCS workspace: build the client, check that the bucket answers (a missing bucket or
 * missing credentials fail here with a sentence that says what to do), prepare the staging dir.
 */
export async function createGcsBackend(options: GcsBackendOptions): Promise<GcsBackend> {
  const o = resolveGcsOptions(options);
  const req = new GcsRequests(makeStorage(o), o.bucket, retryPolicy(o), o);
  let timer: NodeJS.Timeout | undefined;
  try {
    // A short probe: a bucket that is not there should not take the full retry budget to say so,
    // nor an endpoint that never answers the request timeout and its retries.
    const noAnswer = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new GcsSetupError(`GCS bucket "${o.bucket}" could not be reached: no answer from ${o.apiEndpoint ?? 'storage.googleapis.com'} within ${o.setupTimeoutMs / 1000} s`)), o.setupTimeoutMs);
    });
    await Promise.race([withRetries({ ...retryPolicy(o), attempts: Math.min(3, o.retryAttempts) }, req.counters, () => req.probe(o.prefix)), noAnswer]);
  } catch (err) {
    if (err instanceof GcsSetupError) throw err;
    throw new GcsSetupError(setupErrorMessage(err, o.bucket, o.keyFile));
  } finally {
    clearTimeout(timer);
  }
  try {
    fs.mkdirSync(o.stagingDir, { recursive: true, mode: 0o700 });
  } catch (err) {
    throw new GcsSetupError(`staging directory ${o.stagingDir} cannot be created: ${(err as Error).message}`);
  }
  const backend = new GcsBackend(req, o);
  if (o.spoolDir !== undefined) {
    try {
      // Versions a crash (or an unmount that did not wait) left: uploaded again, in order,
      // whatever this mount's durability (a mount in bucket mode must not lose them either).
      const queue = new UploadQueue(backend, o.spoolDir, o.uploadConcurrency, { initial: DEFAULTS.gcs.uploadRetryMs, max: DEFAULTS.gcs.uploadRetryMaxMs });
      backend.uploads = queue;
      backend.resumedUploads = queue.resume();
    } catch (err) {
      throw new GcsSetupError(`the upload spool ${o.spoolDir} cannot be used: ${(err as Error).message}`);
    }
  }
  try {
    // Directory renames a crash cut short are finished (or undone) before anything looks at the tree.
    backend.recoveredRenames = await backend.intents.recoverAbandoned();
  } catch (err) {
    await backend.close();
    throw new GcsSetupError(`an interrupted directory rename could not be finished: ${(err as Error).message}`);
  }
  return backend;
}

function retryPolicy(o: ResolvedGcsOptions) {
  return { attempts: o.retryAttempts, initialDelayMs: o.retryInitialDelayMs, maxDelayMs: o.retryMaxDelayMs, totalTimeoutMs: o.retryTotalTimeoutMs, rateLimitDelayMs: o.rateLimitRetryDelayMs };
}

/** What a path is in the bucket (see "Namespace" in src/backend/gcs/README.md). */
type Found =
  | { type: 'none' }
  | { type: 'dir'; placeholder?: ObjectInfo }
  | { type: ObjectType; object: ObjectInfo };

const nowNs = () => BigInt(Date.now()) * 1_000_000n;
/** Attempts for read-modify-write sequences that lose a race (412) before giving up with ESTALE. */
const RACE_ATTEMPTS = 4;

/**
 * The GCS backend: a bucket (under an optional prefix) as files, directories and symlinks.
 * Objects are files; a `dir/` placeholder or a common prefix is a directory; POSIX attributes
 * live in custom metadata under gcsfuse's and gsutil's keys (gcs/metadata.ts). Every change is
 * made with generation preconditions, so a concurrent writer elsewhere makes it fail (or
 * retry), never silently overwrites. Nothing is cached here: caches are layers around backends.
 */
export class GcsBackend implements Backend, GcsFileHost, UploadQueueHost {
  readonly kind = 'gcs';
  readonly location: string;
  readonly capabilities: BackendCapabilities;
  /** local versions set aside because their upload was refused or failed (newest last) */
  readonly conflicts: GcsConflict[] = [];
  readonly names: ObjectNames;
  readonly attrDefaults: AttrDefaults;
  readonly stagingDir: string;
  readonly stagingFiles: StagingFiles;
  readonly conflictsDir: string;
  /** directory renames a crash had cut short, finished or undone when this backend opened */
  recoveredRenames: RenameRecovery[] = [];
  readonly intents: RenameIntents;
  private readonly instance = registerInstance();
  /**
   * Placeholders by directory path, as our own mkdir and patch answers gave them: the
   * generation a patch's preconditions need without a lookup. Only ever a first guess: a 404 or
   * 412 drops it and the patch looks the directory up as before.
   */
  private readonly placeholders = new LRUCache<string, ObjectInfo>({ max: DEFAULTS.gcs.placeholderHints });
  /**
   * The same first guess for files and other objects, from our own patch answers: git
   * freshens an object it already has with utime() each time a file with the same content is
   * added (one patch per file, on a handful of objects), and a lookup before each doubled it.
   * Dropped by whatever makes a new generation or moves the name (open for writing, an upload
   * landing, unlink, rename).
   */
  private readonly objectHints = new LRUCache<string, ObjectInfo>({ max: DEFAULTS.gcs.placeholderHints });
  /** the reserved area below the prefix (hidden from the view by layers/reserved.ts) */
  readonly journalArea: GcsJournalRemote;
  private readonly openFiles = new Map<string, Set<GcsFile>>();
  /** object name -> the generation this mount last unlinked there (see deletedHere) */
  private readonly deleted = new Map<string, bigint>();
  /** the upload queue (spool) when the backend has one; its versions are what stat/read show until they land */
  uploads: UploadQueue | undefined;
  /** versions found in the spool at open and queued again */
  resumedUploads = 0;
  /** inode numbers that follow renames for the life of this backend (gcs/inodes.ts) */
  readonly inodes = new InodeNumbers();
  /** directories' mtime/ctime as their entries changed through this backend (gcs/dir-times.ts) */
  private readonly dirTimes = new DirTimes();
  /** directories' link counts as far as listings and changes through this backend tell (gcs/dir-links.ts) */
  private readonly dirLinks = new DirLinks();

  constructor(
    readonly req: GcsRequests,
    private readonly opts: ResolvedGcsOptions,
  ) {
    this.names = new ObjectNames(opts.prefix);
    this.location = `gs://${opts.bucket}/${opts.prefix}`;
    // new nodes carry opts.uid/gid in their metadata (newNodeMeta)
    this.capabilities = { xattrs: false, hardLinks: false, symlinks: true, owners: true, posixNewNodes: false, newNodeOwner: { uid: opts.uid, gid: opts.gid } };
    this.stagingDir = opts.stagingDir;
    this.stagingFiles = new StagingFiles(opts.stagingDir, DEFAULTS.gcs.stagingFilesKept, DEFAULTS.gcs.stagingReuseMaxBytes);
    this.conflictsDir = opts.conflictsDir;
    this.journalArea = new GcsJournalRemote(req, this.names.prefix + DEFAULTS.gcs.reservedName + '/');
    this.attrDefaults = { fileMode: opts.fileMode, dirMode: opts.dirMode, uid: opts.uid, gid: opts.gid, implicitTimeNs: nowNs() };
    this.intents = new RenameIntents({
      req, prefix: opts.prefix, instance: this.instance, concurrency: opts.renameConcurrency,
      keepDirOf: (key) => this.keepDir(parentOf(this.names.pathOf(key))),
    });
  }

  /** Requests retried so far (for tests and metrics). */
  get retries(): number {
    return this.req.counters.retries;
  }

  // ---- GcsFileHost ---------------------------------------------------------------------------

  /** durability journal: where close(2) puts versions (undefined: close uploads) */
  get writeBack(): UploadQueue | undefined {
    return this.opts.durability === 'journal' ? this.uploads : undefined;
  }

  get durability(): 'bucket' | 'journal' {
    return this.opts.durability;
  }

  /**
   * A queued version landed with its bytes still in memory (a small file's): a content cache
   * in front keeps them under the new generation, so a read soon after (git add hashing the
   * files tar just wrote, a build reading its sources) does not download what was just uploaded.
   */
  onUploadedBytes: ((version: string, bytes: Buffer) => void) | undefined;

  uploaded(path: string, replaced: bigint, info: ObjectInfo, bytes?: Buffer): void {
    this.objectHints.delete(path);
    if (bytes && bytes.length === info.size) this.onUploadedBytes?.(`${info.name}#${info.generation}`, bytes);
    for (const f of this.filesAt(path)) f.noteUploaded(replaced, info);
  }

  /** The newest queued version at `path` (read-your-writes while it waits for its upload). */
  private pendingAt(path: string): PendingVersion | undefined {
    if (!this.uploads || this.uploads.isEmpty || path === '/') return undefined;
    return this.uploads.pendingKey(this.names.key(path));
  }

  /** A namespace change at `path` must not overtake uploads it depends on: wait for those at or under it. */
  private async settle(...paths: string[]): Promise<void> {
    // A handle's version may be on its way into the queue (or up, in bucket mode) and not
    // queued yet: the release a close(2) sends after returning, carrying a chmod or utime
    // another process made after the flush. The program's next request (its unlink) must not
    // overtake it: it deleted the object, then the version went up on the deleted generation,
    // a conflict with nobody.
    if (this.openFiles.size) for (const p of paths) for (const f of this.filesUnder(p)) await f.idle();
    if (!this.uploads || this.uploads.isEmpty) return;
    for (const p of paths) await this.uploads.settleUnder(p);
  }

  /** A node's attributes: what its object records, numbered by `inodes`. */
  attrOf(type: NodeType, path: string, info: ObjectInfo | undefined): Attr {
    const a = attrOf(type, path, info, this.attrDefaults, this.inodes.of(path));
    if (type !== 'dir') return a;
    a.nlink = this.dirLinks.nlink(path);
    return this.dirTimes.apply(path, a);
  }

  dirChange(path: string): { mtimeNs: bigint; nlink: number } | undefined {
    const t = this.dirTimes.changedAt(path);
    return t === undefined ? undefined : { mtimeNs: t, nlink: this.dirLinks.nlink(path) };
  }

  /** The entries of the directory holding `path` changed (a node was made, removed or renamed there). */
  private entriesChanged(path: string): void {
    this.dirTimes.entriesChanged(parentOf(path), nowNs());
  }

  forget(f: GcsFile): void {
    const set = this.openFiles.get(f.path);
    if (set && set.delete(f) && set.size === 0) this.openFiles.delete(f.path);
  }

  deletedHere(key: string, generation: bigint): boolean {
    return this.deleted.get(key) === generation;
  }

  /** A generation this mount removed (unlink): versions based on it that come late are dropped, not conflicts. */
  private noteDeleted(key: string, generation: bigint): void {
    this.deleted.delete(key);
    this.deleted.set(key, generation);
    if (this.deleted.size > DEFAULTS.gcs.deletedGenerationsKept) this.deleted.delete(this.deleted.keys().next().value as string);
  }

  reportConflict(c: GcsConflict): void {
    this.conflicts.push(c);
    this.opts.onConflict?.(c);
  }

  private track(f: GcsFile): void {
    let set = this.openFiles.get(f.path);
    if (!set) this.openFiles.set(f.path, (set = new Set()));
    set.add(f);
  }

  private filesAt(path: string): GcsFile[] {
    return [...(this.openFiles.get(path) ?? [])];
  }

  private filesUnder(dir: string): GcsFile[] {
    const out: GcsFile[] = [];
    for (const [p, set] of this.openFiles) if (isWithin(p, dir)) out.push(...set);
    return out;
  }

  // ---- lookups -------------------------------------------------------------------------------

  /** The first object whose name starts with `prefix`, following empty pages GCS may return. */
  private async firstUnder(prefix: string): Promise<ObjectInfo | undefined | null> {
    let pageToken: string | undefined;
    for (let i = 0; i < 5; i++) {
      const page = await this.req.list({ prefix, maxResults: 1, ...(pageToken ? { pageToken } : {}) });
      if (page.items[0]) return page.items[0];
      if (!page.nextPageToken) return undefined;
      pageToken = page.nextPageToken;
    }
    return null; // only empty pages: treat as "something may be there"
  }

  /** Is `dirKey` a directory: its placeholder, or (implicit dirs) any object under it? */
  private async probeDir(dirKey: string): Promise<{ placeholder?: ObjectInfo } | undefined> {
    if (!this.opts.implicitDirs) {
      const p = await this.req.head(dirKey);
      return p ? { placeholder: p } : undefined;
    }
    const first = await this.firstUnder(dirKey);
    if (first === undefined) return undefined;
    return first && first.name === dirKey ? { placeholder: first } : {};
  }

  /**
   * What `path` is. The object `a` and the prefix `a/` are asked for together; if both exist
   * the directory wins and the object `a` is hidden (it stays in the bucket untouched).
   */
  private async lookup(path: string): Promise<Found> {
    try {
      if (path === '/') {
        const placeholder = this.names.prefix ? await this.req.head(this.names.prefix) : undefined;
        return placeholder ? { type: 'dir', placeholder } : { type: 'dir' };
      }
      const key = this.names.key(path);
      const [obj, dir] = await Promise.all([this.req.head(key), this.probeDir(key + '/')]);
      if (dir) return dir.placeholder ? { type: 'dir', placeholder: dir.placeholder } : { type: 'dir' };
      if (obj) return { type: typeOfObject(obj), object: obj };
      return { type: 'none' };
    } catch (err) {
      throw toVfsError(err, `look up ${path}`);
    }
  }

  private async requireParentDir(path: string): Promise<void> {
    const parent = parentOf(path);
    if (parent === '/') return;
    const f = await this.lookup(parent);
    if (f.type === 'none') throw new VfsError('ENOENT', `${parent} does not exist`);
    if (f.type !== 'dir') throw new VfsError('ENOTDIR', `${parent} is not a directory`);
  }

  /**
   * After the last entry of a directory left it, keep the directory: a directory that existed
   * only as a common prefix would otherwise vanish with its last object (gcsfuse's documented
   * surprise). A placeholder is written when nothing is left under the prefix.
   */
  private async keepDir(dir: string): Promise<void> {
    if (dir === '/') return;
    const dirKey = this.names.dirKey(dir);
    try {
      if ((await this.firstUnder(dirKey)) !== undefined) return;
      await this.req.uploadBuffer(dirKey, Buffer.alloc(0), { ifGenerationMatch: 0n, metadata: {} });
    } catch (err) {
      if (!isPreconditionFailed(err)) throw toVfsError(err, `keep directory ${dir}`);
    }
  }

  private newNodeMeta(extra: NodeMeta): Record<string, string> {
    return nodeMetaEntries({ uid: this.opts.uid, gid: this.opts.gid, mtimeNs: nowNs(), ...extra });
  }

  /** Create an empty object (new file, placeholder, symlink) only if nothing is there yet. */
  /** Whether the server keeps `dir/` placeholders (gcs/server-checks.ts); undefined: unknown. */
  keepsPlaceholders(): Promise<boolean | undefined> {
    return probePlaceholders(this.req, this.names.prefix + DEFAULTS.gcs.reservedName + '/');
  }

  private async createEmpty(key: string, metadata: Record<string, string>): Promise<ObjectInfo | undefined> {
    try {
      return await this.req.uploadBuffer(key, Buffer.alloc(0), { ifGenerationMatch: 0n, metadata });
    } catch (err) {
      if (isPreconditionFailed(err)) return undefined;
      throw toVfsError(err, `create ${key}`);
    }
  }

  // ---- Backend: reads ------------------------------------------------------------------------

  async stat(path: string): Promise<Attr> {
    checkPath(path);
    const local = this.filesAt(path).find((f) => f.hasLocalState);
    if (local) return local.stat();
    const pending = this.pendingAt(path);
    if (pending) return pendingAttr(pending, this.attrDefaults, this.inodes.of(path));
    const f = await this.lookup(path);
    if (f.type === 'none') throw new VfsError('ENOENT', `${path} does not exist`);
    if (f.type === 'dir') return this.attrOf('dir', path, f.placeholder);
    return this.attrOf(f.type, path, f.object);
  }

  /**
   * One delimiter listing, all pages. Objects directly under the directory are files or
   * symlinks, common prefixes are directories (with implicit dirs off, only those that have a
   * placeholder, which includeTrailingDelimiter returns among the items); an object and a
   * prefix with the same name show once, as the directory; names POSIX cannot show (see
   * isPosixName) are left out.
   */
  async readdir(path: string): Promise<DirEntry[]> {
    return (await this.list(path)).map(({ name, type }) => ({ name, type }));
  }

  /** The listing with attributes: the listing's items carry every object's metadata. */
  async readdirPlus(path: string): Promise<Array<DirEntry & { attr?: Attr }>> {
    return this.withAttrs(path, await this.list(path));
  }

  private withAttrs(path: string, entries: ListedEntry[]): Array<DirEntry & { attr?: Attr }> {
    const dir = path === '/' ? '' : path;
    return entries.map(({ name, type, info }) => {
      const p = `${dir}/${name}`;
      // a file with local changes: its attributes are the staging file's (stat() answers them)
      if (type === 'file' && this.filesAt(p).some((f) => f.hasLocalState)) return { name, type };
      const pending = type === 'file' ? this.pendingAt(p) : undefined;
      if (pending) return { name, type, attr: pendingAttr(pending, this.attrDefaults, this.inodes.of(p)) };
      return { name, type, attr: this.attrOf(type, p, info) };
    });
  }

  private async list(path: string): Promise<ListedEntry[]> {
    checkPath(path);
    const dirKey = this.names.dirKey(path);
    const c = new DirContents();
    let sawAnything = false;
    let pageToken: string | undefined;
    try {
      do {
        const page = await this.req.list({ prefix: dirKey, delimiter: '/', includeTrailingDelimiter: true, ...(pageToken ? { pageToken } : {}) });
        for (const p of page.prefixes) {
          sawAnything = true;
          const name = p.slice(dirKey.length, -1);
          if (isPosixName(name)) c.dirs.add(name);
        }
        for (const o of page.items) {
          sawAnything = true;
          const rest = o.name.slice(dirKey.length);
          if (rest.endsWith('/')) c.placeholders.set(rest.slice(0, -1), o);
          else if (isPosixName(rest)) c.files.set(rest, o);
        }
        pageToken = page.nextPageToken;
      } while (pageToken);
    } catch (err) {
      throw toVfsError(err, `list ${path}`);
    }
    // versions not uploaded yet: a new file is in the bucket only once its upload lands
    for (const p of this.uploads && !this.uploads.isEmpty ? this.uploads.pendingIn(dirKey) : []) {
      const rest = p.key.slice(dirKey.length);
      const slash = rest.indexOf('/');
      sawAnything = true;
      if (slash >= 0) {
        if (isPosixName(rest.slice(0, slash))) c.dirs.add(rest.slice(0, slash));
      } else if (isPosixName(rest) && !c.files.has(rest)) c.files.set(rest, pendingInfo(p));
    }
    if (!sawAnything && path !== '/') {
      // Nothing under the prefix: a file, or nothing at all (or a placeholder-less dir with implicit dirs off).
      const f = await this.lookup(path);
      if (f.type === 'none') throw new VfsError('ENOENT', `${path} does not exist`);
      if (f.type !== 'dir') throw new VfsError('ENOTDIR', `${path} is not a directory`);
    }
    const entries = c.entries(this.opts.implicitDirs);
    this.dirLinks.listed(path, entries.filter((e) => e.type === 'dir').length);
    return entries;
  }

  /**
   * One page of the flat listing (no delimiter) of everything under the directory `path`, as the
   * listings (with attributes) of the directories below it that the page holds completely: a
   * walk of a tree (find, du, stat of every file) then costs a request per 1,000 objects rather
   * than one per directory. `pageToken` continues from the page before. The listings are what
   * readdirPlus would answer for those directories at this moment.
   */
  async readdirTree(path: string, pageToken?: string): Promise<TreePage> {
    checkPath(path);
    const dirKey = this.names.dirKey(path);
    let page: ListPage;
    try {
      page = await this.req.list({ prefix: dirKey, ...(pageToken ? { pageToken } : {}) });
    } catch (err) {
      throw toVfsError(err, `list ${path}`);
    }
    // relative directory ('' = path itself) -> what it holds
    const dirs = new Map<string, DirContents>();
    const contents = (rel: string) => {
      let c = dirs.get(rel);
      if (!c) dirs.set(rel, (c = new DirContents()));
      return c;
    };
    for (const o of page.items) {
      const parts = o.name.slice(dirKey.length).split('/');
      const last = parts.pop() as string;
      let rel = '';
      let reachable = true;
      for (const name of parts) {
        if (!isPosixName(name)) {
          reachable = false; // under a name POSIX cannot show
          break;
        }
        contents(rel).dirs.add(name);
        rel = rel ? `${rel}/${name}` : name;
        contents(rel);
      }
      if (!reachable) continue;
      if (last !== '') {
        if (isPosixName(last)) contents(rel).files.set(last, o);
      } else if (rel) {
        // the placeholder `rel/`, kept by its parent (the listed directory's own is not needed)
        const cut = rel.lastIndexOf('/');
        contents(cut < 0 ? '' : rel.slice(0, cut)).placeholders.set(rel.slice(cut + 1), o);
      }
    }
    // versions not uploaded yet, in the directories the page holds
    for (const p of this.uploads && !this.uploads.isEmpty ? this.uploads.pendingIn(dirKey) : []) {
      const rest = p.key.slice(dirKey.length);
      const cut = rest.lastIndexOf('/');
      const rel = cut < 0 ? '' : rest.slice(0, cut);
      const name = rest.slice(cut + 1);
      const c = dirs.get(rel);
      if (c && isPosixName(name) && !c.files.has(name)) c.files.set(name, pendingInfo(p));
    }
    // A directory is complete when every name under it lies within the page: after its first
    // name (or this is the first page) and before its last (or this is the last page). GCS
    // orders names by their UTF-8 bytes.
    const first = pageToken && page.items[0] ? Buffer.from(page.items[0].name) : undefined;
    const last = page.nextPageToken && page.items.length ? Buffer.from((page.items[page.items.length - 1] as ObjectInfo).name) : undefined;
    const complete = (rel: string) => {
      const key = Buffer.from(rel ? `${dirKey}${rel}/` : dirKey);
      if (first && Buffer.compare(key, first) < 0) return false;
      return !last || (Buffer.compare(last, key) > 0 && !last.subarray(0, key.length).equals(key));
    };
    const out = new Map<string, Array<DirEntry & { attr?: Attr }>>();
    const base = path === '/' ? '' : path;
    for (const [rel, c] of dirs) {
      if (!complete(rel)) continue;
      const p = rel ? `${base}/${rel}` : path;
      const entries = c.entries(this.opts.implicitDirs);
      this.dirLinks.listed(p, entries.filter((e) => e.type === 'dir').length);
      out.set(p, this.withAttrs(p, entries));
    }
    return {
      dirs: out,
      ...(page.nextPageToken ? { nextPageToken: page.nextPageToken } : {}),
      ...(last ? { last: this.names.pathOf(last.toString()) } : {}),
    };
  }

  async readlink(path: string): Promise<string> {
    checkPath(path);
    const f = await this.lookup(path);
    if (f.type === 'none') throw new VfsError('ENOENT', `${path} does not exist`);
    if (f.type !== 'symlink') throw new VfsError('EINVAL', `${path} is not a symlink`);
    return readNodeMeta(f.object.metadata).symlinkTarget ?? '';
  }

  /**
   * The content of a file into a local file (the journal's before-images): the staged bytes if
   * this backend holds local changes for it, otherwise a download of the live generation.
   */
  async copyOut(path: string, hostFile: string): Promise<void> {
    checkPath(path);
    const local = this.filesAt(path).find((f) => f.stagedFile !== undefined);
    if (local?.stagedFile) {
      fs.copyFileSync(local.stagedFile, hostFile);
      return;
    }
    const pending = this.pendingAt(path);
    if (pending) {
      copyRange(pending.bytes.file, pending.bytes.offset, pending.size, hostFile);
      return;
    }
    const f = await this.lookup(path);
    if (f.type === 'none') throw new VfsError('ENOENT', `${path} does not exist`);
    if (f.type !== 'file') throw new VfsError(f.type === 'dir' ? 'EISDIR' : 'EINVAL', `${path} is not a file`);
    try {
      await this.req.downloadTo(f.object.name, f.object.generation, hostFile);
    } catch (err) {
      if (isNotFound(err)) throw new VfsError('ESTALE', `${path} changed in the bucket while being copied out`);
      throw toVfsError(err, `copy out ${path}`);
    }
  }

  /**
   * A before-image by server-side copy of the object's live generation, when that generation is
   * the file's content: no handle here holds local bytes for it, and the size is the one the
   * journal expects. Otherwise null, and the journal reads the bytes (copyOut).
   */
  async keepCopy(path: string, size: number): Promise<string | null> {
    if (this.filesAt(path).some((f) => f.hasLocalState) || this.pendingAt(path)) return null;
    try {
      const obj = await this.req.head(this.names.key(path));
      if (!obj || typeOfObject(obj) !== 'file' || obj.size !== size) return null;
      return (await this.journalArea.keepObject(obj.name, obj.generation)) ?? null;
    } catch (err) {
      throw toVfsError(err, `keep a copy of ${path}`);
    }
  }

  /**
   * One request to the bucket, without retries, for a health check: resolves if the bucket
   * answered within `timeoutMs`, else rejects with why.
   */
  async ping(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`the bucket did not answer within ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      await Promise.race([this.req.probe(this.opts.prefix), late]);
    } catch (err) {
      throw toVfsError(err, `reach bucket ${this.req.bucket.name}`);
    } finally {
      clearTimeout(timer);
    }
  }

  async statfs(): Promise<FsStats> {
    // A bucket has no capacity to report; large round numbers keep df and installers content.
    // Quotas are the policy layer's business.
    return { bsize: 4096, blocks: 2 ** 40, bfree: 2 ** 40, bavail: 2 ** 40, files: 2 ** 32, ffree: 2 ** 32, namemax: 255 };
  }

  // ---- pinned versions (apply of a staged session) ----------------------------------------------

  /** path -> the version its next change must find (Backend.expectVersions) */
  private readonly pins = new Map<string, string | null>();

  expectVersions(pins: ReadonlyMap<string, string | null>): () => void {
    for (const [p, v] of pins) this.pins.set(p, v);
    return () => {
      for (const p of pins.keys()) this.pins.delete(p);
    };
  }

  /**
   * A change of `path` about to be made on what `f` found: when the path is pinned, refused
   * unless that is the pinned version (the pin is used up: the request that follows is
   * conditional on this generation). True when it was pinned (a precondition failure is then a
   * conflict, never a retry on the newer version).
   */
  private takePin(path: string, f: Found): boolean {
    if (!this.pins.has(path)) return false;
    const want = this.pins.get(path) ?? null;
    this.pins.delete(path);
    const have = f.type === 'none' ? null : f.type === 'dir' ? 'a directory' : `${f.object.name}#${f.object.generation}`;
    if (have !== want) throw this.pinConflict(path, want, have);
    return true;
  }

  private pinConflict(path: string, want: string | null, have: string | null): VfsError {
    const gen = (v: string | null) => (v === null ? 'nothing there' : v.includes('#') ? `generation ${v.slice(v.lastIndexOf('#') + 1)}` : v);
    return new VfsError('ESTALE', `${path}: changed in the bucket since it was first read (${gen(want)} then, ${have === 'changed again' ? have : gen(have)} now)`);
  }

  // ---- Backend: open files -------------------------------------------------------------------

  async open(path: string, mode: OpenMode, createMode = 0o644): Promise<BackendFile> {
    checkPath(path);
    if (path === '/') throw new VfsError('EISDIR', '/ is a directory');
    const key = this.names.key(path);
    if (mode.write || mode.create || mode.truncate) this.objectHints.delete(path);
    if (!mode.write && !mode.create) {
      // Another handle holds local changes not uploaded yet: read what it would read (the
      // journal's before-image of a file being written is taken this way).
      const local = this.filesAt(path).find((f) => f.hasLocalState);
      if (local) return new LocalChangesReader(local);
      const pending = this.pendingAt(path);
      const uploads = this.uploads;
      if (pending && uploads) {
        const reader = PendingReader.open(pending, this.attrDefaults, this.inodes.of(path), () => uploads.waitVersion(pending.id));
        if (reader) return reader;
      }
    }
    // A writer bases its version on the bucket's generation: the queued ones land first (and
    // one a handle closing now is still putting in the queue).
    if (mode.write || mode.truncate) for (const f of this.filesAt(path)) if (f.isClosed) await f.idle();
    if (this.pendingAt(path)) await this.settle(path);
    if (mode.knownFile && !mode.write && !mode.create && !mode.truncate && !this.pins.has(path)) {
      // The cache in front knows a file is here: its current generation is all the open needs
      // (git add opens every file it hashes); the listing that tells a file from a directory
      // of the same name is left out. Anything but a file found: the usual lookup below.
      const obj = await this.req.head(key).catch((err) => {
        throw toVfsError(err, `open ${path}`);
      });
      if (obj && typeOfObject(obj) === 'file') return this.opened(path, key, obj, mode);
    }
    const q = this.writeBack;
    // (a path the staged apply pinned to a generation goes the usual way, which checks it)
    if (mode.create && mode.knownAbsent && mode.write && q && !this.pins.has(path)) return this.createQueued(path, key, createMode, q);
    if (mode.create && mode.knownAbsent && !this.pins.has(path)) {
      // The caller's cache says nothing is here and the parent is a directory: skip the
      // lookups; GCS still decides (ifGenerationMatch=0), and if something is there after
      // all, the usual path below finds out what.
      const obj = await this.createEmpty(key, this.newNodeMeta({ perm: createMode & 0o7777 }));
      if (obj) {
        this.entriesChanged(path);
        return this.opened(path, key, obj, mode);
      }
      if (mode.exclusive) throw new VfsError('EEXIST', `${path} exists`);
    }
    for (let attempt = 0; attempt < RACE_ATTEMPTS; attempt++) {
      const f = await this.lookup(path);
      if (mode.write || mode.create || mode.truncate === true) this.takePin(path, f);
      if (f.type === 'dir') throw new VfsError('EISDIR', `${path} is a directory`);
      if (f.type === 'symlink') throw new VfsError('ELOOP', `${path} is a symlink; not following it`);
      // the kernel opens FIFOs and device nodes itself; a socket cannot be opened
      if (f.type !== 'file' && f.type !== 'none') throw new VfsError('ENXIO', `${path} is a ${f.type}, not a file with content`);
      let obj: ObjectInfo | undefined;
      if (f.type === 'file') {
        if (mode.create && mode.exclusive) throw new VfsError('EEXIST', `${path} exists`);
        obj = f.object;
      } else {
        if (!mode.create) throw new VfsError('ENOENT', `${path} does not exist`);
        await this.requireParentDir(path);
        // Created at once, empty, only if still absent: the file is visible to stat and other
        // hosts right away, and O_EXCL is decided by GCS (ifGenerationMatch=0).
        obj = await this.createEmpty(key, this.newNodeMeta({ perm: createMode & 0o7777 }));
        if (!obj) {
          if (mode.exclusive) throw new VfsError('EEXIST', `${path} exists`);
          continue; // someone created it meanwhile: open theirs
        }
        this.entriesChanged(path);
      }
      return this.opened(path, key, obj, mode);
    }
    throw new VfsError('ESTALE', `${path} kept changing in the bucket while being opened`);
  }

  /**
   * durability journal, a create the caches know is new: no request on the program's path.
   * The create is durable in the spool (GcsFile.startNew) and goes up with the close's version,
   * as one upload with ifGenerationMatch=0; this mount shows the file meanwhile (stat, listings).
   * Another host that creates the same name first is found then: a late conflict (local
   * version kept in conflicts/), so O_EXCL against other hosts is decided at upload.
   */
  private async createQueued(path: string, key: string, createMode: number, q: UploadQueue): Promise<GcsFile> {
    const base: ObjectInfo = { name: key, generation: 0n, metageneration: 0n, size: 0, updatedNs: nowNs(), metadata: this.newNodeMeta({ perm: createMode & 0o7777 }) };
    const file = new GcsFile(this, path, key, base, true);
    await file.startNew(q);
    this.track(file);
    this.entriesChanged(path);
    return file;
  }

  private async opened(path: string, key: string, obj: ObjectInfo, mode: OpenMode): Promise<GcsFile> {
    const file = new GcsFile(this, path, key, obj, mode.write);
    this.track(file);
    if (mode.truncate && mode.write && obj.size > 0) await file.truncate(0);
    return file;
  }

  async truncate(path: string, size: number): Promise<void> {
    const open = this.filesAt(path).find((f) => f.writable && !f.isClosed);
    if (open) {
      await open.truncate(size);
      return;
    }
    const f = await this.open(path, { write: true });
    try {
      await f.truncate(size);
    } finally {
      await f.close();
    }
  }

  // ---- Backend: namespace --------------------------------------------------------------------

  async mkdir(path: string, mode: number, hint?: MkdirHint): Promise<Attr> {
    checkPath(path);
    if (path === '/') throw new VfsError('EEXIST', '/ exists');
    if (hint?.knownAbsent) {
      // As open's knownAbsent: tar and git make trees whose directories a cache in front knows
      // are new and empty, so no lookup of path or parent per directory; GCS still decides
      // (ifGenerationMatch=0), and a refusal falls back to the checks below.
      const made = await this.createEmpty(this.names.dirKey(path), this.newNodeMeta({ perm: mode & 0o7777 }));
      if (made) {
        this.placeholders.set(path, made);
        this.dirLinks.made(path);
        this.entriesChanged(path);
        return this.attrOf('dir', path, made);
      }
    }
    const [f] = await Promise.all([this.lookup(path), this.requireParentDir(path)]);
    if (f.type !== 'none') throw new VfsError('EEXIST', `${path} exists`);
    const made = await this.createEmpty(this.names.dirKey(path), this.newNodeMeta({ perm: mode & 0o7777 }));
    if (!made) throw new VfsError('EEXIST', `${path} exists`);
    this.placeholders.set(path, made);
    this.dirLinks.made(path);
    this.entriesChanged(path);
    return this.attrOf('dir', path, made);
  }

  async rmdir(path: string): Promise<void> {
    checkPath(path);
    this.placeholders.delete(path);
    if (path === '/') throw new VfsError('EBUSY', 'the root directory cannot be removed');
    await this.settle(path);
    const dirKey = this.names.dirKey(path);
    // The emptiness listing goes out with the lookup, and the parent's (see unlink) with the
    // delete: rm -rf waits for 2 round trips per directory instead of 4.
    const listing = this.req.list({ prefix: dirKey, maxResults: 2 });
    listing.catch(() => undefined); // its failure is read below, after the lookup's
    const f = await this.lookup(path);
    if (f.type === 'none') throw new VfsError('ENOENT', `${path} does not exist`);
    if (f.type !== 'dir') throw new VfsError('ENOTDIR', `${path} is not a directory`);
    const parent = parentOf(path);
    const parentKey = parent === '/' ? undefined : this.names.dirKey(parent);
    let first: Promise<ObjectInfo | undefined | null> | undefined;
    try {
      const page = await listing;
      // Objects with names POSIX cannot show (e.g. "dir//x") count too: removing the
      // directory must not orphan them.
      if (page.items.some((o) => o.name !== dirKey) || page.nextPageToken) throw new VfsError('ENOTEMPTY', `${path} is not empty`);
      if (f.placeholder) {
        first = parentKey === undefined ? undefined : this.firstUnder(parentKey).catch(() => null);
        await this.req.remove(dirKey, f.placeholder.generation);
      }
      this.dirTimes.removed(path);
      this.dirLinks.removed(path);
      this.entriesChanged(path);
    } catch (err) {
      if (isNotFound(err)) return; // removed meanwhile: the outcome is the same
      if (isPreconditionFailed(err)) throw new VfsError('ESTALE', `${path}: its placeholder changed in the bucket meanwhile`);
      throw toVfsError(err, `rmdir ${path}`);
    }
    if (parentKey === undefined || (await first)?.name !== parentKey) await this.keepDir(parent);
  }


  async unlink(path: string): Promise<void> {
    checkPath(path);
    this.objectHints.delete(path);
    await this.settle(path);
    for (let attempt = 0; attempt < RACE_ATTEMPTS; attempt++) {
      const f = await this.lookup(path);
      const pinned = this.takePin(path, f);
      if (f.type === 'none') throw new VfsError('ENOENT', `${path} does not exist`);
      if (f.type === 'dir') throw new VfsError('EISDIR', `${path} is a directory`);
      const open = this.filesAt(path);
      for (const of of open) await of.keepLocalCopy(); // open handles keep reading, as POSIX wants
      // Whether the parent outlives its last entry is asked beside the delete, not after it (rm
      // -rf: one round trip less per file): the listing's first name under "dir/" is the
      // placeholder itself when there is one, and a placeholder keeps the directory whatever
      // else goes. Without one, keepDir asks again after the delete, as before.
      const parent = parentOf(path);
      const parentKey = parent === '/' ? undefined : this.names.dirKey(parent);
      const first = parentKey === undefined ? undefined : this.firstUnder(parentKey).catch(() => null);
      try {
        await this.req.remove(f.object.name, f.object.generation);
        this.noteDeleted(f.object.name, f.object.generation);
      } catch (err) {
        if (isPreconditionFailed(err) && pinned) throw this.pinConflict(path, `${f.object.name}#${f.object.generation}`, 'changed again');
        if (isPreconditionFailed(err)) continue; // replaced meanwhile: unlink the new one
        if (!isNotFound(err)) throw toVfsError(err, `unlink ${path}`);
      }
      for (const of of open) {
        of.unlinked = true;
        this.forget(of);
      }
      this.entriesChanged(path);
      if ((await first)?.name !== parentKey || parentKey === undefined) await this.keepDir(parent);
      return;
    }
    throw new VfsError('ESTALE', `${path} kept changing in the bucket while being unlinked`);
  }

  async symlink(target: string, path: string): Promise<void> {
    checkPath(path);
    const [f] = await Promise.all([this.lookup(path), this.requireParentDir(path)]);
    if (f.type !== 'none') throw new VfsError('EEXIST', `${path} exists`);
    const made = await this.createEmpty(this.names.key(path), this.newNodeMeta({ symlinkTarget: target }));
    if (!made) throw new VfsError('EEXIST', `${path} exists`);
    this.entriesChanged(path);
  }

  /**
   * A FIFO, socket or device node: an empty object whose metadata names the type (and device
   * number), as a symlink is an empty object with its target. The kernel serves FIFOs and
   * sockets itself; only the node needs keeping.
   */
  async mknod(path: string, mode: number, rdev: number): Promise<void> {
    checkPath(path);
    const special = typeOfMode(mode);
    if (special === 'file' || special === 'dir' || special === 'symlink') throw new VfsError('EINVAL', `mknod ${path}: not a special file type`);
    const [f] = await Promise.all([this.lookup(path), this.requireParentDir(path)]);
    if (f.type !== 'none') throw new VfsError('EEXIST', `${path} exists`);
    const device = special === 'chardev' || special === 'blockdev';
    const made = await this.createEmpty(this.names.key(path), this.newNodeMeta({ perm: mode & 0o7777, special, ...(device ? { rdev } : {}) }));
    if (!made) throw new VfsError('EEXIST', `${path} exists`);
    this.entriesChanged(path);
  }

  async link(existing: string): Promise<void> {
    throw new VfsError('EPERM', `${existing}: the GCS backend has no hard links`);
  }

  /**
   * rename = copy + delete, so it is not atomic: another client can see both names for a
   * moment, and a crash mid-way leaves both (nothing is lost; the journal's rename intent will
   * finish or undo it on restart). A directory is renamed object by object: all copies first,
   * then all deletes.
   */
  async rename(from: string, to: string, hint?: RenameHint): Promise<void> {
    checkPath(from);
    checkPath(to);
    if (from === to) return;
    if (from === '/' || to === '/') throw new VfsError('EBUSY', 'the root directory cannot be renamed');
    // (a stale hint would only cost a failed precondition; dropped to keep the maps honest)
    this.dropHints(from, false);
    this.dropHints(to, false);
    if (isWithin(to, from)) throw new VfsError('EINVAL', `cannot move ${from} into itself (${to})`);
    if (await this.renameQueued(from, to, hint?.toKnownAbsent === true)) return;
    // Local changes of open files go first, so the copy carries them; so do queued versions.
    for (const of of this.filesUnder(from)) if (of.isDirty) await of.sync();
    await this.settle(from, to);
    const [src, dst] = await Promise.all([this.lookup(from), this.lookup(to), this.requireParentDir(to)]);
    this.takePin(from, src);
    this.takePin(to, dst);
    if (src.type === 'none') throw new VfsError('ENOENT', `${from} does not exist`);
    if (src.type === 'dir') {
      if (dst.type !== 'none' && dst.type !== 'dir') throw new VfsError('ENOTDIR', `${to} is not a directory`);
      this.dropHints(from, true);
      this.dropHints(to, true);
      await this.renameDir(from, to, dst.type === 'dir' ? dst : undefined);
      this.dirTimes.renamed(from, to);
      this.dirLinks.renamed(from, to, dst.type === 'dir');
    } else {
      if (dst.type === 'dir') throw new VfsError('EISDIR', `${to} is a directory`);
      await this.renameObject(from, to, src.object, dst.type === 'none' ? undefined : dst.object);
    }
    this.entriesChanged(from);
    this.entriesChanged(to);
    await this.keepDir(parentOf(from));
  }

  /**
   * Forget the placeholder and object hints of `path`, and with `below` those under it. Only a
   * directory has hints below it, so a file's rename (git's every object) does not walk the maps.
   */
  private dropHints(path: string, below: boolean): void {
    this.placeholders.delete(path);
    this.objectHints.delete(path);
    if (!below) return;
    for (const k of [...this.placeholders.keys()]) if (isWithin(k, path)) this.placeholders.delete(k);
    for (const k of [...this.objectHints.keys()]) if (isWithin(k, path)) this.objectHints.delete(k);
  }

  /**
   * durability journal: a file that exists only as queued versions not started (created here,
   * never in the bucket) is renamed in the queue (UploadQueue.move): the destination is looked
   * up for the generation its first upload replaces, the versions take its name, durable in the
   * spool before this returns. The bucket never held the source, so its directory keeps what it
   * had. False when that does not hold (a handle with unsaved changes, a version running or
   * tried, the destination not a file): the usual copy and delete after the uploads.
   * `toKnownAbsent` (a cache in front knows nothing is there and the parent is a directory):
   * no lookup; another host's object made there meanwhile is found at upload (ifGenerationMatch=0),
   * a late conflict, as for a create the caches know is new (createQueued).
   */
  private async renameQueued(from: string, to: string, toKnownAbsent: boolean): Promise<boolean> {
    const q = this.writeBack;
    if (!q || !this.pendingAt(from) || this.pendingAt(to) || this.pins.has(from) || this.pins.has(to)) return false;
    if (this.filesAt(to).length || this.filesAt(from).some((f) => f.isDirty)) return false;
    const [dst] = toKnownAbsent ? [{ type: 'none' } as Found] : await Promise.all([this.lookup(to), this.requireParentDir(to)]);
    if (dst.type !== 'none' && dst.type !== 'file') return false;
    const toKey = this.names.key(to);
    if (!q.move(this.names.key(from), toKey, to, dst.type === 'file' ? dst.object : undefined)) return false;
    this.inodes.renamedFile(from, to);
    // a handle whose release is not in yet follows: a later version of it is the new name's
    for (const of of this.filesAt(from)) {
      this.forget(of);
      of.moveQueued(to, toKey);
      this.track(of);
    }
    this.entriesChanged(from);
    this.entriesChanged(to);
    return true;
  }

  private async renameObject(from: string, to: string, src: ObjectInfo, replaced: ObjectInfo | undefined): Promise<void> {
    const toKey = this.names.key(to);
    for (const of of this.filesAt(to)) await of.keepLocalCopy();
    const copied = await this.copyObject(src, toKey, replaced ? replaced.generation : 0n, to);
    for (const of of this.filesAt(to)) {
      of.unlinked = true;
      this.forget(of);
    }
    this.inodes.renamedFile(from, to);
    await this.deleteSource(src, from);
    for (const of of this.filesAt(from)) {
      this.forget(of);
      of.retarget(to, toKey, copied);
      this.track(of);
    }
  }

  private async renameDir(from: string, to: string, existing: { placeholder?: ObjectInfo } | undefined): Promise<void> {
    const fromKey = this.names.dirKey(from);
    const toKey = this.names.dirKey(to);
    if (existing) {
      const first = await this.req.list({ prefix: toKey, maxResults: 2 }).catch((err) => {
        throw toVfsError(err, `list ${to}`);
      });
      if (first.items.some((o) => o.name !== toKey) || first.nextPageToken) throw new VfsError('ENOTEMPTY', `${to} is not empty`);
    }
    const objects: ObjectInfo[] = [];
    let pageToken: string | undefined;
    try {
      do {
        const page = await this.req.list({ prefix: fromKey, ...(pageToken ? { pageToken } : {}) });
        objects.push(...page.items);
        pageToken = page.nextPageToken;
      } while (pageToken);
    } catch (err) {
      throw toVfsError(err, `list ${from}`);
    }
    // GCS names have at most 1024 bytes: a copy past that is refused (400, which read EINVAL:
    // mv said "cannot move a directory to a subdirectory of itself") after the intent was written
    const grow = Buffer.byteLength(toKey) - Buffer.byteLength(fromKey);
    const tooLong = grow > 0 ? objects.find((o) => Buffer.byteLength(o.name) + grow > 1024) : undefined;
    if (tooLong) throw new VfsError('ENAMETOOLONG', `rename ${from} to ${to}: ${tooLong.name} would become an object name of more than 1024 bytes`);
    const replaced = existing?.placeholder && objects.some((o) => o.name === fromKey) ? existing.placeholder : undefined;
    // Journaled in the bucket before the first copy: a crash from here on is finished or undone
    // by the next open of the workspace (gcs/rename-intent.ts).
    const intent = await this.intents.begin(from, to, fromKey, toKey, objects, replaced).catch((err) => {
      throw toVfsError(err, `rename ${from}: write its intent`);
    });
    const lease = this.intents.keepAlive(intent);
    try {
      await this.moveObjects(from, to, objects, intent, lease.held);
    } finally {
      lease.stop();
    }
    // every node below moved with the directory: each object and the directories between
    const below = new Set<string>();
    for (const o of objects) {
      for (let p = this.names.pathOf(o.name); p !== from && isWithin(p, from); p = parentOf(p)) below.add(p);
    }
    this.inodes.renamed(from, to, below);
  }

  /** The copies, then the deletes, of a directory rename whose intent is written. */
  private async moveObjects(from: string, to: string, objects: ObjectInfo[], intent: RenameIntent, leaseHeld: () => boolean): Promise<void> {
    const { fromKey, toKey } = intent;
    const replacedGen = intent.replaced ? BigInt(intent.replaced.generation) : 0n;
    const copies = new Map<string, ObjectInfo>();
    try {
      await this.inBatches(objects, async (o) => {
        const dstKey = toKey + o.name.slice(fromKey.length);
        const pre = dstKey === toKey ? replacedGen : 0n;
        copies.set(o.name, await this.copyObject(o, dstKey, pre, to));
        await this.opts.renameHook?.('copied', copies.size);
      });
    } catch (err) {
      // A copy failed (a source changed meanwhile, or GCS is unreachable): undo the copies made
      // so the tree stays wholly at the source. If even that fails, the intent stays for the
      // next open of the workspace to settle.
      await this.intents.recover(intent, 'undo').catch(() => undefined);
      throw err;
    }
    // Renewals failed for most of the lease: another host may take the intent for abandoned and
    // undo it. Deleting sources now could remove an object both ways; the next open settles it.
    if (!leaseHeld()) throw new VfsError('EIO', `rename ${from}: its intent's lease could not be renewed; left for the next open of the workspace to finish`);
    const stale: string[] = [];
    await this.inBatches(objects, async (o) => {
      try {
        await this.deleteSource(o, this.names.pathOf(o.name));
      } catch (err) {
        if (err instanceof VfsError && err.code === 'ESTALE') stale.push(o.name);
        else throw err;
      }
    });
    for (const of of this.filesUnder(from)) {
      const newPath = rebase(of.path, from, to);
      const info = copies.get(of.key);
      this.forget(of);
      if (info) of.retarget(newPath, this.names.key(newPath), info);
      this.track(of);
    }
    await this.intents.end(intent).catch(() => undefined); // a leftover is settled, harmlessly, at the next open
    if (stale.length) {
      throw new VfsError('ESTALE', `rename ${from} -> ${to}: copied, but ${stale.length} source object(s) changed meanwhile and were left in place: ${stale.slice(0, 5).join(', ')}`);
    }
  }

  /** Copy one generation; a 412 that finds our own copy already there (lost response) is success. */
  private async copyObject(src: ObjectInfo, dstKey: string, ifGenerationMatch: bigint, to: string): Promise<ObjectInfo> {
    try {
      return await this.req.copy(src.name, src.generation, dstKey, { ifGenerationMatch });
    } catch (err) {
      if (isPreconditionFailed(err)) {
        const cur = await this.req.head(dstKey).catch(() => undefined);
        if (cur && cur.crc32c === src.crc32c && cur.size === src.size && sameMetadata(cur.metadata, src.metadata) && cur.generation > src.generation) return cur;
        throw new VfsError('ESTALE', `rename to ${to}: the destination changed in the bucket meanwhile`);
      }
      if (isNotFound(err)) throw new VfsError('ESTALE', `rename to ${to}: the source ${src.name} changed or vanished meanwhile`);
      throw toVfsError(err, `copy to ${to}`);
    }
  }

  /** Delete the source generation of a rename; gone already is fine, changed meanwhile is kept. */
  private async deleteSource(src: ObjectInfo, from: string): Promise<void> {
    try {
      await this.req.remove(src.name, src.generation);
    } catch (err) {
      if (isNotFound(err)) return;
      if (isPreconditionFailed(err)) throw new VfsError('ESTALE', `rename of ${from}: copied, but the source changed meanwhile and was left in place`);
      throw toVfsError(err, `rename: delete ${from}`);
    }
  }

  private inBatches<T>(items: T[], fn: (item: T) => Promise<void>): Promise<void> {
    return inBatches(items, this.opts.renameConcurrency, fn);
  }

  // ---- Backend: attributes -------------------------------------------------------------------

  async chmod(path: string, mode: number): Promise<Attr | void> {
    const r = await this.patchNode(path, { perm: mode & 0o7777 }, 'chmod');
    return r === DEFERRED ? undefined : r;
  }

  async chown(path: string, uid: number, gid: number): Promise<Attr | void> {
    const r = await this.patchNode(path, { uid, gid }, 'chown');
    return r === DEFERRED ? undefined : r;
  }

  async utimens(path: string, times: TimeSpec): Promise<Attr | void> {
    if (times.atimeNs === undefined && times.mtimeNs === undefined) return;
    const now = nowNs();
    const fields: NodeMeta = {};
    if (times.mtimeNs !== undefined) fields.mtimeNs = times.mtimeNs === 'now' ? now : times.mtimeNs;
    if (times.atimeNs !== undefined) fields.atimeNs = times.atimeNs === 'now' ? now : times.atimeNs;
    if (fields.mtimeNs !== undefined) this.dirTimes.timesSet(path);
    const r = await this.patchNode(path, fields, 'utimens');
    if (r === DEFERRED) return;
    if (fields.mtimeNs !== undefined) for (const of of this.filesAt(path)) of.setMtime(fields.mtimeNs);
    return r;
  }

  /**
   * Change recorded attributes (true: taken along by an open file's next upload instead): a
   * metadata patch with ifGenerationMatch and
   * ifMetagenerationMatch of what was looked up, re-done if another client changed the object
   * in between. A directory without a placeholder gets one, carrying the attributes. The bucket
   * root (no prefix) has no object to carry them: changes to it are accepted and not kept.
   */
  private async patchNode(path: string, fields: NodeMeta, what: string): Promise<Attr | typeof DEFERRED | undefined> {
    checkPath(path);
    const entries = nodeMetaEntries(fields);
    // A file open with changes not uploaded yet (tar: write, futimens, fchown, fchmod, close)
    // takes the attributes along with its upload: no request now, one object generation.
    // a handle closing now has its last version on the way to the queue: amended there (below)
    for (const f of this.filesAt(path)) if (f.isClosed) await f.idle();
    const dirty = this.filesAt(path).find((f) => f.isDirty && f.writable && !f.unlinked && !f.isClosed);
    if (dirty) {
      dirty.addPendingMeta(entries, fields.mtimeNs);
      return DEFERRED;
    }
    // attributes patch the generation a queued version of this file will replace: it lands
    // first. Only this path's own versions: a directory's placeholder is no queued version's
    // base, so tar's fix-ups of directory times at its end do not wait for the uploads under
    // them (they did: tar's exit waited for the whole queue).
    // a queued version not started yet takes the change along, durable in the spool (git's and
    // cp -p's chmod/utime of a file just closed): no wait for its upload, no patch after it
    if (this.writeBack && !this.pins.has(path) && this.pendingAt(path)) {
      const amended = this.writeBack.amendMetadata(this.names.key(path), entries);
      if (amended) {
        // a handle still open (its release not in yet) is based on the closed version: its next
        // version must not put the old attributes back
        for (const of of this.filesAt(path)) of.noteAmended(entries);
        return pendingAttr(amended, this.attrDefaults, this.inodes.of(path));
      }
    }
    if (this.pendingAt(path)) await this.uploads?.waitPath(path).catch(() => undefined);
    let pinned = false;
    for (let attempt = 0; attempt < RACE_ATTEMPTS; attempt++) {
      // the first try trusts the placeholder our own last answer gave (preconditions check it)
      const hinted = attempt === 0 ? this.placeholders.get(path) : undefined;
      // (a path the staged apply pinned is looked up: the pin is checked against what is there)
      const hintedObject = attempt === 0 && !hinted && !this.pins.has(path) ? this.objectHints.get(path) : undefined;
      this.placeholders.delete(path);
      this.objectHints.delete(path);
      const f: Found = hinted ? { type: 'dir', placeholder: hinted } : hintedObject ? { type: typeOfObject(hintedObject), object: hintedObject } : await this.lookup(path);
      if (f.type !== 'dir' && this.takePin(path, f)) pinned = true;
      if (f.type === 'none') throw new VfsError('ENOENT', `${path} does not exist`);
      // Linux cannot chmod a symlink itself (as the local backend).
      if (f.type === 'symlink' && what === 'chmod') throw new VfsError('EOPNOTSUPP', `${path} is a symlink; its mode cannot be changed`);
      const obj = f.type === 'dir' ? f.placeholder : f.object;
      if (!obj) {
        if (path === '/' && !this.names.prefix) return undefined;
        const made = await this.createEmpty(this.names.dirKey(path), this.newNodeMeta({ mtimeNs: this.attrDefaults.implicitTimeNs, ...fields }));
        if (made) {
          this.placeholders.set(path, made);
          return this.attrOf('dir', path, made);
        }
        continue;
      }
      let info: ObjectInfo;
      try {
        info = await this.req.patchMetadata(obj.name, entries, { ifGenerationMatch: obj.generation, ifMetagenerationMatch: obj.metageneration });
      } catch (err) {
        if (isNotFound(err) && pinned) throw this.pinConflict(path, `${obj.name}#${obj.generation}`, null);
        if (isNotFound(err)) continue;
        if (!isPreconditionFailed(err)) throw toVfsError(err, `${what} ${path}`);
        const cur = await this.req.head(obj.name).catch(() => undefined);
        const ours = !!cur && Object.entries(entries).every(([k, v]) => cur.metadata[k] === v);
        if (!ours && pinned) throw this.pinConflict(path, `${obj.name}#${obj.generation}`, 'changed again');
        if (!cur || !ours) continue;
        // an earlier attempt of this patch landed; only its response was lost. A head is not
        // our response: its generation is taken only if it is the one we patched
        if (cur.generation !== obj.generation) continue;
        info = cur;
      }
      const open = this.filesAt(path);
      for (const of of open) of.noteMetadata(info, obj.generation);
      if (f.type === 'dir') {
        this.placeholders.set(path, info);
        return this.attrOf('dir', path, info);
      }
      // (an open handle's upload would make a new generation: no guess then)
      if (open.length === 0) this.objectHints.set(path, info);
      // an open file's attributes are its handle's (stat asks it): none to give here
      return open.length ? undefined : this.attrOf(f.type, path, info);
    }
    throw new VfsError('ESTALE', `${what} ${path}: the object kept changing in the bucket`);
  }

  async close(): Promise<void> {
    // Queued versions stay in the spool for the next open (unmount drains the queue first,
    // unless told not to wait).
    this.uploads?.close();
    this.stagingFiles.close();
    // Open files are closed by their owners (the Vfs); the client holds no other resources.
    // This backend's rename intents are no longer live: a later open may settle them.
    unregisterInstance(this.instance);
  }
}

/** patchNode: the change went with an open file's next upload (no request now) */
const DEFERRED = Symbol('deferred');

interface ListedEntry {
  name: string;
  type: NodeType;
  info: ObjectInfo | undefined;
}

/** What one directory holds, gathered from listing items and prefixes (names relative to it). */
class DirContents {
  readonly files = new Map<string, ObjectInfo>();
  readonly dirs = new Set<string>();
  readonly placeholders = new Map<string, ObjectInfo>();

  /** Its entries: an object and a prefix with the same name show once, as the directory. */
  entries(implicitDirs: boolean): ListedEntry[] {
    const entries = new Map<string, ListedEntry>();
    for (const [name, o] of this.files) entries.set(name, { name, type: typeOfObject(o), info: o });
    for (const d of this.dirs) {
      const ph = this.placeholders.get(d);
      if (implicitDirs || ph) entries.set(d, { name: d, type: 'dir', info: ph });
    }
    return [...entries.values()];
  }
}


/** `size` bytes of `file` from `offset` into a new `hostFile`. */
function copyRange(file: string, offset: number, size: number, hostFile: string): void {
  if (offset === 0) {
    fs.copyFileSync(file, hostFile);
    return;
  }
  const fd = fs.openSync(file, 'r');
  try {
    fs.writeFileSync(hostFile, readRange(fd, size, offset));
  } finally {
    fs.closeSync(fd);
  }
}

/** A version waiting in the upload queue as the object it will be. */
function pendingInfo(p: PendingVersion): ObjectInfo {
  return { name: p.key, generation: 0n, metageneration: 0n, size: p.size, updatedNs: BigInt(p.enqueuedAt) * 1_000_000n, metadata: p.metadata, ...(p.contentType ? { contentType: p.contentType } : {}) };
}

/** The attributes of a version waiting in the upload queue. */
function pendingAttr(p: PendingVersion, defaults: AttrDefaults, ino: number): Attr {
  return attrOf('file', p.path, pendingInfo(p), defaults, ino);
}

/**
 * A read-only handle on a version waiting in the upload queue: its bytes in the spool, the file
 * held open (it may land and leave meanwhile). Its fsync waits for the upload, as a writer's
 * does: fsync means "in the bucket" whichever descriptor asks (`sync FILE` opens it read-only).
 */
class PendingReader implements BackendFile {
  readonly writable = false;
  private constructor(
    private readonly p: PendingVersion,
    private readonly defaults: AttrDefaults,
    private readonly ino: number,
    private readonly fd: number,
    private readonly landed: () => Promise<void>,
  ) {}
  /** undefined when the version landed (and left the spool) meanwhile: the bucket has it */
  static open(p: PendingVersion, defaults: AttrDefaults, ino: number, landed: () => Promise<void>): PendingReader | undefined {
    try {
      return new PendingReader(p, defaults, ino, fs.openSync(p.bytes.file, 'r'), landed);
    } catch {
      return undefined;
    }
  }
  async read(buf: Buffer, length: number, position: number): Promise<number> {
    const n = Math.max(0, Math.min(length, this.p.size - position));
    return n ? fs.readSync(this.fd, buf, 0, n, this.p.bytes.offset + position) : 0;
  }
  async write(): Promise<number> {
    throw new VfsError('EBADF', `${this.p.path} is open read-only`);
  }
  async truncate(): Promise<void> {
    throw new VfsError('EBADF', `${this.p.path} is open read-only`);
  }
  async stat(): Promise<Attr> {
    return pendingAttr(this.p, this.defaults, this.ino);
  }
  sync(): Promise<void> {
    return this.landed();
  }
  async close(): Promise<void> {
    fs.closeSync(this.fd);
  }
}

/**
 * A read-only handle on a file whose local changes another handle of this backend holds. Its
 * bytes stay that handle's staged file until this one closes, even when that handle closes
 * first (a writer's release can come after another process's open) and the name is then
 * replaced or removed: it is never among the open files a rename or unlink keeps a copy for.
 */
class LocalChangesReader implements BackendFile {
  readonly writable = false;
  private closed = false;
  constructor(private readonly f: GcsFile) {
    f.addReader();
  }
  read(buf: Buffer, length: number, position: number): Promise<number> {
    return this.f.read(buf, length, position);
  }
  async write(): Promise<number> {
    throw new VfsError('EBADF', `${this.f.path} is open read-only`);
  }
  async truncate(): Promise<void> {
    throw new VfsError('EBADF', `${this.f.path} is open read-only`);
  }
  stat(): Promise<Attr> {
    return this.f.stat();
  }
  async sync(): Promise<void> {}
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.f.dropReader();
  }
}
