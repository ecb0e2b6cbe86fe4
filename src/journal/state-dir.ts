import fs from 'node:fs';
import path from 'node:path';
import { type BackendConfig, ConfigError, DEFAULTS, defaultStateDir, gcsLocation, gcsSource, loadMountFile, type WorkspaceFlags } from '../config/index.js';
import { stateLayout } from './layout.js';

export class StateDirError extends Error {}

/** The real path of `p`, also when it does not exist yet (its nearest existing ancestor's). */
export function realish(p: string): string {
  // the real path of the nearest existing ancestor, plus the rest (the state dir may not exist yet)
  const abs = path.resolve(p);
  let head = abs;
  const tail: string[] = [];
  while (!fs.existsSync(head)) {
    tail.unshift(path.basename(head));
    const up = path.dirname(head);
    if (up === head) break;
    head = up;
  }
  return path.join(fs.realpathSync(head), ...tail);
}

/** `p` is `dir` or lies below it. */
export function within(p: string, dir: string): boolean {
  const rel = path.relative(dir, p);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

function backendLocation(b: BackendConfig): string {
  if (b.type === 'gcs') return gcsLocation(b);
  return fs.existsSync(b.path) ? fs.realpathSync(b.path) : path.resolve(b.path);
}

/**
 * The state directory of a workspace, from the flags every command takes: --state, else the
 * mount file's `state`, else the default derived from the workspace's location (see
 * defaultStateDir). Mount and the journal commands all call this, so they agree without flags.
 */
export function resolveStateDir(flags: WorkspaceFlags): string {
  if (flags.state !== undefined) return path.resolve(flags.state);
  if (flags.policy !== undefined) {
    let config;
    try {
      config = loadMountFile(flags.policy);
    } catch (err) {
      if (err instanceof ConfigError) throw new StateDirError(err.message);
      throw err;
    }
    return config.state ?? defaultStateDir(backendLocation(config.backend));
  }
  const gcs = gcsSource(flags.source);
  if (gcs) return defaultStateDir(gcsLocation(gcs));
  const src = path.resolve(flags.source ?? DEFAULTS.demoWorkspaceDir);
  return defaultStateDir(fs.existsSync(src) ? fs.realpathSync(src) : src);
}

/**
 * The journal must never be reachable through the view. Inside the source directory it would
 * be (with --policy, only inside a root: `rootsChecked` says openWorkspace refused that already,
 * and a state directory in the backend but outside every root is out of the view's reach), and
 * inside the mount point every journal write would go through the mount it journals.
 */
export function checkStateDir(stateDir: string, o: { sourceDir?: string; mountpoint?: string; rootsChecked?: boolean }): void {
  const state = realish(stateDir);
  if (o.sourceDir && within(state, fs.realpathSync(o.sourceDir)) && !o.rootsChecked) {
    throw new StateDirError(
      `state directory ${stateDir} lies inside the source ${o.sourceDir}: the journal would be visible and writable through the mount. ` +
        `Put it elsewhere (--state DIR), or leave --state out for the default (${defaultStateDir(fs.realpathSync(o.sourceDir))}).`,
    );
  }
  if (o.mountpoint && within(state, path.resolve(o.mountpoint))) {
    throw new StateDirError(`state directory ${stateDir} lies inside the mount point ${o.mountpoint}; put it elsewhere (--state DIR)`);
  }
}

/** How a workspace was named when it was mounted: enough to open it again from --state alone. */
export interface RememberedWorkspace {
  source?: string;
  policy?: string;
}

export function rememberWorkspace(stateDir: string, flags: WorkspaceFlags): void {
  const w: RememberedWorkspace = flags.policy !== undefined
    ? { policy: path.resolve(flags.policy) }
    : { source: gcsSource(flags.source) ? (flags.source as string) : path.resolve(flags.source ?? DEFAULTS.demoWorkspaceDir) };
  fs.writeFileSync(stateLayout(stateDir).workspaceInfo, JSON.stringify(w, null, 2) + '\n', { mode: 0o600 });
}

export function rememberedWorkspace(stateDir: string): RememberedWorkspace | null {
  try {
    const w = JSON.parse(fs.readFileSync(stateLayout(stateDir).workspaceInfo, 'utf8')) as RememberedWorkspace;
    return typeof w.source === 'string' || typeof w.policy === 'string' ? w : null;
  } catch {
    return null;
  }
}
