import fs from 'node:fs';
import path from 'node:path';
import { type GcsConflict, LocalBackend, openGcsStack, StagedBackend, stagedLayout, type UploadQueueStats } from '../backend/index.js';
import { type BackendConfig, ConfigError, type JournalRetention, DEFAULTS, defaultStateDir, gcsSource, loadMountFile, type MountConfig, POLICY_DEFAULTS, POLICY_PRESETS, type PresetName, sourceConfig, type WorkspaceFlags } from '../config/index.js';
import { checkStateDir, type JournalRemote, realish, resolveStateDir, StateDirError, stateLayout } from '../journal/index.js';
import { type Backend, isWithin, type Logger, type MutationStage, VfsError } from '../core/index.js';
import { ChangeLimits, CompiledPolicy, DenialLog, PolicyStage, PolicyView, PrivilegeStage, UsageTable } from '../policy/index.js';

export interface Workspace {
  backend: Backend;
  /** absolute source directory for the local backend (undefined for remote backends) */
  sourceDir?: string;
  demo: boolean;
}

export class WorkspaceError extends Error {}

/** What metrics and the health check read from a store, beside the Backend interface. */
export interface StoreStats {
  /** one cheap call to the backend itself, past every cache; rejects saying why it failed */
  ping(timeoutMs: number): Promise<void>;
  /** cache layers with their hit/miss counts */
  caches: Array<{ layer: string; hits(): number; misses(): number }>;
  /** requests retried after a transient failure */
  retries(): number;
  /** backend requests so far by HTTP method and status (GCS; empty for local) */
  requests(): Array<{ method: string; status: string; count: number }>;
  /** object bytes received from and sent to the store (GCS) */
  traffic?(): { bytesIn: number; bytesOut: number };
  /** (GCS) the upload queue: durability journal's background uploads, and what a crash left */
  uploads?: UploadsHandle;
}

export interface UploadsHandle {
  durability: 'bucket' | 'journal';
  stats(): UploadQueueStats;
  /** wait for the queue to empty, up to timeoutMs; true when it did */
  drain(timeoutMs: number, onProgress?: (s: UploadQueueStats) => void): Promise<boolean>;
  /** the unmount will drain (or stop) the queue after the store is closed: closing it must not stop the uploads */
  expectDrain(): void;
  /** stop starting uploads; what is left stays in the spool for the next mount */
  stop(): void;
}

const storeStats = new WeakMap<Backend, StoreStats>();

/** The stats of a store opened here; a store from elsewhere: a ping that stats its source. */
export function storeStatsOf(store: Backend, sourceDir?: string): StoreStats {
  return storeStats.get(store) ?? localStats(sourceDir);
}

function localStats(dir: string | undefined): StoreStats {
  return {
    // the source directory, never the mount point: the daemon must not call into its own mount
    ping: (timeoutMs) => (dir === undefined ? Promise.resolve() : withTimeout(fs.promises.stat(dir).then(() => undefined), timeoutMs, `the source directory ${dir}`)),
    caches: [],
    retries: () => 0,
    requests: () => [],
  };
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms)));
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

export function openLocalWorkspace(flags: WorkspaceFlags, log?: Logger): Workspace {
  const demo = !flags.source && !flags.policy;
  const dir = path.resolve(flags.source ?? DEFAULTS.demoWorkspaceDir);
  if (!demo && !fs.existsSync(dir)) throw new WorkspaceError(`source directory ${dir} does not exist`);
  const real = fs.existsSync(dir) ? fs.realpathSync(dir) : dir;
  try {
    return { backend: new LocalBackend(real, undefined, log ? { log } : {}), sourceDir: real, demo };
  } catch (err) {
    throw new WorkspaceError((err as Error).message);
  }
}

/** The policy's working parts, for the mount (and tests) to look at. */
export interface PolicyRuntime {
  compiled: CompiledPolicy;
  usage: UsageTable;
  denials: DenialLog;
  view: PolicyView;
  stage: PolicyStage;
  /** the mass-change guard's counts and limits */
  limits: ChangeLimits;
}

