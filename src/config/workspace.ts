import fs from 'node:fs';
import path from 'node:path';
import { LocalBackend } from '../backend/local.js';
import type { Backend } from '../backend/types.js';
import { DEFAULTS } from './defaults.js';

/**
 * How every command names a workspace: `--source DIR` (local backend, whole tree one rw root) or
 * `--policy FILE` (backend + roots + rules), plus `--state DIR` for the journal. This module turns
 * those flags into the objects the commands need, so `mount`, `log` and `rollback` agree.
 */
export interface WorkspaceFlags {
  source?: string;
  policy?: string;
  state?: string;
}

export interface Workspace {
  backend: Backend;
  /** absolute source directory for the local backend (undefined for remote backends) */
  sourceDir?: string;
  demo: boolean;
}

export class WorkspaceError extends Error {}

export function openLocalWorkspace(flags: WorkspaceFlags): Workspace {
  const demo = !flags.source && !flags.policy;
  const dir = path.resolve(flags.source ?? DEFAULTS.demoWorkspaceDir);
  if (!demo && !fs.existsSync(dir)) throw new WorkspaceError(`source directory ${dir} does not exist`);
  const real = fs.existsSync(dir) ? fs.realpathSync(dir) : dir;
  try {
    return { backend: new LocalBackend(real), sourceDir: real, demo };
  } catch (err) {
    throw new WorkspaceError((err as Error).message);
  }
}
