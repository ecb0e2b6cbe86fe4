import type { Logger } from '../core/index.js';
import type { Vfs } from '../vfs/index.js';
import { DEFAULTS } from '../config/index.js';
import { vfsOps, OpCounters, type RequestMeters } from './adapter.js';
import { FailureLog } from './failure-log.js';
import type { Binding, BindingStats, MountedFs, MountOptions } from './binding.js';
import { FuseNativeBinding } from './fuse-native-binding.js';
import { mountAt, mountpointProblem, unmountPath } from './mounts.js';
import { type DisplayOverrides, displayOps, hasOverrides } from './display.js';

export class MountError extends Error {}

export interface MountRequest {
  vfs: Vfs;
  mountpoint: string;
  log: Logger;
  options?: Partial<MountOptions>;
  binding?: Binding;
  /** request metrics (`--metrics`); absent: nothing is timed */
  meters?: RequestMeters;
  /** owner and permission bits every node shows (`--uid/--gid/--file-mode/--dir-mode`) */
  display?: DisplayOverrides;
}

export interface RunningMount {
  readonly mountpoint: string;
  readonly counters: OpCounters;
  /** Resolves when the mount is gone (unmounted by us, by `ledgerfs unmount`, or by fusermount). */
  readonly closed: Promise<void>;
  /** `lazy`: detach at once even while busy (open files keep working until closed), no grace */
  unmount(opts?: { lazy?: boolean }): Promise<void>;
  /** see MountedFs.invalidate; absent when the binding cannot (fuse-native) */
  invalidate?(paths: string[]): Promise<void>;
  /** see MountedFs.stats; absent when the binding counts nothing (fuse-native) */
  stats?(): BindingStats | undefined;
}

export function mountOptions(o: Partial<MountOptions> = {}): MountOptions {
  return {
    allowOther: o.allowOther ?? false,
    attrTimeoutSec: o.attrTimeoutSec ?? DEFAULTS.attrTimeoutSec,
    entryTimeoutSec: o.entryTimeoutSec ?? DEFAULTS.entryTimeoutSec,
    negativeTimeoutSec: o.negativeTimeoutSec ?? DEFAULTS.negativeTimeoutSec,
    maxWriteBytes: o.maxWriteBytes ?? DEFAULTS.maxWriteBytes,
    // the one cap (the addon takes the value as given): a longer window holds the JS thread longer
    busyPollMicros: Math.min(Math.max(o.busyPollMicros ?? DEFAULTS.busyPollMicros, 0), DEFAULTS.busyPollMaxMicros) || 0,
    fsName: o.fsName ?? DEFAULTS.fsName,
    debug: o.debug ?? false,
  };
}

/**
 * Mount the core at `mountpoint` and keep watch: the mount ends when `unmount()` is called or
 * when someone unmounts it from outside, and either way the core's handles are closed.
 */
export async function mountVfs(req: MountRequest): Promise<RunningMount> {
  const problem = mountpointProblem(req.mountpoint);
  if (problem) throw new MountError(problem);
  const binding = req.binding ?? new FuseNativeBinding();
  const counters = new OpCounters();
  const options = mountOptions(req.options);
  const failures = new FailureLog(req.log);
  let mounted: MountedFs;
  try {
    const ops = vfsOps(req.vfs, req.log, counters, req.meters, failures);
    mounted = await binding.mount(req.mountpoint, hasOverrides(req.display) ? displayOps(ops, req.display) : ops, options);
  } catch (err) {
    throw new MountError(`mounting ${req.mountpoint} failed: ${(err as Error).message}`);
  }
  req.log.info({ mountpoint: req.mountpoint, binding: binding.name, backend: req.vfs.backend.location, options, ...(hasOverrides(req.display) ? { display: req.display } : {}) }, 'mounted');

  let resolveClosed!: () => void;
  const closed = new Promise<void>((r) => (resolveClosed = r));
  let finished = false;
  const finish = async () => {
    if (finished) return;
    finished = true;
    clearInterval(watch);
    await req.vfs.closeAll();
    failures.close();
    // what the kernel asked for, by op (counted only at debug: see OpCounters)
    if (req.log.isLevelEnabled('debug')) req.log.debug({ requests: counters.snapshot() }, 'requests by op');
    req.log.info({ mountpoint: req.mountpoint }, 'unmounted');
    resolveClosed();
  };
  // libfuse 2 gives no event when someone else unmounts us; the mount table does.
  const watch = setInterval(() => {
    let present: boolean;
    try {
      present = mountAt(req.mountpoint) !== undefined;
    } catch {
      // the mount table could not be read (no descriptor left this moment): look again next time
      return;
    }
    if (!present) void mounted.unmount().catch(() => undefined).finally(finish);
  }, 500);

  const unmount = async (opts: { lazy?: boolean } = {}) => {
    if (finished) return;
    try {
      await mounted.unmount();
    } catch (err) {
      req.log.warn({ err: (err as Error).message }, opts.lazy ? 'unmount failed; detaching lazily' : 'unmount failed; retrying');
    }
    const deadline = opts.lazy ? 0 : Date.now() + DEFAULTS.unmountGraceSec * 1000;
    while (mountAt(req.mountpoint) && Date.now() < deadline) {
      await unmountPath(req.mountpoint).catch(() => undefined);
      if (mountAt(req.mountpoint)) await new Promise((r) => setTimeout(r, 200));
    }
    if (mountAt(req.mountpoint)) {
      req.log.warn({ mountpoint: req.mountpoint }, 'mount still busy; detaching it lazily');
      await unmountPath(req.mountpoint, true).catch(() => undefined);
    }
    await finish();
  };
  const invalidate = mounted.invalidate?.bind(mounted);
  const stats = mounted.stats?.bind(mounted);
  return { mountpoint: req.mountpoint, counters, closed, unmount, ...(invalidate ? { invalidate } : {}), ...(stats ? { stats } : {}) };
}
