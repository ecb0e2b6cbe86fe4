import { type Attr, type Mutation, type MutationStage, S_ISGID, S_ISUID, typeOfMode, VfsError } from '../core/index.js';
import type { Privileges } from '../config/index.js';
import type { DenialLog } from './denials.js';

/*
 * Changes only an operator should make from inside a workspace (issue 13.8): setuid/setgid
 * bits, giving a node away, device nodes. A program that could set S_ISUID on a file it made
 * (or chown it to root) plants a privileged binary in the host directory behind the mount; a
 * device node there opens the host's devices. The policy withholds them unless the mount file
 * grants them (`privileges:`); the PolicyStage asks here first, and a workspace without a
 * policy runs the PrivilegeStage below with POLICY_DEFAULTS.sourcePrivileges. Taking bits away
 * (the kernel clearing S_ISUID on a write or chown by someone else) is never refused.
 */

/** (uid_t)-1: "leave unchanged" */
const KEEP_ID = 0xffffffff;

/** The setid bits of `mode` that need the privilege on a node of this type (S_ISGID on a
 * directory only makes new entries inherit its group: anyone may set it). */
function setidBits(mode: number, dir: boolean): number {
  return mode & (dir ? S_ISUID : S_ISUID | S_ISGID);
}

/**
 * Whether `m` may need a privilege: only these go through the async check, so a create
 * without setid bits (every create) costs nothing here.
 */
export function mayNeedPrivilege(m: Mutation, p: Privileges): boolean {
  if (m.caller.operator === true) return false;
  switch (m.op) {
    case 'create':
    case 'chmod':
    case 'mknod':
      return (!p.setid && ((m.mode ?? 0) & (S_ISUID | S_ISGID)) !== 0) || (m.op === 'mknod' && !p.devices);
    case 'chown':
      // to "unchanged" or to the caller's own ids (cp -p, tar as the owner) needs no look at the node
      return !p.chown && (mayGiveAway(m.uid, m.caller.uid) || mayGiveAway(m.gid, m.caller.gid));
    default:
      return false;
  }
}

/** An id a chown asks for that could be someone else's (not "keep", not the caller's own). */
function mayGiveAway(to: number | undefined, own: number | undefined): boolean {
  return to !== undefined && to !== KEEP_ID && to !== -1 && to !== own;
}

/** Whether the check needs the node's current attributes (a chmod or chown of it). */
export function needsCurrent(m: Mutation): boolean {
  return m.op === 'chmod' || m.op === 'chown';
}

/** The refusal of `m`, or null. `current`: the node as it is (chmod, chown), null if unknown. */
export function privilegeRefusal(m: Mutation, p: Privileges, current: Attr | null): VfsError | null {
  const mode = m.mode ?? 0;
  switch (m.op) {
    case 'mknod': {
      const t = typeOfMode(mode);
      if ((t === 'chardev' || t === 'blockdev') && !p.devices) {
        return new VfsError('EPERM', `mknod ${m.path} refused: making ${t === 'chardev' ? 'character' : 'block'} device nodes is not allowed (privileges.devices in the mount file grants it)`);
      }
      if (!p.setid && setidBits(mode, false)) return setidRefusal('mknod', m.path, mode);
      return null;
    }
    case 'create':
      return !p.setid && setidBits(mode, false) ? setidRefusal('create', m.path, mode) : null;
    case 'chmod': {
      if (p.setid) return null;
      const dir = current?.type === 'dir';
      const added = setidBits(mode, dir) & ~(current ? setidBits(current.mode, dir) : 0);
      return added ? setidRefusal('chmod', m.path, mode) : null;
    }
    case 'chown': {
      if (p.chown) return null;
      const c = m.caller;
      const changes = (to: number | undefined, now: number | undefined, own: number | undefined) => mayGiveAway(to, own) && to !== now;
      if (changes(m.uid, current?.uid, c.uid) || changes(m.gid, current?.gid, c.gid)) {
        return new VfsError('EPERM', `chown ${m.path} to ${m.uid}:${m.gid} refused: giving a node to another user or group is not allowed (privileges.chown in the mount file grants it)`);
      }
      return null;
    }
    default:
      return null;
  }
}

function setidRefusal(op: string, path: string, mode: number): VfsError {
  return new VfsError('EPERM', `${op} ${path} with mode ${(mode & 0o7777).toString(8)} refused: setuid/setgid bits are not allowed (privileges.setid in the mount file grants it)`);
}

/**
 * The privilege rules alone, for a workspace without a policy (`--source DIR`): refusals are
 * logged like the policy's (warn, "denied by policy"). Every other mutation passes untouched.
 */
export class PrivilegeStage implements MutationStage {
  readonly name = 'privileges';

  constructor(
    private readonly privileges: Privileges,
    private readonly stat: (path: string) => Promise<Attr | null>,
    private readonly denials: DenialLog,
  ) {}

  run<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    if (!mayNeedPrivilege(m, this.privileges)) return apply();
    return this.judged(m, apply);
  }

  private async judged<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    const current = needsCurrent(m) ? await this.stat(m.path) : null;
    const e = privilegeRefusal(m, this.privileges, current);
    if (e) {
      this.denials.record(m.op, m.path, e, m.caller.pid);
      throw e;
    }
    return apply();
  }
}
