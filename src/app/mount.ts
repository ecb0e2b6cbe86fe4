import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import v8 from 'node:v8';
import { openWorkspace, WorkspaceError, type OpenedWorkspace } from './workspace.js';
import { DEFAULTS, formatSize, type BindingName, type LogFormat, type LogLevel, type PresetName } from '../config/index.js';
import { pendingLine, raiseFdLimit, sdNotify, StagedBackend } from '../backend/index.js';
import { BindingUnavailable, canonicalMountpoint, fsNameFor, MountError, mountAt, mountHolders, mountpointProblem, mountVfs, selectBinding, unmountPath } from '../fuse/index.js';
import { inUse, JournalLock, JournalLockedError, type MountJournal, newSessionId, openJournal, resolveStateDir, StateDirError, stateLayout } from '../journal/index.js';
import { createLogger, isWithin, type Logger } from '../core/index.js';
import type { SessionInfo } from '../policy/index.js';
import { MutationPipeline, Vfs } from '../vfs/index.js';
import { demoHints, ensureDemoPolicy, ensureDemoWorkspace } from './demo.js';
import { cliCommand } from './self.js';
import { UserError } from './errors.js';
import { releaseParent, serveParent } from './parent-link.js';
import { liveMounts, registerMount } from './mount-registry.js';
import { stateDirProblem } from './state-dir-check.js';
import type { DaemonMetrics } from './metrics.js';
import { serveMetrics, type MetricsServer } from './metrics-server.js';
import { storeStatsOf, type StoreStats, type UploadsHandle } from './workspace.js';
import { takeNoWaitRequest } from './upload-spool.js';
import type { UploadQueueStats } from '../backend/index.js';
import { bannerWritten, isDaemonChild } from './daemon.js';
import { mountAnswersStatFromChild } from './readiness.js';
import { LimitCountsKeeper } from './limit-counts.js';
import { changeInView, liveStagedControl } from './staged.js';

export interface MountCommandOptions {
  source?: string;
  /** mount/policy file (YAML or JSON); names the backend, so not with `source` */
  policy?: string;
  allowOther?: boolean;
  logLevel: LogLevel;
  /** append logs here instead of stderr */
  logFile?: string;
  /** text or JSON lines; default: text on a terminal */
  logFormat?: LogFormat;
  attrTimeout?: number;
  entryTimeout?: number;
  /** native-ll: microseconds of busy-polling after the last answer */
  busyPoll?: number;
  /** journal state directory (default: derived from the source, see defaultStateDir) */
  state?: string;
  /** journal session id (default: generated per mount) */
  session?: string;
  /** actor label on this mount's journal records */
  actor?: string;
  /** false: no journal at all (--no-journal, for benchmarks) */
  journal?: boolean;
  /** allow a second journaled mount of a local source already mounted (bench peers side by side) */
  sharedSource?: boolean;
  /**
   * Serve for a parent (`ledgerfs run`) over an IPC channel: report the mount to it, unmount
   * when it goes away (done or killed), remove the mount point it made, print no banner.
   */
  parentLink?: boolean;
  /** kernel binding (default: DEFAULTS.binding) */
  binding?: BindingName;
  /** GCS metadata cache lifetime, seconds (overrides the mount file's backend.cache.metadataTtl) */
  metadataTtl?: number;
  /** GCS: when close(2) returns (overrides the mount file's backend.durability) */
  durability?: 'bucket' | 'journal';
  /** with --source: hide what this preset hides (the tree stays read-write, without limits) */
  preset?: PresetName;
  /** serve /metrics and /healthz on this address (HOST:PORT); default: off */
  metrics?: string;
  /** owner and permission bits every node shows (display only) */
  uid?: number;
  gid?: number;
  fileMode?: number;
  dirMode?: number;
  /**
   * Staged mode: the program's changes wait in an overlay in the state directory (session
   * --session, or a new one), nothing reaches the backend until `ledgerfs apply`.
   */
  staged?: boolean;
}

