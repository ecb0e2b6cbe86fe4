import fs from 'node:fs';
import nodePath from 'node:path';
import { randomUUID } from 'node:crypto';
import { CRC32C } from '@google-cloud/storage';
import { type Attr, type BackendFile, fromNodeError, VfsError } from '../../core/index.js';
import type { GcsRequests } from './client.js';
import { isNotFound, isPreconditionFailed, toVfsError } from './errors.js';
import { META, attrOf, nodeMetaEntries, type AttrDefaults, type ObjectInfo } from './metadata.js';
import type { GcsConflict } from './options.js';
import type { StagingFile, StagingFiles } from './staging-files.js';
import type { UploadQueue } from './upload-queue.js';

/** Bytes fetched per request when a whole object is downloaded into the staging file. */
const STAGE_FETCH_BYTES = 8 * 1024 * 1024;

/** What a GcsFile needs from the backend that opened it. */
export interface GcsFileHost {
  readonly req: GcsRequests;
  readonly attrDefaults: AttrDefaults;
  readonly stagingDir: string;
  /** where handles get their staging files (reused: staging-files.ts) */
  readonly stagingFiles: StagingFiles;
  readonly conflictsDir: string;
  /** durability: journal: close(2) queues the version here (durable in the spool) instead of uploading */
  readonly writeBack: UploadQueue | undefined;
  readonly inodes: { of(path: string): number };
  forget(f: GcsFile): void;
  reportConflict(c: GcsConflict): void;
  /** true if this mount removed generation `generation` of `key` itself (an unlink) */
  deletedHere(key: string, generation: bigint): boolean;
}

function nowNs(): bigint {
  return BigInt(Date.now()) * 1_000_000n;
}

function sys<T>(what: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw fromNodeError(err, what);
  }
}

/**
 * An open object. Reads are ranged GETs of the generation that was open()ed, so a reader sees
 * one consistent version even if another writer replaces the object meanwhile (and gets ESTALE
 * once that generation is gone). The first write or truncate copies the object into a local
 * staging file; from then on reads and writes use that file, and sync()/close() upload it as a
 * new generation with ifGenerationMatch/ifMetagenerationMatch on what was read. If another
 * writer got there first the upload is refused (412) and the staged file is kept under the
 * staging dir's conflicts/ area and reported (GcsConflict): the caller gets ESTALE, nothing is
 * lost. An upload that fails for good otherwise is kept the same way before its EIO is answered:
 * an error from sync/flush/close means the bytes are not in the bucket and are in conflicts/.
 */
export class GcsFile implements BackendFile {
  /** the view path; follows renames (the backend retargets it) */
  path: string;
  key: string;
  /** unlinked (or renamed over) while open: keeps working locally, never uploaded */
  unlinked = false;
  private base: ObjectInfo;
  private staged: StagingFile | undefined;
  private staging: Promise<void> | undefined;
  private dirty = false;
  /** local mtime, set by writes and utimens, until uploaded */
  private mtimeNs: bigint | undefined;
  private conflict: { error: VfsError; info: GcsConflict } | undefined;
  private closed = false;
  /** settles when close() has queued or uploaded the last version and given the handle up */
  private closeDone: Promise<void> | undefined;
  /** attributes set while dirty, to go with the next upload */
  private pendingMeta: Record<string, string> = {};
  /** bumped by every local change: an upload clears `dirty` only if none came while it ran */
  private changes = 0;
  private uploading: Promise<void> | undefined;
  /** LocalChangesReaders reading through this handle: the staged file outlives close() until they close */
  private readers = 0;
  /** what close() left for the last reader to do with the staged file */
  private releaseStaged: (() => void) | undefined;

  constructor(
    private readonly host: GcsFileHost,
    path: string,
    key: string,
    base: ObjectInfo,
    readonly writable: boolean,
  ) {
    this.path = path;
    this.key = key;
    this.base = base;
    this.ino = host.inodes.of(path);
  }

  /** the node's number, kept across renames and after an unlink (another node may take the path) */
  private readonly ino: number;

  /** True when this handle holds local changes other handles' stat() must see. */
  get hasLocalState(): boolean {
    return this.staged !== undefined || this.dirty;
  }

  get isDirty(): boolean {
    return this.dirty;
  }

  get generation(): bigint {
    return this.base.generation;
  }

  /** object name and generation while the handle reads the bucket's bytes (content caches key on it) */
  get version(): string | undefined {
    return this.hasLocalState || this.unlinked ? undefined : `${this.key}#${this.base.generation}`;
  }

