import fs from 'node:fs';
import nodePath from 'node:path';
import { randomUUID } from 'node:crypto';
import { CRC32C } from '@google-cloud/storage';
import { DEFAULTS } from '../../config/index.js';
import { fsyncPath, isWithin, VfsError } from '../../core/index.js';
import type { GcsRequests } from './client.js';
import { httpStatus, isPreconditionFailed, toVfsError } from './errors.js';
import { META, type ObjectInfo } from './metadata.js';
import type { GcsConflict } from './options.js';
import { SpoolLog, type SpoolBytes, type SpoolEntry } from './spool-log.js';
import { readRange } from './read-range.js';
import type { StagingFile } from './staging-files.js';

/*
 * The upload queue of `durability: journal` (src/backend/gcs/README.md, "Durability").
 *
 * A version is durable once its record is in the spool's log (spool-log.ts: its description
 * and bytes, one fdatasync shared by the closes of one batch of FUSE requests); close(2) returns
 * then. Uploads run in the background, `concurrency` at a time. The versions of one object form
 * a chain: only its oldest is uploaded, on the generation the one before it produced, so
 * versions land in order and a version is never overtaken by an older one. A landed version's
 * successor is rebased (a durable record naming the one that landed) before it is uploaded,
 * so a crash at any point resumes at the right version (an upload that landed with its answer
 * lost is recognized by its bytes, crc32c and mtime, as at close in bucket mode).
 */

interface Queued {
  id: string;
  entry: SpoolEntry;
  /** where the bytes are on disk */
  bytes: SpoolBytes;
  segment: number;
  /** a big version's own data file */
  ownFile?: string;
  /** the bytes, kept from the close for the upload (within spoolMemoryBytes) */
  buf?: Buffer;
  running: boolean;
  /** a new file's create, held back from upload until its handle's close replaces it (or someone waits for it, or spoolHoldMs passed) */
  hold?: NodeJS.Timeout;
  /** settled when the version is in the bucket (or set aside: rejected with the ESTALE) */
  done: Promise<void>;
  resolve: () => void;
  reject: (e: VfsError) => void;
  failures: number;
  lastError?: string;
  /** a rename or attribute record of this version not synced when made: synced before its upload starts */
  syncMark?: number;
}

export interface UploadQueueHost {
  readonly req: GcsRequests;
  readonly conflictsDir: string;
  reportConflict(c: GcsConflict): void;
  /** a version landed: open files based on `replaced` move to `info`; `bytes`: its content when still in memory */
  uploaded(path: string, replaced: bigint, info: ObjectInfo, bytes?: Buffer): void;
  /** true if this mount removed generation `generation` of `key` itself (an unlink) */
  deletedHere(key: string, generation: bigint): boolean;
}

export interface UploadQueueStats {
  files: number;
  bytes: number;
  /** seconds since the oldest queued version was closed */
  oldestAgeSec: number;
  inFlight: number;
  /** versions set aside as conflicts since start */
  conflicts: number;
  /** failed attempts being retried (GCS unreachable...), and the last error */
  retrying: number;
  lastError?: string;
}

/** What a pending version looks like to stat/open (read-your-writes). */
export interface PendingVersion {
  /** the version's id in the spool (waitVersion) */
  id: string;
  path: string;
  key: string;
  size: number;
  metadata: Record<string, string>;
  contentType?: string;
  /** where its bytes are (`size` of them) */
  bytes: SpoolBytes;
  enqueuedAt: number;
}

export class UploadQueue {
  private readonly chains = new Map<string, Queued[]>();
  private readonly ready: Queued[] = [];
  private inFlight = 0;
  private seq = 0;
  private conflicts = 0;
  /** no new versions (the backend closed) */
  private closed = false;
  /** no uploads started any more, the log closed */
  private stopped = false;
  /** the unmount drains the queue after the backend's close (app/mount.ts): close() does not stop it then */
  private drainFollows = false;
  private pumpQueued = false;
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly log: SpoolLog;
  /** bytes of queued versions kept in memory */
  private memBytes = 0;

  constructor(
    private readonly host: UploadQueueHost,
    readonly dir: string,
    private readonly concurrency: number,
    private readonly retryMs: { initial: number; max: number },
  ) {
    this.log = new SpoolLog(dir, DEFAULTS.gcs.spoolSegmentBytes, DEFAULTS.gcs.spoolZeroAheadBytes);
  }

