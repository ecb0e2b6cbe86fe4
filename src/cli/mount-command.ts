import path from 'node:path';
import { openLocalWorkspace, WorkspaceError, type Workspace } from '../config/workspace.js';
import { DEFAULTS, type LogLevel } from '../config/defaults.js';
import { MountError, mountVfs } from '../fuse/mount.js';
import { createLogger } from '../log.js';
import { Vfs } from '../vfs/vfs.js';
import { ensureDemoWorkspace } from './demo.js';
import { CliError } from './errors.js';

export interface MountCliOptions {
  source?: string;
  allowOther?: boolean;
  logLevel: LogLevel;
  attrTimeout?: number;
  entryTimeout?: number;
}

export async function mountCommand(mountpointArg: string, o: MountCliOptions): Promise<number> {
  const log = createLogger(o.logLevel);
  const mountpoint = path.resolve(mountpointArg);
  if (!o.source) {
    const { created } = ensureDemoWorkspace(DEFAULTS.demoWorkspaceDir);
    if (created) log.info({ source: DEFAULTS.demoWorkspaceDir }, 'created demo workspace');
  }
  let ws: Workspace;
  try {
    ws = openLocalWorkspace({ source: o.source });
  } catch (err) {
    if (err instanceof WorkspaceError) throw new CliError(err.message);
    throw err;
  }
  const source = ws.backend.location;
  const demo = ws.demo;
  if (ws.sourceDir && (mountpoint === ws.sourceDir || mountpoint.startsWith(ws.sourceDir + path.sep))) {
    throw new CliError(`mount point ${mountpoint} lies inside the source ${ws.sourceDir}; pick a directory outside it`);
  }
  const vfs = new Vfs(ws.backend);
  let running;
  try {
    running = await mountVfs({
      vfs, mountpoint, log,
      options: { allowOther: o.allowOther, attrTimeoutSec: o.attrTimeout, entryTimeoutSec: o.entryTimeout },
    });
  } catch (err) {
    if (err instanceof MountError) throw new CliError(err.message);
    throw err;
  }
  process.stderr.write(
    `ledgerfs: ${source} is mounted at ${mountpoint}${demo ? ' (demo workspace)' : ''}.\n` +
      `  try:   ls -la ${mountpoint}; echo hello > ${mountpoint}/hello.txt; cat ${mountpoint}/hello.txt\n` +
      `  stop:  Ctrl-C here, or: ledgerfs unmount ${mountpoint}\n`,
  );

  let signals = 0;
  const onSignal = (sig: NodeJS.Signals) => {
    signals++;
    if (signals > 1) {
      log.warn({ sig }, 'second signal: detaching the mount lazily and exiting');
      void import('../fuse/mounts.js').then((m) => m.unmountPath(mountpoint, true)).finally(() => process.exit(130));
      return;
    }
    log.info({ sig }, 'signal received, unmounting');
    void running.unmount();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  process.on('SIGHUP', onSignal);
  await running.closed;
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  process.off('SIGHUP', onSignal);
  return 0;
}