export interface OpenedWorkspace extends Workspace {
  /** what the Vfs sits on: the PolicyView over the store with a policy, else the store itself */
  backend: Backend;
  /** the real backend */
  store: Backend;
  /** mutation stages in pipeline order (policy first); the journal appends its stage after */
  stages: MutationStage[];
  /** GCS (with a journal): the bucket's reserved area the journal is mirrored to */
  journalRemote?: JournalRemote;
  /** the loaded mount file (with --policy) */
  config?: MountConfig;
  policy?: PolicyRuntime;
  /** journal directory and session: --state wins over the file's `state` */
  state?: string;
  session?: string;
  /** the mount file's `journal:` retention */
  retention?: JournalRetention;
  /** (GCS) local versions the store kept aside because they could not be uploaded */
  conflicts?: ConflictFeed;
}

/**
 * Conflicts as the store reports them (store paths), handed on with their view path: the store
 * is opened before the journal that records them, so the journal subscribes later.
 */
export class ConflictFeed {
  private readonly listeners: Array<(c: GcsConflict, viewPath: string) => void> = [];
  /** store path -> view path (set once the policy is compiled) */
  toView: (storePath: string) => string = (p) => p;
  listen(fn: (c: GcsConflict, viewPath: string) => void): void {
    this.listeners.push(fn);
  }
  emit(c: GcsConflict): void {
    const view = this.toView(c.path);
    for (const fn of this.listeners) fn(c, view);
  }
}

export interface OpenWorkspaceOptions extends WorkspaceFlags {
  /** denials are logged here (warn) */
  log?: Logger;
  /** GCS: metadata cache lifetime (mount --metadata-ttl), over the mount file's */
  metadataTtlSec?: number;
  /** GCS: mount --durability, over the mount file's backend.durability */
  durability?: 'bucket' | 'journal';
  /** mount --no-journal: GCS writes stage in DEFAULTS.gcs.stagingDir, not in a state directory */
  noJournal?: boolean;
  /**
   * With --source: hide what this preset hides (`run --source` uses `sandboxed`). Only its
   * hiding: the whole tree stays one read-write root, without the preset's limits.
   */
  preset?: PresetName;
  /**
   * mount --staged: the store is wrapped in a StagedBackend (an overlay in the state directory
   * under this session), so the policy, quotas and limits judge the staged view and nothing
   * reaches the real store.
   */
  staged?: { session: string };
}

/** The store as the mount sees it: itself, or (--staged) the overlay over it. */
function stagedOver(store: Backend, opts: OpenWorkspaceOptions): Backend {
  if (!opts.staged) return store;
  let stateDir: string;
  try {
    stateDir = resolveStateDir(opts);
  } catch (err) {
    throw new WorkspaceError((err as Error).message);
  }
  const staged = new StagedBackend(store, stagedLayout(stateDir, opts.staged.session));
  const stats = storeStats.get(store);
  if (stats) storeStats.set(staged, stats);
  return staged;
}

/**
 * The journal's state directory must be out of every root's reach, whatever the policy says:
 * hiding it does not hold, because a hidden name moves with its parent (rename the directory
 * above it and the journal shows, and can be forged: issue 13). Refuses, naming both, a state
 * directory inside a root's backend directory, or one holding a root. One inside the backend but
 * outside every root is unreachable through the view, and allowed.
 */
function refuseStateInRoots(label: string, state: string, sourceDir: string, roots: readonly { path: string; source: string }[]): void {
  const rel = path.relative(sourceDir, realish(state));
  if (rel.startsWith('..') || path.isAbsolute(rel)) return;
  const inBackend = rel === '' ? '/' : '/' + rel.split(path.sep).join('/');
  const host = (p: string) => (p === '/' ? sourceDir : path.join(sourceDir, p));
  const fix = `Put it outside every root (--state DIR, or the mount file's \`state\`), e.g. the default ${defaultStateDir(sourceDir)}.`;
  for (const r of roots) {
    if (isWithin(inBackend, r.source)) {
      throw new WorkspaceError(
        `${label}: the state directory ${state} lies inside root ${r.path} (${host(r.source)}): programs could reach the journal through the view, and no policy can hide it for sure (renaming a directory above it would show it). ${fix}`,
      );
    }
    if (isWithin(r.source, inBackend)) {
      throw new WorkspaceError(`${label}: root ${r.path} (${host(r.source)}) lies inside the state directory ${state}: programs could reach the journal through the view. ${fix}`);
    }
  }
}