  /**
   * Versions a crash (or an unmount that did not wait) left in the spool, queued again in the
   * order they were closed. A record a crash cut was never acknowledged: dropped.
   */
  resume(): number {
    const versions = this.log.open();
    for (const v of versions) this.push(v.id, v.entry, v.bytes, v.segment, v.ownFile);
    this.pump();
    return versions.length;
  }

  /**
   * Make a version durable in the spool and queue its upload. `source` (an open staging file,
   * `size` bytes long) is read now (the caller holds the bytes still); `base` is what the
   * caller's handle was based on, used when no earlier version of the object is queued.
   */
  async add(v: { key: string; path: string; source: StagingFile; size: number; metadata: Record<string, string>; contentType?: string; baseGeneration: bigint; baseMetageneration: bigint; hold?: boolean }): Promise<void> {
    if (this.closed) throw new VfsError('EIO', `${v.path}: the upload queue is closed (unmounting)`);
    const id = `${Date.now().toString().padStart(14, '0')}-${(this.seq++).toString().padStart(9, '0')}-${randomUUID().slice(0, 8)}`;
    const entry: SpoolEntry = {
      key: v.key,
      path: v.path,
      size: v.size,
      metadata: v.metadata,
      ...(v.contentType ? { contentType: v.contentType } : {}),
      baseGeneration: v.baseGeneration.toString(),
      baseMetageneration: v.baseMetageneration.toString(),
      enqueuedAt: Date.now(),
    };
    let at: { bytes: SpoolBytes; segment: number };
    let buf: Buffer | undefined;
    let ownFile: string | undefined;
    try {
      if (v.size <= DEFAULTS.gcs.spoolInlineBytes) {
        // a copy at once (the handle may be written again right after close(2) returns), into
        // the log: synchronous, a small read and append on the event loop
        buf = readRange(v.source.fd, v.size, 0);
        entry.size = buf.length;
        at = this.log.appendVersion(id, entry, buf);
      } else {
        ownFile = nodePath.join(this.dir, `${id}.data`);
        // a big file: copied and synced on the thread pool, never on the loop every request waits for
        await fs.promises.copyFile(v.source.file, ownFile, fs.constants.COPYFILE_FICLONE);
        await fsyncPath(ownFile);
        await fsyncPath(this.dir);
        at = this.log.appendVersion(id, entry, undefined, ownFile);
      }
      // a new file's create (held) is written to the log, which a daemon's death keeps, and
      // synced with the close that replaces it (or the next one): the durability promise is
      // close's, and the create's record is older in the same log
      if (!v.hold) await this.log.durable();
    } catch (err) {
      if (ownFile) fs.rmSync(ownFile, { force: true });
      throw new VfsError('EIO', `${v.path}: the version could not be made durable in the upload spool ${this.dir}: ${(err as Error).message}`);
    }
    const chain = this.chains.get(v.key);
    const prev = chain?.[chain.length - 1];
    const q = this.push(id, entry, at.bytes, at.segment, ownFile, buf, v.hold ? DEFAULTS.gcs.spoolHoldMs : DEFAULTS.gcs.uploadDelayMs);
    // A version not started yet that this one replaces whole is not uploaded at all (bash's
    // `echo x > f` closes twice: once empty, once written): the newer one takes its place.
    if (prev && chain && !prev.running && prev.failures === 0) this.supersede(chain, prev, q);
    this.pumpSoon();
  }

  /** Start uploads after the current request is answered: their setup is CPU on this thread. */
  private pumpSoon(): void {
    if (this.pumpQueued) return;
    this.pumpQueued = true;
    setImmediate(() => {
      this.pumpQueued = false;
      this.pump();
    });
  }

  private supersede(chain: Queued[], prev: Queued, q: Queued): void {
    clearTimeout(prev.hold);
    delete prev.hold;
    const at = chain.indexOf(prev);
    chain.splice(at, 1);
    const r = this.ready.indexOf(prev);
    if (r >= 0) this.ready.splice(r, 1);
    if (at === 0) {
      // q is the head now, on prev's base; the record says prev is done (synced with the next
      // close or rebase: until then a crash uploads both, in order)
      q.entry.baseGeneration = prev.entry.baseGeneration ?? '0';
      if (prev.entry.baseMetageneration !== undefined) q.entry.baseMetageneration = prev.entry.baseMetageneration;
      else delete q.entry.baseMetageneration;
      this.log.appendBase(q.id, q.entry.baseGeneration, q.entry.baseMetageneration, prev.id);
      if (!q.hold) this.ready.push(q);
    }
    this.release(prev);
    q.done.then(prev.resolve, prev.reject);
  }

