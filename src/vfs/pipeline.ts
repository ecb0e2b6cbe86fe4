import type { Backend, Caller, Mutation, MutationStage } from '../core/index.js';
import type { OpenFile } from './open-files.js';

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

  async endWriteSession(path: string | null, caller: Caller, reason: 'fsync' | 'close', file?: OpenFile): Promise<void> {
    for (const s of this.stages) if (s.endWriteSession) await s.endWriteSession(path, caller, reason, file);
  }

  async durable(): Promise<void> {
    for (const s of this.stages) if (s.durable) await s.durable();
  }

  async released(file: OpenFile): Promise<void> {
    for (const s of this.stages) if (s.released) await s.released(file);
  }

  async openingForWrite(path: string, caller: Caller): Promise<void> {
    for (const s of this.stages) if (s.openingForWrite) await s.openingForWrite(path, caller);
  }
}

export type { Backend };