  /**
   * close(2): upload now, so the program's close sees a conflict or failure (and data is
   * durable); with write-back (durability: journal), make the version durable in the spool and
   * queue its upload instead.
   */
  async flush(): Promise<void> {
    if (this.host.writeBack) await this.queueVersion(this.host.writeBack);
    else await this.sync();
  }

  async read(buf: Buffer, length: number, position: number): Promise<number> {
    if (this.staging) await this.staging;
    if (this.staged) {
      const fd = this.staged.fd;
      return sys(`read ${this.path}`, () => fs.readSync(fd, buf, 0, length, position));
    }
    // straight from the client's buffers into the caller's: one copy
    return this.readParts(position, length, (d, at) => d.copy(buf, at - position));
  }

  /** Bytes as the client receives them (BackendFile.readParts): the read-ahead keeps its pieces. */
  async readParts(position: number, length: number, onData: (data: Buffer, at: number) => void): Promise<number> {
    let done = 0;
    for (;;) {
      if (this.staging) await this.staging;
      const from = position + done;
      if (done >= length) return done;
      if (this.staged) {
        const rest = Buffer.allocUnsafe(length - done);
        const fd = this.staged.fd;
        const n = sys(`read ${this.path}`, () => fs.readSync(fd, rest, 0, rest.length, from));
        if (n > 0) onData(rest.subarray(0, n), from);
        return done + n;
      }
      const end = Math.min(this.base.size, position + length);
      if (from >= end) return done;
      const key = this.key;
      const generation = this.base.generation;
      try {
        await this.fetch(from, end - 1, (d, at) => {
          done += d.length;
          onData(d, at);
        });
        return done;
      } catch (err) {
        // A read (read-ahead, say) on its way while this daemon unlinked or renamed the object:
        // the bytes are now in the local copy, or under the new name; read the rest there.
        const moved = this.staged !== undefined || this.staging !== undefined || key !== this.key || generation !== this.base.generation;
        if (!(err instanceof VfsError && err.code === 'ESTALE' && moved)) throw err;
      }
    }
  }

  async write(buf: Buffer, length: number, position: number): Promise<number> {
    if (!this.writable) throw new VfsError('EBADF', `${this.path} is open read-only in the backend`);
    await this.ensureStaged(true);
    const staged = this.staged as StagingFile;
    const n = sys(`write ${this.path} (staging file)`, () => fs.writeSync(staged.fd, buf, 0, length, position));
    if (position + n > staged.size) staged.size = position + n;
    this.dirty = true;
    this.changes++;
    this.mtimeNs = nowNs();
    return n;
  }

  async truncate(size: number): Promise<void> {
    if (!this.writable) throw new VfsError('EBADF', `${this.path} is open read-only in the backend`);
    await this.ensureStaged(size > 0);
    const staged = this.staged as StagingFile;
    sys(`truncate ${this.path} (staging file)`, () => fs.ftruncateSync(staged.fd, size));
    staged.size = size;
    this.dirty = true;
    this.changes++;
    this.mtimeNs = nowNs();
  }

  async stat(): Promise<Attr> {
    const base = Object.keys(this.pendingMeta).length ? { ...this.base, metadata: { ...this.base.metadata, ...this.pendingMeta } } : this.base;
    const a = attrOf('file', this.path, base, this.host.attrDefaults, this.ino);
    if (this.unlinked) a.nlink = 0; // fstat of a file unlinked while open, as on a disk
    if (this.staged) {
      a.size = this.staged.size;
      a.blocks = Math.ceil(a.size / 512);
    }
    if (this.mtimeNs !== undefined) {
      a.mtimeNs = this.mtimeNs;
      if (a.ctimeNs < this.mtimeNs) a.ctimeNs = this.mtimeNs;
    }
    return a;
  }