  /** The newest queued version of `path`, if any (what stat and reads must show). */
  pending(path: string): PendingVersion | undefined {
    for (const chain of this.chains.values()) {
      const last = chain[chain.length - 1];
      if (last && last.entry.path === path) return this.view(last);
    }
    return undefined;
  }

  /** Faster lookup by object name. */
  pendingKey(key: string): PendingVersion | undefined {
    const chain = this.chains.get(key);
    const last = chain?.[chain.length - 1];
    return last ? this.view(last) : undefined;
  }

  get isEmpty(): boolean {
    return this.chains.size === 0;
  }

  /** Wait until every version of `path` queued now is uploaded; rejects with a conflict's ESTALE. */
  async waitPath(path: string): Promise<void> {
    const waits: Promise<void>[] = [];
    for (const chain of this.chains.values()) for (const q of chain) if (q.entry.path === path) waits.push(this.waitFor(q));
    await Promise.all(waits);
  }

  /**
   * Wait until version `id` and the versions queued after it for the same object are uploaded,
   * whatever name they have now (a read-only handle's fsync: the file may have been renamed in
   * the queue since it was opened, see move); rejects with a conflict's ESTALE. A version no
   * longer queued has landed.
   */
  async waitVersion(id: string): Promise<void> {
    for (const chain of this.chains.values()) {
      const at = chain.findIndex((q) => q.id === id);
      if (at >= 0) {
        await Promise.all(chain.slice(at).map((q) => this.waitFor(q)));
        return;
      }
    }
  }

  /** Wait (whatever the outcome) for the versions at or under `path`: a namespace change there must not overtake them. */
  async settleUnder(path: string): Promise<void> {
    if (this.chains.size === 0) return;
    const waits: Promise<void>[] = [];
    for (const chain of this.chains.values()) for (const q of chain) if (isWithin(q.entry.path, path)) waits.push(this.waitFor(q));
    await Promise.allSettled(waits);
  }

  /** Wait for everything queued, up to `timeoutMs` (resolves true when empty). */
  async drain(timeoutMs = Infinity, onProgress?: (s: UploadQueueStats) => void, everyMs = 1000): Promise<boolean> {
    const until = Date.now() + timeoutMs;
    let last = 0;
    while (!this.isEmpty) {
      if (Date.now() >= until || this.stopped) return false;
      if (onProgress && Date.now() - last >= everyMs) {
        onProgress(this.stats());
        last = Date.now();
      }
      const all: Promise<void>[] = [];
      for (const chain of this.chains.values()) for (const q of chain) all.push(this.waitFor(q));
      await Promise.race([Promise.allSettled(all), sleep(Math.min(everyMs, Math.max(0, until - Date.now())))]);
    }
    // the unmount's drain, after the backend's close: done now (the log closes, its segments go)
    if (this.closed) this.stop();
    return true;
  }

  /**
   * durability journal, chmod/chown/utimens of a file whose newest version has not started
   * uploading: the change goes into that version, no wait for the upload and no patch after
   * it. Undefined when it runs or was tried (the caller waits and patches).
   *
   * The record is in the spool's log when this returns: the daemon's death keeps it (the page
   * cache does), and the next close's sync or the version's upload, whichever is first, puts it
   * on disk (no fdatasync of its own: a local file system makes a chmod or rename durable at
   * the next fsync too, not before it returns). The upload never starts before it is synced,
   * so a power loss cannot leave a bucket ahead of the spool.
   */
  amendMetadata(key: string, entries: Record<string, string>): PendingVersion | undefined {
    const chain = this.chains.get(key);
    const last = chain?.[chain.length - 1];
    if (!last || last.running || last.failures > 0) return undefined;
    const metadata = { ...last.entry.metadata, ...entries };
    last.syncMark = this.log.appendMetadata(last.id, metadata);
    last.entry.metadata = metadata;
    return this.view(last);
  }

