import fs from 'node:fs';
import path from 'node:path';
import type { Backend, Logger, MutationStage, VfsError } from '../core/index.js';
import { DEFAULTS } from '../config/index.js';
import { MutationPipeline, Vfs } from '../vfs/index.js';
import { BlobStore } from './blobs.js';
import { BucketMirror } from './bucket-mirror.js';
import { collectGarbage, type GcResult } from './gc.js';
import { buildHistory, type History } from './history.js';
import { stateLayout, syncDir, type StateLayout } from './layout.js';
import { JournalLock } from './lock.js';
import { describeProblem, readIntactJournal, readJournal } from './reader.js';
import { readJournalFor, rollbackQuery } from './segment-index.js';
import { encodeRecord } from './codec.js';
import { RECORD_VERSION, type TagRecord } from './record.js';
import { reconcileUndurable, recoverPending } from './recovery.js';
import type { JournalRemote } from './remote.js';
import { damagedImages, describeDamage } from './before-images.js';
import { applyRollback, describeSelection, partialWork, planRollback, resumedUndos, RollbackError, type RollbackResult, type RollbackSelection } from './rollback.js';
import { newSessionId } from './session-id.js';
import { JournalStage } from './stage.js';
import { makeTag, type TagRequest } from './tags.js';
import { JournalWriter } from './writer.js';

export interface OpenJournalOptions {
  stateDir: string;
  /** what the Vfs sits on (policy view or store): journal paths are view paths */
  backend: Backend;
  /** for the start record: where the workspace is */
  source: string;
  session: string;
  actor: string;
  /** what holds the lock, for messages to whoever else tries: "mount /mnt/ws", "rollback" */
  role: string;
  log: Logger;
  /** GCS: the bucket's reserved area; the journal is pulled from and mirrored to it */
  remote?: JournalRemote | undefined;
  /** where a change refused because the state disk is full is told, as a denial (the policy's DenialLog) */
  denials?: DenialSink | undefined;
  /** mount --staged: the start record says so (rollback refuses such a session; see discard) */
  staged?: boolean;
  /**
   * GCS, staged: import what other writers left in the bucket's journal first (reads only),
   * mirror nothing: this writer's seq numbers then go on after theirs, so the session's records
   * (and an apply its daemon journals) cannot share numbers with them
   */
  pullOnly?: JournalRemote | undefined;
}

/** What takes a refusal's line (policy/denials.ts DenialLog). */
export interface DenialSink {
  record(op: string, path: string, err: VfsError, pid?: number): void;
}

/** End a segment a crash left open with a `recovered` close record, durably. */
function closeRecovered(file: string, index: number, bytes: number, cut: number): void {
  const fd = fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_APPEND);
  try {
    fs.writeSync(fd, encodeRecord({ kind: 'close', index, time: Date.now(), reason: 'recovered', bytes, ...(cut > 0 ? { cut } : {}) }));
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  syncDir(path.dirname(file));
}

export interface RollbackRequest extends RollbackSelection {
  force?: boolean;
  /** undo everything but the operations with a conflict (and older ones on their paths) */
  skipConflicts?: boolean;
  dryRun?: boolean;
  actor?: string;
  /** the session the undo is journaled under (default: a new rollback-... id) */
  asSession?: string;
}

/**
 * A journal opened for writing: lock taken, torn tail cut, crash leftovers resolved, writer,
 * blob store and mutation stage ready. The mount daemon holds one for its lifetime; CLI commands
 * on an unmounted workspace hold one while they work.
 */
export class JournalService {
  readonly layout: StateLayout;
  readonly stage: JournalStage;
  readonly writer: JournalWriter;
  readonly blobs: BlobStore;
  /** GCS: what copies the spool to the bucket (null for a local workspace) */
  readonly mirror: BucketMirror | null;
  readonly session: string;
  /** what the start of this writer found (torn tail, recovered operations), or undefined */
  readonly startNote: string | undefined;
  private vfs: Vfs | null = null;
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;

  private constructor(
    private readonly o: OpenJournalOptions,
    private readonly lock: JournalLock,
    parts: { writer: JournalWriter; blobs: BlobStore; mirror: BucketMirror | null; note: string | undefined },
  ) {
    this.layout = stateLayout(o.stateDir);
    this.writer = parts.writer;
    this.blobs = parts.blobs;
    this.mirror = parts.mirror;
    this.session = o.session;
    this.startNote = parts.note;
    this.stage = new JournalStage({ backend: o.backend, writer: this.writer, blobs: this.blobs, session: o.session, actor: o.actor, log: o.log });
  }