  /** fsync: in the bucket, in both modes (with write-back: queued, then waited for). */
  async sync(): Promise<void> {
    if (this.conflict) throw this.conflict.error;
    if (this.staging) await this.staging;
    const q = this.host.writeBack;
    if (q) {
      await this.queueVersion(q);
      await q.waitPath(this.path);
      return;
    }
    await this.uploadNow();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // Still listed at its path until the last version is queued (or up): an unlink, rename or
    // chmod of the path meanwhile must see it (wait for it, mark it), or the version goes up
    // on a generation this mount itself removed or patched: a conflict with nobody.
    let closeDone!: () => void;
    this.closeDone = new Promise<void>((r) => (closeDone = r));
    let keep = false;
    try {
      if (this.staging) await this.staging.catch(() => undefined);
      if (this.conflict) {
        keep = true;
        throw this.conflict.error;
      }
      if (this.dirty && !this.unlinked) {
        try {
          if (this.host.writeBack) await this.queueVersion(this.host.writeBack);
          else await this.uploadNow();
        } catch (err) {
          // Whatever went wrong, the bytes stay: a conflict has already been set aside; any
          // other failure at last close is set aside the same way, as 'upload-failed'.
          keep = true;
          if (!this.conflict) this.setAside('upload-failed', undefined);
          throw err;
        }
      }
    } finally {
      if (this.staged) {
        const staged = this.staged;
        const release = () => {
          this.staged = undefined;
          if (keep) fs.closeSync(staged.fd);
          else this.host.stagingFiles.give(staged);
        };
        // A reader another open got while this handle held local changes reads this staged file:
        // without it, it would read the bucket's generation, which a rename over the name or
        // the next version deletes (ESTALE), or which is not these bytes yet (durability journal).
        if (this.readers > 0) this.releaseStaged = release;
        else release();
      }
      this.host.forget(this);
      closeDone();
    }
  }

  /** close() has begun: the handle takes no more changes (its last version is on its way). */
  get isClosed(): boolean {
    return this.closed;
  }

  /** Resolves once no upload or queueing of this handle's changes is under way (whatever its outcome). */
  async idle(): Promise<void> {
    while (this.uploading) await this.uploading.catch(() => undefined);
    if (this.closeDone) await this.closeDone;
  }

  /** A read-only handle on this one's local changes (LocalChangesReader) opened; its close calls dropReader. */
  addReader(): void {
    this.readers++;
  }

  dropReader(): void {
    if (--this.readers > 0 || !this.releaseStaged) return;
    const release = this.releaseStaged;
    this.releaseStaged = undefined;
    release();
  }

  // ---- used by the backend -------------------------------------------------------------------

  /** The object was renamed: same bytes, new name and generation. */
  retarget(path: string, key: string, info: ObjectInfo): void {
    this.path = path;
    this.key = key;
    if (!this.dirty) this.base = info;
    else this.base = { ...info, size: this.base.size };
  }

  /**
   * Our own metadata patch (chmod, utimens...) of generation `patched`, answered with `info`.
   * The patch was conditioned on that generation, so when this handle is based on it, the
   * response is the object it is now based on, generation included: GCS keeps the generation on
   * a patch, but some compatible servers make a new one, and keeping ours would make the
   * handle's own upload look like a change by another host (ESTALE at close).
   */
  noteMetadata(info: ObjectInfo, patched: bigint): void {
    if (patched !== this.base.generation) return;
    this.base = { ...this.base, generation: info.generation, metageneration: info.metageneration, metadata: info.metadata, updatedNs: info.updatedNs };
  }

  /** chmod/chown/utimens while this handle has changes to upload: they go with the upload. */
  addPendingMeta(entries: Record<string, string>, mtimeNs: bigint | undefined): void {
    this.pendingMeta = { ...this.pendingMeta, ...entries };
    if (mtimeNs !== undefined) this.mtimeNs = mtimeNs;
    this.changes++;
  }

  setMtime(ns: bigint): void {
    if (this.hasLocalState) this.mtimeNs = ns;
  }

  /** The staged file, when this handle has local content (what a read through it returns). */
  get stagedFile(): string | undefined {
    return this.staged?.file;
  }

  /** Copy the bytes local before the object is deleted or replaced, so the handle keeps reading them. */
  async keepLocalCopy(): Promise<void> {
    await this.ensureStaged(true);
  }

  // ---- internals -----------------------------------------------------------------------------

  /** Bytes [start, end] of the generation this handle reads, as they arrive; ESTALE once it is gone. */
  private async fetch(start: number, end: number, onData: (d: Buffer, at: number) => void): Promise<void> {
    try {
      await this.host.req.readRangeParts(this.key, this.base.generation, start, end, onData);
    } catch (err) {
      if (isNotFound(err)) {
        throw new VfsError('ESTALE', `${this.path}: generation ${this.base.generation} was replaced or deleted in the bucket since it was opened`);
      }
      throw toVfsError(err, `read ${this.path}`);
    }
  }

  private ensureStaged(keepContent: boolean): Promise<void> {
    if (this.staged) return Promise.resolve();
    this.staging ??= this.stage(keepContent).finally(() => (this.staging = undefined));
    return this.staging;
  }