  /**
   * durability journal, a rename of a file that exists only as queued versions none of which
   * was tried (created here, never in the bucket: git's tmp_obj_* -> objects/xx/...): the
   * versions take the new name, the first based on `replaces` (what the rename replaces in
   * the bucket, or nothing), in the spool's log when this returns (as amendMetadata). No copy,
   * no delete, no wait. False when that does not hold (one runs or ran, the destination has
   * versions queued): the caller waits for the uploads and renames in the bucket.
   */
  move(fromKey: string, toKey: string, toPath: string, replaces: { generation: bigint; metageneration: bigint } | undefined): boolean {
    const chain = this.chains.get(fromKey);
    if (!chain?.length || this.chains.has(toKey) || chain.some((q) => q.running || q.failures > 0)) return false;
    const head = chain[0] as Queued;
    if ((head.entry.baseGeneration ?? '0') !== '0') return false;
    const baseGeneration = (replaces?.generation ?? 0n).toString();
    const baseMetageneration = (replaces?.metageneration ?? 0n).toString();
    const mark = this.log.appendRename(
      chain.map((q) => q.id),
      toKey,
      toPath,
      baseGeneration,
      baseMetageneration,
    );
    for (const q of chain) {
      q.entry.key = toKey;
      q.entry.path = toPath;
      q.syncMark = mark;
    }
    head.entry.baseGeneration = baseGeneration;
    head.entry.baseMetageneration = baseMetageneration;
    this.chains.delete(fromKey);
    this.chains.set(toKey, chain);
    return true;
  }

  /**
   * The queued versions with object names under `prefix` (a directory's `dir/`): listings show
   * them, as a new file's create is not in the bucket until its upload.
   */
  pendingIn(prefix: string): PendingVersion[] {
    const out: PendingVersion[] = [];
    for (const [key, chain] of this.chains) {
      const last = chain[chain.length - 1];
      if (last && key.startsWith(prefix)) out.push(this.view(last));
    }
    return out;
  }

  stats(): UploadQueueStats {
    let files = 0;
    let bytes = 0;
    let oldest = Infinity;
    let retrying = 0;
    let lastError: string | undefined;
    for (const chain of this.chains.values()) {
      for (const q of chain) {
        files++;
        bytes += q.entry.size;
        oldest = Math.min(oldest, q.entry.enqueuedAt);
        if (q.failures > 0) {
          retrying++;
          lastError = q.lastError;
        }
      }
    }
    return {
      files,
      bytes,
      oldestAgeSec: files ? Math.max(0, (Date.now() - oldest) / 1000) : 0,
      inFlight: this.inFlight,
      conflicts: this.conflicts,
      retrying,
      ...(lastError ? { lastError } : {}),
    };
  }

  /**
   * The unmount drains the queue (or says it leaves it: stop()) after the backend is closed:
   * the uploads must go on after close() until then. A closed version waits uploadDelayMs
   * before it starts, so at an unmount some always wait; they used to stay in the spool, and
   * the drain waited for them for ever.
   */
  expectDrain(): void {
    this.drainFollows = true;
  }

  /** No new versions; unless a drain follows (expectDrain) and something is queued, stop() too. */
  close(): void {
    this.closed = true;
    if (this.drainFollows && !this.isEmpty && !this.stopped) return;
    this.stop();
  }

  /** Stop starting uploads (those running finish); what is left stays in the spool for the next start. */
  stop(): void {
    if (this.stopped) return;
    this.closed = true;
    this.stopped = true;
    this.log.close();
    for (const t of this.timers) clearTimeout(t);
    for (const chain of this.chains.values()) for (const q of chain) clearTimeout(q.hold);
    this.timers.clear();
  }

  // ---- internals -----------------------------------------------------------------------------

  /** Someone waits for `q` (fsync, a namespace change, unmount): a held create goes now. */
  private waitFor(q: Queued): Promise<void> {
    if (q.hold) this.unhold(q);
    return q.done;
  }

  private unhold(q: Queued): void {
    if (!q.hold) return;
    clearTimeout(q.hold);
    delete q.hold;
    const chain = this.chains.get(q.entry.key);
    if (chain?.[0] === q && !q.running && !this.ready.includes(q)) {
      this.ready.push(q);
      this.pumpSoon();
    }
  }

  private view(q: Queued): PendingVersion {
    const e = q.entry;
    return { id: q.id, path: e.path, key: e.key, size: e.size, metadata: e.metadata, ...(e.contentType ? { contentType: e.contentType } : {}), bytes: q.bytes, enqueuedAt: e.enqueuedAt };
  }