  static async open(o: OpenJournalOptions): Promise<JournalService> {
    const layout = stateLayout(o.stateDir);
    fs.mkdirSync(o.stateDir, { recursive: true, mode: 0o700 });
    const lock = JournalLock.acquire(layout.lockFile, o.role);
    try {
      const notes: string[] = [];
      let mirror: BucketMirror | null = null;
      // a pull-only mirror (a staged daemon's) reads what other hosts left, and is not kept
      const remote = o.remote ?? o.pullOnly;
      if (remote) {
        const opened = await BucketMirror.open({
          remote, layout, log: o.log, intervalMs: DEFAULTS.journal.mirrorIntervalMs, retryMs: DEFAULTS.journal.mirrorRetryMs,
        }).catch((err: unknown) => {
          throw new Error(`journal: cannot read the journal's mirror in ${remote.location}: ${(err as Error).message}`);
        });
        if (o.remote) mirror = opened.mirror;
        if (opened.pulled.segments > 0) notes.push(`imported ${opened.pulled.bytes} bytes of journal (${opened.pulled.segments} segment(s)) other hosts left in ${opened.mirror.location}`);
      }
      let contents = readJournal(o.stateDir);
      if (contents.tornTail) {
        const t = contents.tornTail;
        fs.truncateSync(t.path, t.offset);
        const msg = `cut a torn record at the end of ${t.path} (${t.bytes} bytes at offset ${t.offset}: ${t.reason}); a crash interrupted its write`;
        o.log.warn({ segment: t.path, offset: t.offset, bytes: t.bytes }, `journal: ${msg}`);
        notes.push(msg);
      }
      if (contents.unclosed) {
        // the lock is ours, so the writer of this segment is gone: close it as found
        const u = contents.unclosed;
        closeRecovered(u.path, u.index, u.end, contents.tornTail?.path === u.path ? contents.tornTail.bytes : 0);
        notes.push(`closed ${u.path}, which its writer left open (a crash)`);
      }
      // its writer was gone without closing it: a crash (what it journaled may not all be in the store)
      const crashed = contents.unclosed !== null;
      if (contents.tornTail || contents.unclosed) contents = readJournal(o.stateDir);
      if (contents.problems.length > 0) {
        o.log.error({ problems: contents.problems.slice(0, 10).map(describeProblem) }, `journal: ${contents.problems.length} problem(s) (damaged records, missing or cut segments); rollback, log and diff refuse until it is repaired; run 'ledgerfs verify'`);
      }
      const history = buildHistory(contents.records);
      const blobs = new BlobStore(layout.blobsDir);
      blobs.prepare();
      const writer = JournalWriter.open(
        {
          journalDir: layout.journalDir,
          segmentBytes: DEFAULTS.journal.segmentBytes,
          syncIntervalMs: DEFAULTS.journal.syncIntervalMs,
          flushDelayMs: DEFAULTS.journal.flushDelayMs,
          log: o.log,
          beforeSync: () => blobs.syncPending(),
          ...(mirror ? { onAppend: (i: number, b: number) => mirror.segmentAppended(i, b) } : {}),
          onFull: (records, err) => {
            for (const r of records) {
              if (r.kind !== 'op') continue;
              // a denial line for each change refused (nothing reached the backend)
              if (o.denials) o.denials.record(r.op, r.paths[0] as string, err, r.pid);
              else o.log.warn({ op: r.op, path: r.paths[0], errno: 'ENOSPC', ...(r.pid !== undefined ? { callerPid: r.pid } : {}) }, 'denied: the state directory is full, so the change cannot be journaled');
            }
          },
        },
        history.lastSeq,
      );
      await mirror?.start(blobs, () => writer.sync());
      const rec = await recoverPending(history, o.backend, writer);
      if (rec.applied + rec.notApplied + rec.sessionsEnded > 0) {
        const msg = `recovered after a crash: ${rec.applied} operation(s) had reached the backend, ${rec.notApplied} had not, ${rec.sessionsEnded} write session(s) ended as found`;
        o.log.warn(rec, `journal: ${msg}`);
        notes.push(msg);
      }
      if (crashed) {
        // the writer that crashed may have journaled changes its store held for a close that never came
        const lost = await reconcileUndurable(history, o.backend, writer);
        if (lost.files > 0) {
          const msg = `recovered after a crash: ${lost.files} file(s) never got what the journal recorded (held for an upload at close that the crash prevented): ${lost.lost} operation(s) recorded as lost, ${lost.corrected} after-state(s) corrected to what the store holds`;
          o.log.warn(lost, `journal: ${msg}`);
          notes.push(msg);
        }
      }
      const note = notes.length ? notes.join('; ') : undefined;
      writer.appendNow({
        kind: 'start', time: Date.now(), session: o.session, actor: o.actor, pid: process.pid, source: o.source,
        version: RECORD_VERSION, lastSeq: writer.lastSeq, ...(note ? { note } : {}), ...(o.staged ? { staged: true } : {}),
      });
      return new JournalService(o, lock, { writer, blobs, mirror, note });
    } catch (err) {
      lock.release();
      throw err;
    }
  }

