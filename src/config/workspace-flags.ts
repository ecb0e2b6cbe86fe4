/**
 * How every command names a workspace: `--source DIR` (local backend, whole tree one rw root) or
 * `--policy FILE` (backend + roots + rules), plus `--state DIR` for the journal. The app layer turns
 * those flags into the objects the commands need (app/workspace.ts, journal/state-dir.ts), so
 * `mount`, `log` and `rollback` agree.
 */
export interface WorkspaceFlags {
  source?: string;
  policy?: string;
  state?: string;
}
