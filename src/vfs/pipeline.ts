import type { Backend } from '../backend/types.js';

/** Who asked, when the binding can tell us (fuse-native cannot; the native binding can). */
export interface Caller {
  uid?: number;
  gid?: number;
  pid?: number;
}

export type MutationOp =
  | 'create' | 'write' | 'truncate' | 'unlink' | 'mkdir' | 'rmdir' | 'rename' | 'symlink' | 'link'
  | 'chmod' | 'chown' | 'utimens' | 'setxattr' | 'removexattr';

/**
 * One mutation as the stages see it. `path` is the node changed; `target` is the second path of
 * rename/link (the new name) and the link text of symlink. Fields are filled as the op needs.
 */
export interface Mutation {
  op: MutationOp;
  path: string;
  target?: string;
  /** new size (truncate), or end offset of the write (write) */
  size?: number;
  /** bytes a write adds at `offset` */
  length?: number;
  offset?: number;
  mode?: number;
  uid?: number;
  gid?: number;
  xattr?: string;
  /**
   * For write and ftruncate through an open file: true on the first change since the path was
   * opened (the journal captures the before-image once per write session, not per request).
   */
  firstInSession?: boolean;
  caller: Caller;
}

/**
 * A stage wraps the application of a mutation: it may refuse (throw a VfsError) before calling
 * `apply`, record what it needs before and after, and must call `apply` at most once.
 * Policy and journal plug in here; the order is fixed by the Vfs: policy first, journal second,
 * so nothing refused is ever journaled and nothing unjournaled reaches the backend.
 */
export interface MutationStage {
  readonly name: string;
  run<T>(m: Mutation, apply: () => Promise<T>): Promise<T>;
  /**
   * A write session ended (fsync, or last close of a written file). `path` is where the file is
   * now, or null if it was unlinked while open. The data is already in the backend.
   */
  endWriteSession?(path: string | null, caller: Caller, reason: 'fsync' | 'close'): Promise<void>;
}

export class MutationPipeline {
  private readonly stages: MutationStage[];

  constructor(stages: MutationStage[] = []) {
    this.stages = stages;
  }

  get empty(): boolean {
    return this.stages.length === 0;
  }

  run<T>(m: Mutation, apply: () => Promise<T>): Promise<T> {
    if (this.stages.length === 0) return apply();
    const step = (i: number): Promise<T> =>
      i === this.stages.length ? apply() : (this.stages[i] as MutationStage).run(m, () => step(i + 1));
    return step(0);
  }

  async endWriteSession(path: string | null, caller: Caller, reason: 'fsync' | 'close'): Promise<void> {
    for (const s of this.stages) if (s.endWriteSession) await s.endWriteSession(path, caller, reason);
  }
}

export type { Backend };