/** The real backend a mount file names. */
async function openStore(b: BackendConfig, label: string, flags: OpenWorkspaceOptions, log?: Logger): Promise<{ store: Backend; sourceDir?: string; conflicts?: ConflictFeed; journalRemote?: JournalRemote }> {
  if (b.type === 'gcs') {
    // Writes stage, and refused local versions are kept, in the workspace's state directory.
    let layout;
    try {
      layout = flags.noJournal
        ? { stagingDir: DEFAULTS.gcs.stagingDir, conflictsDir: undefined, uploadSpool: undefined } // the backend's default, below staging
        : stateLayout(resolveStateDir(flags));
    } catch (err) {
      throw new WorkspaceError((err as Error).message);
    }
    try {
      const ttl = flags.metadataTtlSec;
      const conflicts = new ConflictFeed();
      const durability = flags.durability ?? b.durability ?? DEFAULTS.gcs.durability;
      if (durability === 'journal' && flags.noJournal) {
        throw new Error(`durability journal keeps closed files in the journal's state directory until they are uploaded; it cannot be used with --no-journal`);
      }
      const withTtl = ttl === undefined ? b : { ...b, cache: { ...b.cache, metadataTtlSec: ttl } };
      const { store, gcs, journalRemote, metadata, content } = await openGcsStack({ ...withTtl, durability }, {
        stagingDir: layout.stagingDir,
        spoolDir: layout.uploadSpool,
        conflictsDir: layout.conflictsDir,
        onConflict: (c) => {
          // a late one (background upload) was not an error any program saw: a warning to look at
          const fields = { path: c.path, reason: c.reason, kept: c.localFile, expectedGeneration: c.expectedGeneration, currentGeneration: c.currentGeneration };
          if (c.late) log?.warn(fields, 'gcs: local version not uploaded (found by its background upload); kept in the conflict area');
          else log?.error(fields, 'gcs: local version not uploaded; kept in the conflict area');
          conflicts.emit(c);
        },
      });
      storeStats.set(store, {
        ping: (timeoutMs) => gcs.ping(timeoutMs),
        caches: [
          { layer: 'metadata', hits: () => metadata.hits, misses: () => metadata.misses },
          ...(content ? [{ layer: 'content', hits: () => content.hits, misses: () => content.misses }] : []),
        ],
        retries: () => gcs.req.counters.retries,
        traffic: () => gcs.req.traffic,
        ...(gcs.uploads
          ? {
              uploads: {
                durability: gcs.durability,
                stats: () => (gcs.uploads as NonNullable<typeof gcs.uploads>).stats(),
                drain: (timeoutMs: number, onProgress?: (s: UploadQueueStats) => void) => (gcs.uploads as NonNullable<typeof gcs.uploads>).drain(timeoutMs, onProgress),
                expectDrain: () => (gcs.uploads as NonNullable<typeof gcs.uploads>).expectDrain(),
                stop: () => (gcs.uploads as NonNullable<typeof gcs.uploads>).stop(),
              },
            }
          : {}),
        requests: () => [...(gcs.req.counters.attempts ?? [])].map(([key, count]) => {
          const [method = '', status = ''] = key.split(' ');
          return { method, status, count };
        }),
      });
      if (gcs.resumedUploads > 0) log?.warn({ files: gcs.resumedUploads, spool: layout.uploadSpool }, 'gcs: uploads a crash or an unfinished unmount left in the spool are resumed');
      for (const r of gcs.recoveredRenames) {
        if (r.outcome === 'unreadable') {
          log?.error({ object: r.id }, 'gcs: a directory rename intent this version cannot read was left in place; look at it by hand');
          continue;
        }
        log?.warn({ from: r.from, to: r.to, objects: r.objects, leftInPlace: r.leftInPlace.length ? r.leftInPlace : undefined }, `gcs: a directory rename a crash had cut short was ${r.outcome === 'completed' ? 'finished' : 'undone'}`);
      }
      // GCS keeps every object it accepted; a server at a custom endpoint (an emulator) may not,
      // and says nothing: a read-back tells. Never asked of GCS itself (no cost there).
      if (b.apiEndpoint !== undefined && (await gcs.keepsPlaceholders()) === false) {
        log?.warn(
          { endpoint: b.apiEndpoint },
          'gcs: this server does not keep objects whose names end in "/" (fake-gcs-server\'s default filesystem backend does not): empty directories will disappear and directories lose their mode, owner and times; run fake-gcs-server with -backend memory',
        );
      }
      return flags.noJournal ? { store, conflicts } : { store, conflicts, journalRemote };
    } catch (err) {
      throw new WorkspaceError(`${label}: backend: ${(err as Error).message}`);
    }
  }
  if (!fs.existsSync(b.path)) throw new WorkspaceError(`${label}: backend.path: directory ${b.path} does not exist`);
  const real = fs.realpathSync(b.path);
  try {
    return { store: new LocalBackend(real, undefined, log ? { log } : {}), sourceDir: real };
  } catch (err) {
    throw new WorkspaceError(`${label}: backend.path: ${(err as Error).message}`);
  }
}

