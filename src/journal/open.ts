import type { Backend, Logger } from '../core/index.js';
import { DEFAULTS, type JournalRetention, type WorkspaceFlags } from '../config/index.js';
import type { Vfs } from '../vfs/index.js';
import { ControlServer, type StagedControl } from './control.js';
import { type DenialSink, JournalService } from './service.js';
import { StateSpaceWatch } from './state-space.js';
import type { JournalRemote } from './remote.js';
import { RetentionRunner } from './retention.js';
import { newSessionId } from './session-id.js';
import type { JournalStage } from './stage.js';
import { checkStateDir, rememberWorkspace, resolveStateDir } from './state-dir.js';

/** What a mount knows about its workspace (app/workspace.ts OpenedWorkspace fits). */
export interface JournaledWorkspace {
  /** what the Vfs sits on */
  backend: Backend;
  /** the real store, when the Vfs sits on a policy view */
  store?: Backend;
  sourceDir?: string;
  /** present when a policy is in force (openWorkspace then refused a state dir inside any root) */
  policy?: unknown;
  /** session name from the mount file */
  session?: string;
  /** GCS: where the journal is mirrored (the bucket's reserved area) */
  journalRemote?: JournalRemote;
  /** the mount file's `journal:` retention (absent: keep everything) */
  retention?: JournalRetention;
  /** where a change refused because the state disk is full is told (the policy's denial log) */
  denials?: DenialSink;
  /** mount --staged */
  staged?: boolean;
}

export interface MountJournalFlags extends WorkspaceFlags {
  session?: string;
  actor?: string;
  mountpoint: string;
}

export interface MountJournal {
  readonly stage: JournalStage;
  readonly stateDir: string;
  readonly session: string;
  readonly service: JournalService;
  /** what the start found (torn tail cut, crash leftovers resolved), for the mount's banner */
  readonly startNote: string | undefined;
  /** a line for /.ledgerfs/usage when the state directory runs low on space, else null */
  spaceNote(): string | null;
  /** Start answering `ledgerfs rollback`/`gc` for this mount through its Vfs (and `freeze`/`apply`/`discard`, for a staged mount). */
  serve(vfs: Vfs, forgetCached: (paths: string[]) => Promise<void>, staged?: StagedControl): Promise<void>;
  close(): Promise<void>;
}

/**
 * Open the journal of a workspace for a mount: resolves the state directory (the same way the
 * journal commands do), refuses one the view could reach, takes the lock, recovers from a crash,
 * and returns the mutation stage to put after the policy stage.
 */
export async function openJournal(ws: JournaledWorkspace, flags: MountJournalFlags, log: Logger): Promise<MountJournal> {
  const stateDir = resolveStateDir(flags);
  checkStateDir(stateDir, { mountpoint: flags.mountpoint, rootsChecked: ws.policy !== undefined, ...(ws.sourceDir ? { sourceDir: ws.sourceDir } : {}) });
  const session = flags.session ?? ws.session ?? newSessionId();
  const service = await JournalService.open({
    stateDir, backend: ws.backend, source: (ws.store ?? ws.backend).location, session,
    actor: flags.actor ?? DEFAULTS.journal.mountActor, role: `mount ${flags.mountpoint}`, log, // a staged session writes nothing to the bucket, not even its journal, until apply
    remote: ws.staged ? undefined : ws.journalRemote, denials: ws.denials, ...(ws.staged ? { staged: true, pullOnly: ws.journalRemote } : {}),
  });
  rememberWorkspace(stateDir, flags);
  let control: ControlServer | null = null;
  const retention = ws.retention ? new RetentionRunner(service, stateDir, ws.retention, log) : null;
  const space = new StateSpaceWatch(stateDir, log);
  log.info({ state: stateDir, session }, 'journal open');
  return {
    stage: service.stage,
    stateDir,
    session,
    service,
    startNote: service.startNote,
    spaceNote: () => space.note(),
    async serve(vfs: Vfs, forgetCached: (paths: string[]) => Promise<void>, staged?: StagedControl) {
      service.attach(vfs);
      control = await ControlServer.start(service, { mountpoint: flags.mountpoint, forgetCached, log, ...(staged ? { staged } : {}) });
      retention?.start(DEFAULTS.journal.retentionFirstMs, DEFAULTS.journal.retentionIntervalMs);
      space.start(DEFAULTS.journal.spaceCheckMs);
    },
    async close() {
      retention?.stop();
      space.stop();
      try {
        await control?.close();
      } finally {
        await service.close();
      }
    },
  };
}