  /** `holdMs`: not uploaded before then unless waited for (a new file's create; a closed version's short delay, see uploadDelayMs) */
  private push(id: string, entry: SpoolEntry, bytes: SpoolBytes, segment: number, ownFile?: string, buf?: Buffer, holdMs = 0): Queued {
    let resolve!: () => void;
    let reject!: (e: VfsError) => void;
    const done = new Promise<void>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    done.catch(() => undefined); // a conflict is reported where it matters (fsync); never unhandled
    const keep = buf && this.memBytes + buf.length <= DEFAULTS.gcs.spoolMemoryBytes ? buf : undefined;
    if (keep) this.memBytes += keep.length;
    const q: Queued = { id, entry, bytes, segment, ...(ownFile ? { ownFile } : {}), ...(keep ? { buf: keep } : {}), running: false, done, resolve, reject, failures: 0 };
    let chain = this.chains.get(entry.key);
    if (!chain) this.chains.set(entry.key, (chain = []));
    if (chain.length > 0) {
      // based on the version before it, whatever the handle thought: set when that one lands
      delete entry.baseGeneration;
      delete entry.baseMetageneration;
    }
    chain.push(q);
    if (holdMs > 0) {
      q.hold = setTimeout(() => this.unhold(q), holdMs);
      q.hold.unref();
    } else if (chain.length === 1) this.ready.push(q);
    return q;
  }

  private pump(): void {
    while (!this.stopped && this.inFlight < this.concurrency && this.ready.length) {
      const q = this.ready.shift() as Queued;
      this.inFlight++;
      q.running = true;
      void this.run(q).finally(() => {
        this.inFlight--;
        q.running = false;
        this.pump();
      });
    }
  }

  private async run(q: Queued): Promise<void> {
    const e = q.entry;
    const base = BigInt(e.baseGeneration ?? '0');
    const spec = {
      ifGenerationMatch: base,
      ...(base > 0n && e.baseMetageneration !== undefined ? { ifMetagenerationMatch: BigInt(e.baseMetageneration) } : {}),
      ...(e.contentType ? { contentType: e.contentType } : {}),
      metadata: e.metadata,
    };
    let info: ObjectInfo | undefined;
    let conflict: ObjectInfo | null = null;
    try {
      // its rename or attribute record first: the bucket never gets ahead of the spool
      if (q.syncMark !== undefined && !this.log.isSynced(q.syncMark)) await this.log.durable();
      info = q.ownFile ? await this.host.req.uploadFile(e.key, q.ownFile, e.size, spec) : await this.host.req.uploadBuffer(e.key, this.bytesOf(q), spec);
    } catch (err) {
      if (isPreconditionFailed(err)) {
        // another writer changed the object, or an earlier attempt of this upload (before a
        // crash, or with its answer lost) landed: then the bucket holds exactly these bytes
        const cur = await this.host.req.head(e.key).catch(() => undefined);
        if (cur && (await isOurs(cur, q, () => this.bytesOf(q)))) info = cur;
        else if (!cur && base > 0n && this.host.deletedHere(e.key, base)) {
          // this mount unlinked the generation the version was based on: a release that came
          // in after the program's unlink (carrying a chmod or utime another process made
          // after the close) is a version of a file that is gone, not a conflict with anyone
          this.finish(q);
          q.resolve();
          return;
        } else conflict = cur ?? null;
      } else if (httpStatus(err) === 400) {
        // a request GCS refuses whatever the retry (a name or a value it does not take): kept
        // aside as a refused close is in bucket mode, not retried for ever (an unmount waited on it)
        this.setAside(q, base, undefined, toVfsError(err, `upload ${e.path}`));
        return;
      } else {
        // GCS unreachable through every retry, or refused: the version is safe in the spool;
        // try again later, with backoff, without giving up
        q.failures++;
        q.lastError = toVfsError(err, `upload ${e.path}`).message;
        const delay = Math.min(this.retryMs.max, this.retryMs.initial * 2 ** Math.min(q.failures, 20));
        const t = setTimeout(() => {
          this.timers.delete(t);
          this.ready.unshift(q);
          this.pump();
        }, delay);
        this.timers.add(t);
        return;
      }
    }
    if (info) {
      await this.landed(q, base, info);
      return;
    }
    this.setAside(q, base, conflict ?? undefined);
  }

  /** The version is in the bucket: its successor is based on it (durably) before it is uploaded. */
  private async landed(q: Queued, base: bigint, info: ObjectInfo): Promise<void> {
    const chain = this.chains.get(q.entry.key) as Queued[];
    const next = chain[1];
    if (next) await this.rebase(next, q, info.generation, info.metageneration);
    this.host.uploaded(q.entry.path, base, info, q.buf);
    this.finish(q);
    q.resolve();
  }