/** `--source` (either store): no policy, but never device nodes (policy/privileges.ts). */
function sourcePrivileges(store: Backend, log: Logger | undefined): PrivilegeStage {
  const stat = (p: string) => (store.tryStat ? store.tryStat(p) : store.stat(p));
  return new PrivilegeStage(POLICY_DEFAULTS.sourcePrivileges, stat, new DenialLog(POLICY_DEFAULTS.denialRingSize, log));
}

/**
 * Open a workspace from the flags every command shares. `--source DIR|gs://...` (or nothing: the
 * demo workspace) is today's pass-through: no policy, and of its rules only the refusal of device
 * nodes (PrivilegeStage, which lets every other mutation through untouched). `--policy FILE` loads the
 * mount file, opens its backend, compiles the policy, counts usage and returns the PolicyView
 * with the policy stage.
 */
export async function openWorkspace(opts: OpenWorkspaceOptions): Promise<OpenedWorkspace> {
  if (opts.source !== undefined && opts.policy !== undefined) {
    throw new WorkspaceError('--source and --policy cannot be used together: the policy file names the backend (backend: {type: local, path: DIR})');
  }
  const gcs = gcsSource(opts.source);
  if (opts.preset !== undefined && opts.policy !== undefined) {
    throw new WorkspaceError(`--preset applies to --source; a policy file says it itself (preset: ${opts.preset})`);
  }
  const presetHide = opts.preset !== undefined ? POLICY_PRESETS[opts.preset].hide : [];
  if (opts.policy === undefined && opts.source !== undefined && presetHide.length > 0) {
    const config: MountConfig = { ...sourceConfig(opts.source), hide: [...presetHide], listMeta: false };
    if (gcs) config.backend = gcs;
    else if (!fs.existsSync(opts.source)) throw new WorkspaceError(`source directory ${path.resolve(opts.source)} does not exist`);
    return openPolicyWorkspace(config, '--source', opts);
  }
  if (gcs && opts.policy === undefined) {
    const opened = await openStore(gcs, '--source', opts, opts.log);
    const { conflicts, journalRemote } = opened;
    const store = stagedOver(opened.store, opts);
    return { backend: store, store, stages: [sourcePrivileges(store, opts.log)], demo: false, ...(conflicts ? { conflicts } : {}), ...(journalRemote ? { journalRemote } : {}), ...(opts.state !== undefined ? { state: path.resolve(opts.state) } : {}) };
  }
  if (opts.policy === undefined) {
    const ws = openLocalWorkspace(opts, opts.log);
    if (!opts.noJournal && ws.sourceDir !== undefined) {
      try {
        checkStateDir(resolveStateDir(opts), { sourceDir: ws.sourceDir });
      } catch (err) {
        if (err instanceof StateDirError) throw new WorkspaceError(err.message);
        throw err;
      }
    }
    const store = stagedOver(ws.backend, opts);
    ws.backend = store;
    return { ...ws, store, stages: [sourcePrivileges(store, opts.log)], ...(opts.state !== undefined ? { state: path.resolve(opts.state) } : {}) };
  }
  let config: MountConfig;
  try {
    config = loadMountFile(opts.policy);
  } catch (err) {
    if (err instanceof ConfigError) throw new WorkspaceError(err.message);
    throw err;
  }
  return openPolicyWorkspace(config, opts.policy, opts);
}