  get stateDir(): string {
    return this.o.stateDir;
  }

  /** The Vfs whose mutations this journal records (rollback applies its undo through it). */
  attach(vfs: Vfs): void {
    this.vfs = vfs;
  }

  /** A Vfs over the backend with just this journal's stage (an unmounted workspace). */
  attachDirect(extraStages: MutationStage[] = []): Vfs {
    const vfs = new Vfs(this.o.backend, { pipeline: new MutationPipeline([...extraStages, this.stage]) });
    this.vfs = vfs;
    return vfs;
  }

  /** Everything journaled so far, as it is on disk (buffered records written first); refuses a damaged journal. */
  history(): History {
    this.writer.flush();
    return buildHistory(readIntactJournal(this.o.stateDir).records);
  }

  /** history() for what a rollback selects, read through the journal index (segment-index.ts). */
  private indexedHistory(sel: RollbackRequest): History {
    this.writer.flush();
    return readJournalFor(this.o.stateDir, rollbackQuery(sel)).history;
  }

  /** Run one maintenance task at a time (two rollbacks at once would fight over the same paths). */
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.queue.then(fn, fn);
    this.queue = next.catch(() => undefined);
    return next;
  }

  rollback(req: RollbackRequest, onProgress?: (done: number, total: number) => void): Promise<RollbackResult> {
    return this.serial(async () => {
      const vfs = this.vfs;
      if (!vfs) throw new Error('journal: no Vfs attached for rollback');
      const openWritePaths = () => this.stage.openWritePaths();
      // a dry run needs only the selected operations (and every undo): the index finds them
      const history = req.dryRun ? this.indexedHistory(req) : this.history();
      const { ops, result: plan } = await planRollback(history, req, { backend: this.o.backend, openWritePaths: openWritePaths() });
      const { planned, alreadyUndone, conflicts } = plan;
      const base = { planned, alreadyUndone, forced: [], ...(plan.unfinished ? { unfinished: plan.unfinished } : {}) };
      const damaged = await damagedImages(ops, this.blobs);
      if (damaged.length > 0) throw new RollbackError(describeDamage(damaged));
      if (req.dryRun) return plan;
      if (ops.length === 0) return { ...base, dryRun: false, session: null, undone: 0, conflicts: [], complete: true };
      if (conflicts.length > 0 && !req.force && !req.skipConflicts) return { ...base, dryRun: false, session: null, undone: 0, conflicts, complete: false };
      const session = req.asSession ?? newSessionId('rollback-');
      const r = await applyRollback(ops, {
        vfs, stage: this.stage, blobs: this.blobs, session, actor: req.actor ?? DEFAULTS.journal.rollbackActor,
        force: req.force ?? false, skipConflicts: req.skipConflicts ?? false, openWritePaths, onProgress, history: history.ops,
        writer: this.writer, target: describeSelection(req), partial: partialWork(history), resumed: resumedUndos(history, ops),
      });
      await this.writer.sync();
      return {
        ...base, dryRun: false, session: r.undone > 0 ? session : null, undone: r.undone, conflicts: r.conflicts,
        complete: r.undone === ops.length, forced: r.forced, ...(req.skipConflicts ? { skipped: r.skipped } : {}),
      };
    });
  }

  /**
   * Journal a session of its own through this writer, over `backend` with `stages` before the
   * journal's: a frozen staged mount's daemon applies its overlay to the store this way (an
   * `apply-...` session, which rollback undoes like any). Its start record comes first; it runs
   * serially with rollback, gc and tag, and is durable when this returns.
   */
  withSession<T>(o: { session: string; actor: string; backend: Backend; stages: MutationStage[] }, fn: (vfs: Vfs) => Promise<T>): Promise<T> {
    return this.serial(async () => {
      this.writer.appendNow({
        kind: 'start', time: Date.now(), session: o.session, actor: o.actor, pid: process.pid, source: this.o.source,
        version: RECORD_VERSION, lastSeq: this.writer.lastSeq, note: `run by the daemon of session ${this.o.session}`,
      });
      const stage = new JournalStage({ backend: o.backend, writer: this.writer, blobs: this.blobs, session: o.session, actor: o.actor, log: this.o.log });
      try {
        return await fn(new Vfs(o.backend, { pipeline: new MutationPipeline([...o.stages, stage]) }));
      } finally {
        await stage.finishAll();
        await this.writer.sync();
      }
    });
  }

  /**
   * Mark the journal's current point with a name (a journaled `tag` record, durable when this
   * returns). Serial with rollback and gc, and by the one writer, so two tags of one name
   * cannot both pass the check.
   */
  tag(req: TagRequest): Promise<TagRecord> {
    return this.serial(async () => {
      const rec = makeTag(this.history(), req, this.writer.lastSeq);
      this.writer.appendNow(rec);
      await this.writer.sync();
      return rec;
    });
  }

  /**
   * Drop history older than `keepMs` (none given: no age limit) and, with `maxBytes`, the oldest
   * whole sessions until the journal fits. A background run (a mount file's retention) never
   * drops this writer's own session, still mounted; one the user asks for may (gc --keep 0).
   */
  gc(keepMs: number | undefined, o: { maxBytes?: number; background?: boolean } = {}): Promise<GcResult> {
    return this.serial(async () => {
      const cutoff = keepMs === undefined ? 0 : Date.now() - keepMs;
      this.writer.rollNow(); // every record so far into closed segments, which gc may rewrite
      await this.writer.sync();
      // The bucket gets them whole first: gc prunes the spool, the bucket keeps the history. A
      // record gc drops before it is uploaded would be lost to every other host, so no gc then.
      if (this.mirror) {
        const mirror = this.mirror;
        const upload = async () => mirror.pump().catch((err: unknown) => this.o.log.warn({ err: (err as Error).message }, 'journal mirror: upload before gc failed'));
        await upload();
        if (mirror.backlog > 0) await upload(); // a pass already running when rollNow() closed the segment
        if (mirror.backlog > 0) throw new Error(`journal gc: the bucket does not have the whole journal yet (${mirror.backlog} part(s)/blob(s) to upload); gc not run, try again when it is reachable`);
      }
      const result = collectGarbage(this.o.stateDir, cutoff, this.writer.activeSegment, { ...(o.background ? { protect: [this.o.session] } : {}), ...(o.maxBytes !== undefined ? { maxBytes: o.maxBytes } : {}) });
      // a background run that dropped nothing leaves no trace (it runs every few minutes)
      if (o.background && result.droppedOperations === 0 && result.blobsRemoved === 0 && result.segmentsRemoved === 0 && result.segmentsRewritten === 0) return result;
      // numbering must go on after the last seq even if gc dropped every operation
      this.writer.appendNow({
        kind: 'start', time: Date.now(), session: this.o.session, actor: this.o.actor, pid: process.pid, source: this.o.source,
        version: RECORD_VERSION, lastSeq: this.writer.lastSeq,
        note: `gc: dropped ${result.droppedSessions.length} whole session(s), ${result.droppedOperations} operation(s) older than ${result.cutoff}, ${result.blobsRemoved} blob(s)`,
      });
      await this.writer.sync();
      return result;
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.queue.catch(() => undefined);
    try {
      await this.stage.finishAll();
      await this.writer.close();
      await this.mirror?.drain(DEFAULTS.journal.mirrorDrainTimeoutMs);
    } finally {
      this.lock.release();
    }
  }
}