  private async rebase(next: Queued, landed: Queued, generation: bigint, metageneration: bigint): Promise<void> {
    next.entry.baseGeneration = generation.toString();
    next.entry.baseMetageneration = metageneration.toString();
    try {
      this.log.appendBase(next.id, next.entry.baseGeneration, next.entry.baseMetageneration, landed.id);
      await this.log.durable();
    } catch {
      // the successor then resumes (after a crash) behind its predecessor, whose upload
      // answers 412 and is recognized as ours: nothing is lost
    }
  }

  /**
   * 412 that is not ours, or (`refused`) a request GCS will never take: the local version goes
   * to conflicts/, as a refused close does in bucket mode.
   */
  private setAside(q: Queued, base: bigint, cur: ObjectInfo | undefined, refused?: VfsError): void {
    const e = q.entry;
    const flat = e.path.slice(1).replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 100);
    const dest = nodePath.join(this.host.conflictsDir, `${new Date().toISOString().replace(/[:.]/g, '-')}-${flat}-${randomUUID().slice(0, 8)}`);
    let kept: string | undefined;
    try {
      fs.mkdirSync(this.host.conflictsDir, { recursive: true });
      if (q.ownFile) fs.renameSync(q.ownFile, dest);
      else fs.writeFileSync(dest, this.bytesOf(q), { mode: 0o600 });
      kept = dest;
    } catch {
      // a big version's file stays in the spool under its id; a small one's record stays in
      // the log (not uploaded again: its done record is written below)
      kept = q.ownFile;
    }
    this.conflicts++;
    const where = kept ?? `${q.bytes.file} (at byte ${q.bytes.offset})`;
    const error = refused
      ? new VfsError(refused.code, `${e.path}: not uploaded (${refused.reason}); the local version is kept at ${where}`)
      : new VfsError('ESTALE', `${e.path}: not uploaded: the object changed in the bucket since it was read (generation ${base} -> ${cur ? cur.generation : 'deleted'}); the local version is kept at ${where}`);
    this.host.reportConflict({
      reason: refused ? 'upload-failed' : 'changed-remotely',
      path: e.path,
      objectName: e.key,
      expectedGeneration: base.toString(),
      ...(cur ? { currentGeneration: cur.generation.toString() } : {}),
      localFile: kept ?? q.bytes.file,
      size: e.size,
      time: new Date(),
      late: true,
    });
    // later versions of the object were based on this one: they conflict in turn, each kept
    this.finish(q, kept !== undefined && kept === q.ownFile);
    q.reject(error);
  }

  private finish(q: Queued, keepData = false): void {
    this.release(q, keepData);
    const chain = this.chains.get(q.entry.key) as Queued[];
    chain.shift();
    if (chain.length === 0) this.chains.delete(q.entry.key);
    else {
      const next = chain[0] as Queued;
      if (next.entry.baseGeneration === undefined) {
        next.entry.baseGeneration = q.entry.baseGeneration ?? '0';
        if (q.entry.baseMetageneration !== undefined) next.entry.baseMetageneration = q.entry.baseMetageneration;
      }
      if (!next.hold) this.ready.push(next);
    }
  }

  /** The version leaves the spool: a done record (no sync of its own), its memory and data file. */
  private release(q: Queued, keepData = false): void {
    if (this.log.isOpen) this.log.appendDone(q.id, q.segment);
    if (q.buf) this.memBytes -= q.buf.length;
    delete q.buf;
    if (q.ownFile && !keepData) fs.rm(q.ownFile, { force: true }, () => undefined);
  }

  /** A small version's bytes: kept from its close, or read back from the log. */
  private bytesOf(q: Queued): Buffer {
    if (q.buf) return q.buf;
    const fd = fs.openSync(q.bytes.file, 'r');
    try {
      const b = readRange(fd, q.entry.size, q.bytes.offset);
      if (b.length < q.entry.size) throw new Error(`${q.bytes.file} ends before the version's ${q.entry.size} bytes`);
      return b;
    } finally {
      fs.closeSync(fd);
    }
  }
}

async function isOurs(cur: ObjectInfo, q: Queued, bytes: () => Buffer): Promise<boolean> {
  if (cur.size !== q.entry.size || cur.metadata[META.mtime] !== q.entry.metadata[META.mtime] || !cur.crc32c) return false;
  let local: CRC32C;
  if (q.ownFile) local = await CRC32C.fromFile(q.ownFile);
  else {
    local = new CRC32C();
    local.update(bytes());
  }
  return local.toString() === cur.crc32c;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