export async function serveMount(mountpointArg: string, o: MountCommandOptions): Promise<number> {
  // the daemon's process, before any request: the hot paths are compiled under them (see DEFAULTS)
  const v8Flags = process.env.LEDGERFS_DAEMON_V8_FLAGS ?? DEFAULTS.daemonV8Flags;
  if (v8Flags) v8.setFlagsFromString(v8Flags);
  // `mount --daemon`'s daemon: its stderr is its parent's pipe only until the mount is up, so
  // logs go to --log-file or nowhere, and a late line to stderr must not kill it (EPIPE)
  const daemonized = isDaemonChild();
  if (daemonized) process.stderr.on('error', () => undefined);
  const log = createLogger(o.logLevel, 'ledgerfs', {
    ...(o.logFile !== undefined ? { file: o.logFile } : daemonized ? { file: '/dev/null' } : {}),
    ...(o.logFormat !== undefined ? { format: o.logFormat } : {}),
  });
  // Every program's open file may cost the daemon a descriptor: take all the system allows this
  // process before the workspace's store sizes its descriptor pool below it.
  const limit = raiseFdLimit();
  if ('error' in limit) log.warn({ openFiles: limit.limit?.soft }, `could not raise the open-file limit: ${limit.error}`);
  else log.info({ openFiles: limit.soft, ...(limit.raisedFrom !== undefined ? { raisedFrom: limit.raisedFrom } : {}) }, 'open-file limit');
  // as /proc/self/mountinfo will name it (through symlinks), taken before the mount is there:
  // the mount-table checks, the unmount and the messages all use this one name
  const mountpoint = canonicalMountpoint(mountpointArg);
  if (o.source && o.policy) {
    throw new UserError('--source and --policy cannot be used together: the policy file names the backend (backend: {type: local, path: DIR})');
  }
  // No workspace named: the demo, a small workspace served through a policy that shows off
  // hiding, read-only roots and limits (both kept in ~/.ledgerfs; edits are kept).
  const demo = !o.source && !o.policy;
  if (demo) {
    const { created } = ensureDemoWorkspace(DEFAULTS.demoWorkspaceDir);
    if (created) log.info({ source: DEFAULTS.demoWorkspaceDir }, 'created demo workspace');
    o = { ...o, policy: ensureDemoPolicy(DEFAULTS.demoWorkspaceDir) };
  }
  if (o.staged && o.journal === false) throw new UserError('--staged needs the journal (its overlay lives in the state directory): leave --no-journal out');
  // a staged mount's overlay is named by its session, known before the workspace opens
  if (o.staged) o = { ...o, session: o.session ?? newSessionId() };
  // Refused before the workspace opens: a GCS workspace resumes the uploads left in its state
  // directory's spool and finishes interrupted directory renames as it opens, which a mount
  // already serving that state directory is doing itself (a refused second mount rolled the
  // spool to a new segment under it: its closes failed with EIO, and it died on a closed fd).
  if (o.journal !== false) refuseJournalInUse(o);
  let ws: OpenedWorkspace;
  try {
    // state too: a journal directory inside the served tree is hidden and refused by the view
    ws = await openWorkspace({ source: o.source, policy: o.policy, state: o.state, log, noJournal: o.journal === false, ...(o.preset !== undefined ? { preset: o.preset } : {}), ...(o.metadataTtl !== undefined ? { metadataTtlSec: o.metadataTtl } : {}), ...(o.durability !== undefined ? { durability: o.durability } : {}), ...(o.staged && o.session !== undefined ? { staged: { session: o.session } } : {}) });
  } catch (err) {
    if (err instanceof WorkspaceError) throw new UserError(err.message);
    throw err;
  }
  const source = ws.backend.location;
  let binding;
  try {
    binding = selectBinding(o.binding, log);
  } catch (err) {
    if (err instanceof BindingUnavailable) throw new UserError(err.message);
    throw err;
  }
  if (ws.sourceDir && (mountpoint === ws.sourceDir || mountpoint.startsWith(ws.sourceDir + path.sep))) {
    throw new UserError(`mount point ${mountpoint} lies inside the source ${ws.sourceDir}; pick a directory outside it`);
  }
  // Everything that can be known before the journal is touched is checked first: a mount that
  // fails leaves no state directory and no start record behind.
  const fsName = fsNameFor(ws.store.location);
  if (o.journal !== false && !o.sharedSource) refuseSecondMount(fsName, ws.sourceDir);
  let stateDir: string | undefined;
  let stateDirExisted = true;
  if (o.journal !== false) {
    try {
      stateDir = resolveStateDir({ source: o.source, policy: o.policy, state: o.state });
    } catch (err) {
      if (err instanceof StateDirError) throw new UserError(err.message);
      throw err;
    }
    const why = stateDirProblem(stateDir);
    if (why) throw new UserError(why);
    stateDirExisted = fs.existsSync(stateDir);
  }
  const problem = mountpointProblem(mountpoint);
  if (problem) throw new UserError(problem);
  /** after a failure: a state directory this mount made goes (one that was there stays) */
  const forgetJournal = async () => {
    await limitCounts?.stop();
    await journal?.close().catch(() => undefined);
    if (!stateDirExisted && stateDir) fs.rmSync(stateDir, { recursive: true, force: true });
  };
  let journal: MountJournal | null = null;
  let limitCounts: LimitCountsKeeper | undefined;
  if (o.journal !== false) {
    try {
      const denials = ws.policy?.denials;
      journal = await openJournal({ ...ws, ...(denials ? { denials } : {}), ...(o.staged ? { staged: true } : {}) }, { source: o.source, policy: o.policy, state: o.state, session: o.session, actor: o.actor, mountpoint }, log);
      const stage = journal.stage;
      if (ws.policy) ws.policy.view.session = sessionInfo(journal.session, ws);
      // limits count per session: a remount of this session goes on from its counts
      if (ws.policy) limitCounts = LimitCountsKeeper.start(ws.policy.limits, journal.stateDir, journal.session, log);
      const j = journal;
      const uploads = storeStatsOf(ws.store, ws.sourceDir).uploads;
      if (ws.policy) ws.policy.view.usageNotes = () => [j.spaceNote(), uploads ? uploadsNote(uploads) : null].filter((n) => n).join('\n') || null;
      ws.conflicts?.listen((c, viewPath) =>
        stage.noteConflict({
          time: c.time.getTime(), path: viewPath, reason: c.reason, expectedGeneration: c.expectedGeneration,
          ...(c.currentGeneration !== undefined ? { currentGeneration: c.currentGeneration } : {}), localFile: c.localFile, size: c.size,
        }),
      );
    } catch (err) {
      await forgetJournal();
      if (err instanceof StateDirError || err instanceof JournalLockedError) throw new UserError(err.message);
      throw err;
    }
  }
  // Pipeline order: policy first, journal second (nothing refused is journaled).
  const vfs = new Vfs(ws.backend, {
    pipeline: new MutationPipeline([...ws.stages, ...(journal ? [journal.stage] : [])]),
    // new nodes belong to whoever created them, as on a local disk; chown needs root
    ownNewNodesByCaller: binding.knowsCaller && process.getuid?.() === 0,
    hiddenRenameOfReleasedIsUnlink: binding.hidesReleasedFiles,
  });
  // prom-client loads only when metrics are asked for (~0.1 s of every CLI start otherwise)
  const metrics: DaemonMetrics | undefined = o.metrics !== undefined ? new (await import('./metrics.js')).DaemonMetrics() : undefined;
  const store = storeStatsOf(ws.store, ws.sourceDir);
  metrics?.attach({ vfs, store, policy: ws.policy, journal });
  let running;
  let metricsServer: MetricsServer | undefined;
  let mounted = false;
  // From the moment the kernel has the mount, a signal must unmount it: by default SIGTERM
  // would end the process in the few milliseconds before the real handlers below are set
  // (journal control socket, banner), leaving a dead mount (ENOTCONN) behind. Signals that come
  // meanwhile wait here; a second one exits as the default would.
  let earlySignal: NodeJS.Signals | undefined;
  const onEarlySignal = (sig: NodeJS.Signals) => {
    if (earlySignal) process.exit(128 + (os.constants.signals[sig] ?? 15));
    earlySignal = sig;
    log.info({ sig }, 'signal received while mounting: unmounting once mounted');
  };
  const earlySignals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
  for (const sig of earlySignals) process.on(sig, onEarlySignal);
  const dropEarlySignals = () => {
    for (const sig of earlySignals) process.off(sig, onEarlySignal);
  };
  try {
    if (metrics && o.metrics !== undefined) {
      // what the daemon knows, never a look at its own mount point (see serveMetrics)
      metricsServer = await serveMetrics(o.metrics, metrics, async () => {
        if (!mounted) return 'not mounted (starting, or unmounted)';
        try {
          await store.ping(DEFAULTS.healthTimeoutMs);
        } catch (err) {
          return `backend ${source} unreachable: ${err instanceof Error ? ((err as { reason?: string }).reason ?? err.message) : String(err)}`;
        }
        return null;
      }, log);
    }
    running = await mountVfs({
      vfs, mountpoint, log, binding, ...(metrics ? { meters: metrics } : {}),
      display: { uid: o.uid, gid: o.gid, fileMode: o.fileMode, dirMode: o.dirMode },
      options: { fsName, allowOther: o.allowOther, attrTimeoutSec: o.attrTimeout, entryTimeoutSec: o.entryTimeout, busyPollMicros: o.busyPoll },
    });
    metrics?.attachMount(running);
    // After a rollback or an apply changed files under the mount, the kernel must forget what it
    // cached of them; fuse-native cannot tell it, so there its caches are waited out instead.
    const settleMs = 1000 * Math.max(o.attrTimeout ?? DEFAULTS.attrTimeoutSec, o.entryTimeout ?? DEFAULTS.entryTimeoutSec);
    const mounted = running;
    const forgetCached = (paths: string[]): Promise<void> =>
      mounted.invalidate ? mounted.invalidate(paths) : new Promise((r) => setTimeout(r, settleMs));
    const staged = ws.store instanceof StagedBackend ? ws.store : undefined;
    const live = staged && journal
      ? liveStagedControl({
          ws, staged, service: journal.service, mountpoint, log, openWritePaths: () => (journal as MountJournal).stage.openWritePaths(),
          invalidate: forgetCached,
        })
      : undefined;
    await journal?.serve(vfs, forgetCached, live);
  } catch (err) {
    dropEarlySignals();
    await running?.unmount().catch(() => undefined);
    await metricsServer?.close().catch(() => undefined);
    await forgetJournal();
    if (err instanceof MountError) throw new UserError(err.message);
    throw err;
  }
  // a run's daemon (--parent-link) prints no banner: `ledgerfs run` says what matters
  if (!o.parentLink) {
    const cli = cliCommand();
    process.stderr.write(
      `ledgerfs: ${source} is mounted at ${mountpoint}${demo ? ` (demo workspace, policy ${o.policy})` : ''}.\n` +
        (demo
          ? demoHints(mountpoint, journal?.session ?? null, cli)
          : `  try:   ls -la ${mountpoint}; echo hello > ${mountpoint}/hello.txt; cat ${mountpoint}/hello.txt\n`) +
        // the list in force (a preset's and the file's, merged): what the program will not see
        (ws.config && !demo ? `  hidden: ${ws.config.hide.length ? ws.config.hide.join(', ') : 'nothing'}\n` : '') +
        `  stop:  ${daemonized ? '' : 'Ctrl-C here, or: '}${cli} unmount ${mountpoint}\n` +
        (ws.store instanceof StagedBackend
          ? `  staged: nothing reaches ${ws.store.base.location} until: ${cli} apply --session ${journal?.session} ${stateFlag(journal?.stateDir)}(review: ${cli} diff --session ${journal?.session}; drop: ${cli} discard --session ${journal?.session})\n`
          : '') +
        (journal
          ? `  journal: ${journal.stateDir} (session ${journal.session}); see: ${cli} log --state ${journal.stateDir}\n` +
            (journal.startNote ? `  journal: ${journal.startNote}\n` : '')
          : `  journal: off (--no-journal): changes are not recorded and cannot be rolled back\n`),
    );
  }
  bannerWritten();

  mounted = true;
  void running.closed.then(() => (mounted = false));
  if (process.env.NOTIFY_SOCKET) void notifyReady(mountpoint, source, () => mounted, log);
  const unregister = registerMount({
    mountpoint, source: fsName, stateDir: journal?.stateDir ?? null, session: journal?.session ?? null,
    binding: binding.name, pid: process.pid, started: new Date().toISOString(),
  });
  process.once('exit', unregister);

  // A signal is a request, not an order: while programs use the mount, detaching it would
  // leave them with ENOTCONN mid-write. The first signal on a busy mount names them and keeps
  // serving; the next one detaches lazily. (`ledgerfs run` gone: its program went with it, so
  // its daemon unmounts as before.)
  let warnedBusy = false;
  let detachedLazily = false;
  let unmounting = false;
  /** set while the unmount waits for queued uploads: a signal then stops the wait */
  let stopDrain: ((sig: NodeJS.Signals | 'parent gone') => void) | undefined;
  /** a signal after the kernel detached the mount (`ledgerfs unmount`) but before the wait began */
  let stopBeforeDrain: NodeJS.Signals | 'parent gone' | undefined;
  const mountedStill = (): boolean => {
    try {
      return mountAt(mountpoint) !== undefined;
    } catch {
      return true;
    }
  };
  const onSignal = (sig: NodeJS.Signals | 'parent gone') => {
    if (stopDrain) {
      stopDrain(sig);
      return;
    }
    if (!unmounting && !mountedStill()) {
      // unmounted already (umount, `ledgerfs unmount`, whose Ctrl-C comes here): the signal is
      // for the wait for uploads that is about to start, not a request to unmount
      stopBeforeDrain = sig;
      return;
    }
    const holders = sig === 'parent gone' ? [] : mountHolders(mountpoint);
    if (holders.length > 0 && !warnedBusy) {
      warnedBusy = true;
      const list = holders.map((h) => `${h.pid} (${h.cmd.slice(0, 60)}: ${h.uses.slice(0, 3).join(', ')})`).join('; ');
      log.warn({ sig, holders: holders.map((h) => ({ pid: h.pid, cmd: h.cmd, uses: h.uses })) }, 'mount busy: not unmounting');
      process.stderr.write(
        `ledgerfs: ${mountpoint} is in use by pid ${list}; still serving. Close them and signal again to unmount cleanly, or send a second SIGTERM/SIGINT now to detach it lazily (they then get ENOTCONN).\n`,
      );
      return;
    }
    if (holders.length > 0) {
      log.warn({ sig, holders: holders.map((h) => h.pid) }, 'second signal on a busy mount: detaching it lazily');
      detachedLazily = true;
      void running.unmount({ lazy: true });
      return;
    }
    if (unmounting) {
      // the clean unmount is under way and still not done: the way out a stuck one needs
      log.warn({ sig }, 'second signal: detaching the mount lazily and exiting');
      void unmountPath(mountpoint, true).catch(() => undefined).finally(() => process.exit(130));
      return;
    }
    unmounting = true;
    log.info({ sig }, 'signal received, unmounting');
    void running.unmount();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  process.on('SIGHUP', onSignal);
  dropEarlySignals();
  if (earlySignal) onSignal(earlySignal);
  if (o.parentLink) {
    const linked = serveParent(
      { type: 'mounted', mountpoint, session: journal?.session ?? null, stateDir: journal?.stateDir ?? null, ...(journal?.startNote ? { note: journal.startNote } : {}) },
      () => onSignal('parent gone'),
    );
    if (!linked) log.warn('--parent-link without a parent process: serving as a plain mount');
  }
  // (the store's close at unmount must leave the queue uploading: drainUploads below decides)
  store.uploads?.expectDrain();
  await running.closed;
  if (process.env.NOTIFY_SOCKET) sdNotify('STOPPING=1');
  const drained = await drainUploads(store, journal?.stateDir ?? null, log, (stop) => {
    stopDrain = stop;
    if (stopBeforeDrain) stop(stopBeforeDrain);
  });
  stopDrain = undefined;
  unregister();
  await metricsServer?.close();
  await limitCounts?.stop();
  await journal?.close();
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  process.off('SIGHUP', onSignal);
  if (o.parentLink) {
    releaseParent();
    // the parent made this (empty) directory for the mount; a killed parent cannot remove it
    try {
      fs.rmdirSync(mountpoint);
    } catch {
      /* not empty, or already gone: leave it */
    }
  }
  return detachedLazily || drained === 'interrupted' ? 130 : 0;
}

/** What /.ledgerfs/session says of this mount's session: live, or staged with its pending changes as the program sees their paths. */
function sessionInfo(id: string, ws: OpenedWorkspace): SessionInfo {
  const staged = ws.store;
  if (!(staged instanceof StagedBackend)) return { id, mode: 'live' };
  const roots = ws.policy?.compiled.roots ?? [];
  const view = (p: string) => roots.find((r) => isWithin(p, r.source))?.toView(p) ?? p;
  return { id, mode: 'staged', frozen: () => staged.frozen, pending: () => staged.pending().map((c) => pendingLine(changeInView(c, view))) };
}

function stateFlag(stateDir: string | undefined): string {
  return stateDir ? `--state ${stateDir} ` : '';
}

/** The journal lock's live holder, if any, as the later acquire would name it (nothing is taken here). */
function refuseJournalInUse(o: { source?: string; policy?: string; state?: string }): void {
  let dir: string;
  try {
    dir = resolveStateDir({ source: o.source, policy: o.policy, state: o.state });
  } catch {
    return; // said with its reason where the state directory is resolved for the journal
  }
  const holder = JournalLock.liveHolder(stateLayout(dir).lockFile);
  if (holder) throw new UserError(inUse(holder));
}

/**
 * systemd Type=notify: READY=1 once the mount answers a stat made by another process (never by
 * the daemon: see readiness.ts). A mount that never answers is not declared ready; systemd's
 * TimeoutStartSec then fails the unit.
 */
async function notifyReady(mountpoint: string, source: string, stillMounted: () => boolean, log: Logger): Promise<void> {
  const deadline = Date.now() + DEFAULTS.daemonReadyTimeoutSec * 1000;
  while (stillMounted() && Date.now() < deadline) {
    if (await mountAnswersStatFromChild(mountpoint)) {
      const r = sdNotify(`READY=1\nSTATUS=serving ${source} at ${mountpoint}\nMAINPID=${process.pid}\n`);
      if (typeof r === 'object') log.error({ err: r.error }, 'could not tell systemd the mount is ready');
      else log.info({ notify: r }, 'told systemd: ready');
      return;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  log.error({ mountpoint }, 'the mount never answered stat; systemd was not told it is ready');
}

/**
 * One local source, one mount: a second (with another --state) would keep a second journal of
 * the same directory, and each would undo the other's changes blind. GCS buckets are shared by
 * design (the journal mirror in the bucket), so two mounts of one bucket stay allowed, as is a
 * mount without a journal.
 */
function refuseSecondMount(fsName: string, sourceDir: string | undefined): void {
  if (sourceDir === undefined) return;
  const other = liveMounts().find((m) => m.source === fsName && m.record?.stateDir !== null);
  if (!other) return;
  const state = other.record?.stateDir ? `, journal ${other.record.stateDir}` : '';
  const pid = other.record ? `, daemon pid ${other.record.pid}` : '';
  throw new UserError(
    `${sourceDir} is already mounted at ${other.mountpoint}${state}${pid}; a second mount would keep a second journal of the same directory. Use that mount, or unmount it first: ledgerfs unmount ${other.mountpoint} (--shared-source mounts it anyway)`,
  );
}

/**
 * Unmount with durability journal: the closed files still queued are uploaded before the daemon
 * exits, with a progress line, unless `ledgerfs unmount --no-wait` asked not to, or a signal
 * (Ctrl-C, systemd's stop) arrives while it waits (then, as after a crash, the next mount on
 * this state directory uploads them: a bucket out of reach must not keep the daemon for ever).
 * Either way it says what is left.
 */
async function drainUploads(
  store: StoreStats,
  stateDir: string | null,
  log: Logger,
  onWait: (stop: (sig: NodeJS.Signals | 'parent gone') => void) => void,
): Promise<'done' | 'left' | 'interrupted'> {
  const q = store.uploads;
  if (!q) return 'done';
  if (q.stats().files === 0) {
    q.stop();
    return 'done';
  }
  const noWait = stateDir !== null && takeNoWaitRequest(stateDir);
  const left = (s: UploadQueueStats) => `${s.files} file(s), ${formatSize(s.bytes)}, oldest ${Math.round(s.oldestAgeSec)} s`;
  if (!noWait) {
    const start = q.stats();
    log.info({ files: start.files, bytes: start.bytes }, 'unmount: waiting for queued uploads');
    process.stderr.write(`ledgerfs: unmount: uploading ${left(start)} still queued (ledgerfs unmount --no-wait leaves them for the next mount)\n`);
    let signal: NodeJS.Signals | 'parent gone' | undefined;
    onWait((sig) => {
      signal = sig;
      q.stop(); // the drain below returns; uploads running finish or are replayed
    });
    const done = await q.drain(Infinity, (s) => {
      log.info({ files: s.files, bytes: s.bytes, inFlight: s.inFlight, retrying: s.retrying, lastError: s.lastError }, 'unmount: uploads left');
      process.stderr.write(`ledgerfs: unmount: ${left(s)} left to upload${s.retrying ? ` (${s.retrying} retrying: ${s.lastError ?? ''})` : ''}\n`);
    });
    if (done || signal === undefined) return 'done';
    const s = q.stats();
    log.warn({ sig: signal, files: s.files, bytes: s.bytes, spool: stateDir }, 'signal while waiting for uploads: left in the spool; the next mount on this state directory uploads them');
    process.stderr.write(`ledgerfs: unmount: stopped waiting (${signal}): ${left(s)} not uploaded yet, kept in ${stateDir}; the next mount on this state directory uploads them\n`);
    return 'interrupted';
  }
  q.stop();
  const s = q.stats();
  log.warn({ files: s.files, bytes: s.bytes, spool: stateDir }, 'unmount --no-wait: queued uploads left in the spool; the next mount on this state directory uploads them');
  process.stderr.write(`ledgerfs: unmount --no-wait: ${left(s)} not uploaded yet, kept in ${stateDir}; the next mount on this state directory uploads them\n`);
  return 'left';
}

/** /.ledgerfs/usage (GCS): the upload queue, and the conflicts its background uploads found. */
function uploadsNote(u: UploadsHandle): string {
  const s = u.stats();
  const queue = s.files ? `${s.files} file(s), ${formatSize(s.bytes)} queued, oldest ${Math.round(s.oldestAgeSec)} s, ${s.inFlight} uploading` : 'nothing queued';
  return (
    `uploads (durability ${u.durability}): ${queue}` +
    (s.retrying ? `; ${s.retrying} retrying after a failure (${s.lastError ?? 'unknown error'})` : '') +
    (s.conflicts ? `\nconflicts found by background uploads: ${s.conflicts} (the local versions are kept in the journal's conflicts/ area; ledgerfs log shows them)` : '')
  );
}