  /** Take a staging file; with `keepContent`, fill it with the object's bytes first. */
  private async stage(keepContent: boolean): Promise<void> {
    const staged = await this.host.stagingFiles.take(this.path);
    try {
      const size = keepContent ? this.base.size : 0;
      for (let off = 0; off < size; off += STAGE_FETCH_BYTES) {
        await this.fetch(off, Math.min(size, off + STAGE_FETCH_BYTES) - 1, (d, at) => {
          sys(`stage ${this.path}`, () => fs.writeSync(staged.fd, d, 0, d.length, at));
          if (at + d.length > staged.size) staged.size = at + d.length;
        });
      }
    } catch (err) {
      this.host.stagingFiles.give(staged);
      throw err;
    }
    this.staged = staged;
  }

  /**
   * durability journal, a file the caches know is new: not created in the bucket at open. Its
   * empty content is staged and its create made durable in the spool (a crash keeps the create
   * the journal recorded), held back from upload: the version its close queues replaces it.
   */
  async startNew(q: UploadQueue): Promise<void> {
    await this.ensureStaged(false);
    // the mtime it shows now (its create's, which the journal recorded) is the one its close
    // uploads, unless a write or utimens changes it: not the close's time, which nothing records
    this.mtimeNs ??= (await this.stat()).mtimeNs;
    this.dirty = true;
    this.changes++;
    await q.add({ key: this.key, path: this.path, source: this.staged as StagingFile, size: 0, metadata: this.base.metadata, baseGeneration: 0n, baseMetageneration: 0n, hold: true });
  }

  /** chmod/chown/utimens went into the queued version this handle's close made. */
  noteAmended(entries: Record<string, string>): void {
    this.base = { ...this.base, metadata: { ...this.base.metadata, ...entries } };
  }

  /** Renamed in the upload queue (its versions never reached the bucket): same base, new name. */
  moveQueued(path: string, key: string): void {
    this.path = path;
    this.key = key;
    this.base = { ...this.base, name: key };
  }

  /** A version landed from the upload queue: a handle based on the one it replaced is now based on it. */
  noteUploaded(replaced: bigint, info: ObjectInfo): void {
    if (this.base.generation !== replaced) return;
    this.base = { ...this.base, generation: info.generation, metageneration: info.metageneration, updatedNs: info.updatedNs, ...(info.crc32c ? { crc32c: info.crc32c } : {}) };
  }

  /**
   * Write-back: the staged bytes, with the attributes that go with them, into the spool (durable
   * when this returns); the handle stays based on the generation it read until the queue says
   * the version landed (noteUploaded). One at a time per handle, as uploads are.
   */
  private async queueVersion(q: UploadQueue): Promise<void> {
    while (this.uploading) await this.uploading.catch(() => undefined);
    if (this.conflict) throw this.conflict.error;
    if (!this.dirty || this.unlinked) return;
    this.uploading = (async () => {
      const staged = this.staged as StagingFile;
      const at = this.changes;
      const size = staged.size;
      const metadata = { ...this.base.metadata, ...this.pendingMeta, ...nodeMetaEntries({ mtimeNs: this.mtimeNs ?? nowNs() }) };
      await q.add({
        key: this.key,
        path: this.path,
        source: staged,
        size,
        metadata,
        ...(this.base.contentType ? { contentType: this.base.contentType } : {}),
        baseGeneration: this.base.generation,
        baseMetageneration: this.base.metageneration,
      });
      // (its change time is the version's, as the queue shows it: pjdfstest open/00.t:44)
      this.base = { ...this.base, size, metadata, updatedNs: nowNs() };
      if (this.changes === at) {
        this.dirty = false;
        this.mtimeNs = undefined;
        this.pendingMeta = {};
      }
    })().finally(() => (this.uploading = undefined));
    await this.uploading;
  }

  /** One upload at a time (fsync and close(2) of two handles may ask together), if still dirty. */
  private async uploadNow(): Promise<void> {
    while (this.uploading) await this.uploading.catch(() => undefined);
    if (this.conflict) throw this.conflict.error;
    if (!this.dirty || this.unlinked) return;
    this.uploading = this.upload().finally(() => (this.uploading = undefined));
    await this.uploading;
  }

