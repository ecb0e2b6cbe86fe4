import fs from 'node:fs';
import path from 'node:path';
import { LocalBackend } from '../backend/local.js';
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
  let source = o.source ? path.resolve(o.source) : DEFAULTS.demoWorkspaceDir;
  const demo = !o.source;
  if (demo) {
    const { created } = ensureDemoWorkspace(source);
    if (created) log.info({ source }, 'created demo workspace');
  } else if (!fs.existsSync(source)) {
    throw new CliError(`source directory ${source} does not exist`);
  }
  source = fs.realpathSync(source);
  if (mountpoint === source || mountpoint.startsWith(source + path.sep)) {
    throw new CliError(`mount point ${mountpoint} lies inside the source ${source}; pick a directory outside it`);
  }
  let backend: LocalBackend;
  try {
    backend = new LocalBackend(source);
  } catch (err) {
    throw new CliError((err as Error).message);
  }
  const vfs = new Vfs(backend);
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
