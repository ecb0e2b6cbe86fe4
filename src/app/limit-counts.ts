import fs from 'node:fs';
import path from 'node:path';
import { DEFAULTS } from '../config/index.js';
import { type Logger, replaceFile, replaceFileSync } from '../core/index.js';
import { stateLayout } from '../journal/index.js';
import type { ChangeLimits, LimitCountsSnapshot } from '../policy/index.js';

/**
 * The mass-change guard counts per session, not per mount: a session remounted (`--session ID`,
 * or a staged session resumed) goes on from what it had counted, so unmount and mount again is
 * no way around `limits:`. The counts are kept in the state directory, rewritten (fsynced, by
 * rename) at most every DEFAULTS.limitCountsSaveMs while they change and at unmount; a daemon
 * killed outright loses at most that last moment of counts.
 */
export class LimitCountsKeeper {
  /** ChangeLimits.version when the counts were last kept (or found) */
  private kept: number;
  private timer: NodeJS.Timeout | undefined;

  private constructor(
    private readonly limits: ChangeLimits,
    private readonly file: string,
    private readonly log: Logger,
  ) {
    this.kept = limits.version;
  }

  static fileOf(stateDir: string, session: string): string {
    return path.join(stateLayout(stateDir).limitCountsDir, `${session}.json`);
  }

  /** Take up the session's earlier counts (if any) and keep them from now on. */
  static start(limits: ChangeLimits, stateDir: string, session: string, log: Logger): LimitCountsKeeper {
    const file = LimitCountsKeeper.fileOf(stateDir, session);
    let earlier: LimitCountsSnapshot | null = null;
    try {
      earlier = JSON.parse(fs.readFileSync(file, 'utf8')) as LimitCountsSnapshot;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') log.warn({ file, err: (err as Error).message }, 'limits: the counts of an earlier mount of this session cannot be read; counting from zero');
    }
    if (earlier) {
      limits.restore(earlier);
      log.info({ session, counts: earlier.session }, 'limits: going on from the counts of an earlier mount of this session');
    }
    const k = new LimitCountsKeeper(limits, file, log);
    k.timer = setInterval(() => {
      k.inflight ??= k.saveSoon().finally(() => (k.inflight = null));
    }, DEFAULTS.limitCountsSaveMs);
    k.timer.unref();
    return k;
  }

  /** the timer's write under way: stop() waits for it, so an older write never lands last */
  private inflight: Promise<void> | null = null;

  /** save() on the thread pool (the timer's: an fsync on the event loop would stall every request). */
  private async saveSoon(): Promise<void> {
    const version = this.limits.version;
    if (version === this.kept) return;
    try {
      await fs.promises.mkdir(path.dirname(this.file), { recursive: true, mode: 0o700 });
      await replaceFile(this.file, this.serialized());
      this.kept = version;
    } catch (err) {
      this.failed(err);
    }
  }

  /** Write the counts if they changed since the last write (at unmount: synchronously). */
  save(): void {
    const version = this.limits.version;
    if (version === this.kept) return;
    try {
      fs.mkdirSync(path.dirname(this.file), { recursive: true, mode: 0o700 });
      replaceFileSync(this.file, this.serialized());
      this.kept = version;
    } catch (err) {
      this.failed(err);
    }
  }

  private serialized(): string {
    return JSON.stringify(this.limits.snapshot()) + '\n';
  }

  private failed(err: unknown): void {
    this.log.warn({ file: this.file, err: (err as Error).message }, 'limits: cannot keep the session\'s counts (a remount would count from what was kept last)');
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.inflight;
    this.save();
  }
}