  private async upload(): Promise<void> {
    const staged = this.staged as StagingFile;
    const at = this.changes;
    const size = staged.size;
    const metadata = { ...this.base.metadata, ...this.pendingMeta, ...nodeMetaEntries({ mtimeNs: this.mtimeNs ?? nowNs() }) };
    const spec = {
      ifGenerationMatch: this.base.generation,
      ...(this.base.generation > 0n ? { ifMetagenerationMatch: this.base.metageneration } : {}),
      ...(this.base.contentType ? { contentType: this.base.contentType } : {}),
      metadata,
    };
    let info: ObjectInfo;
    try {
      info = await this.host.req.uploadFile(this.key, staged.file, size, spec);
    } catch (err) {
      if (isPreconditionFailed(err)) {
        // 412: either another writer changed the object, or an earlier attempt of this very
        // upload succeeded and only its response was lost. The second case leaves exactly our
        // bytes and our metadata (mtime to the nanosecond) in the bucket.
        const cur = await this.host.req.head(this.key);
        if (cur && (await this.isOurs(cur, size, metadata))) info = cur;
        else if (!cur && this.base.generation > 0n && this.host.deletedHere(this.key, this.base.generation)) {
          // unlinked through this mount while the upload ran (see UploadQueue.run): gone, as asked
          this.unlinked = true;
          this.dirty = false;
          return;
        } else throw this.setAside('changed-remotely', cur);
      } else {
        // The upload failed for good (GCS unreachable through every retry, access refused...).
        // The attempts ran one after another and the last one has ended, so none can land
        // later. The last may have landed with its answer lost, though: if the bucket answers
        // and holds our bytes, that is a success. Otherwise the bytes go to conflicts/ before
        // the error is answered, and this handle never uploads again: an error from close or
        // fsync always means "not in the bucket, kept aside".
        const landed = await this.landed(size, metadata);
        if (landed) info = landed;
        else throw this.setAside('upload-failed', undefined, toVfsError(err, `upload ${this.path}`));
      }
    }
    this.base = info;
    if (this.changes === at) {
      // nothing changed while the upload ran (otherwise the next sync/close uploads again)
      this.dirty = false;
      this.mtimeNs = undefined;
      this.pendingMeta = {};
    }
  }

  /** The live object if it is this upload's (one look, no retries), else undefined. */
  private async landed(size: number, metadata: Record<string, string>): Promise<ObjectInfo | undefined> {
    try {
      const cur = await this.host.req.headOnce(this.key);
      return cur && cur.generation !== this.base.generation && (await this.isOurs(cur, size, metadata)) ? cur : undefined;
    } catch {
      return undefined; // still unreachable: no attempt of ours is left that could land
    }
  }

  private async isOurs(cur: ObjectInfo, size: number, metadata: Record<string, string>): Promise<boolean> {
    if (cur.size !== size || cur.metadata[META.mtime] !== metadata[META.mtime] || !cur.crc32c) return false;
    const local = await CRC32C.fromFile((this.staged as { file: string }).file);
    return local.toString() === cur.crc32c;
  }

  /** Move the staged file to the conflicts area, report it, and remember the error. */
  private setAside(reason: GcsConflict['reason'], cur: ObjectInfo | undefined, failure?: VfsError): VfsError {
    const staged = this.staged as StagingFile;
    const dir = this.host.conflictsDir;
    const flat = this.path.slice(1).replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 100);
    const dest = nodePath.join(dir, `${new Date().toISOString().replace(/[:.]/g, '-')}-${flat}-${randomUUID().slice(0, 8)}`);
    try {
      fs.mkdirSync(dir, { recursive: true });
      fs.renameSync(staged.file, dest); // the open fd follows the file
      staged.file = dest;
    } catch {
      // Could not move it: it stays where it is, which is just as safe; report that path.
    }
    const info: GcsConflict = {
      reason,
      path: this.path,
      objectName: this.key,
      expectedGeneration: this.base.generation.toString(),
      ...(cur ? { currentGeneration: cur.generation.toString() } : {}),
      localFile: staged.file,
      size: staged.size,
      time: new Date(),
    };
    const error =
      reason === 'changed-remotely'
        ? new VfsError(
            'ESTALE',
            `${this.path}: not uploaded: the object changed in the bucket since it was read (generation ${this.base.generation} -> ${cur ? cur.generation : 'deleted'}); the local version is kept at ${staged.file}`,
          )
        : new VfsError(failure?.code ?? 'EIO', `${this.path}: not uploaded (${failure?.reason ?? 'the upload failed'}); the local version is kept at ${staged.file}`, {
            ...(failure?.cause !== undefined ? { cause: failure.cause } : {}),
            level: failure?.level ?? 'warn',
          });
    this.conflict = { error, info };
    this.host.reportConflict(info);
    return error;
  }
}