/**
 * The workspace an apply run by a frozen staged mount's daemon writes through: the store the
 * overlay reads (so its caches see what the apply wrote), under a policy view of its own (usage
 * counted on the store, the apply session's own limits), as the unmounted apply opens it.
 */
export async function workspaceOverStore(ws: OpenedWorkspace, store: Backend, log?: Logger): Promise<OpenedWorkspace> {
  const common = { store, demo: false, ...(ws.sourceDir !== undefined ? { sourceDir: ws.sourceDir } : {}), ...(ws.journalRemote ? { journalRemote: ws.journalRemote } : {}) };
  if (!ws.config) return { ...common, backend: store, stages: [sourcePrivileges(store, log)] };
  const compiled = new CompiledPolicy(ws.config);
  const usage = await UsageTable.count(compiled, store);
  const denials = new DenialLog(POLICY_DEFAULTS.denialRingSize, log);
  const limits = new ChangeLimits(compiled);
  const view = new PolicyView(store, compiled, usage, denials, log, limits);
  const stage = new PolicyStage(compiled, view, usage, denials, limits);
  return { ...common, backend: view, stages: [stage], config: ws.config, policy: { compiled, usage, denials, view, stage, limits } };
}

/** The workspace of a compiled policy: its store, the PolicyView over it and the policy stage. */
async function openPolicyWorkspace(config: MountConfig, label: string, opts: OpenWorkspaceOptions): Promise<OpenedWorkspace> {
  const opened = await openStore(config.backend, label, opts, opts.log);
  const { sourceDir, conflicts, journalRemote } = opened;
  const state = opts.state !== undefined ? path.resolve(opts.state) : config.state;
  if (sourceDir !== undefined && !opts.noJournal) {
    try {
      refuseStateInRoots(label, state ?? defaultStateDir(sourceDir), sourceDir, config.roots);
    } catch (err) {
      await opened.store.close().catch(() => undefined);
      throw err;
    }
  }
  const store = stagedOver(opened.store, opts);
  const compiled = new CompiledPolicy(config);
  if (conflicts) {
    conflicts.toView = (p) => {
      const root = compiled.roots.find((r) => isWithin(p, r.source));
      return root ? root.toView(p) : p;
    };
  }
  for (const root of compiled.roots) {
    let ok = false;
    try {
      ok = (await store.stat(root.source)).type === 'dir';
    } catch (err) {
      if (!(err instanceof VfsError)) throw err;
    }
    if (!ok) {
      throw new WorkspaceError(
        `${label}: roots[${root.index}]: ${root.source} is not a directory in ${store.location}; create it or fix ${root.identity ? 'path' : 'source'}`,
      );
    }
  }
  const usage = await UsageTable.count(compiled, store);
  const denials = new DenialLog(POLICY_DEFAULTS.denialRingSize, opts.log);
  const limits = new ChangeLimits(compiled);
  const view = new PolicyView(store, compiled, usage, denials, opts.log, limits);
  const stage = new PolicyStage(compiled, view, usage, denials, limits);
  opts.log?.info(
    {
      policy: config.file,
      // the program's usage leaves hidden names out; the operator sees what they hold here
      roots: compiled.roots.map((r) => ({ path: r.path, mode: r.mode, quota: r.quota, used: usage.of(r) ?? undefined, hidden: usage.hiddenOf(r) ?? undefined })),
      hide: config.hide,
    },
    'policy loaded',
  );
  const ws: OpenedWorkspace = {
    backend: view, store, stages: [stage], config, policy: { compiled, usage, denials, view, stage, limits }, demo: false,
  };
  if (sourceDir !== undefined) ws.sourceDir = sourceDir;
  if (journalRemote !== undefined) ws.journalRemote = journalRemote;
  if (state !== undefined) ws.state = state;
  if (config.session !== undefined) ws.session = config.session;
  if (config.journal !== undefined) ws.retention = config.journal;
  if (conflicts) ws.conflicts = conflicts;
  return ws;
}
