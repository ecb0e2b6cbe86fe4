/**
 * A progress bar on stderr for long work (rollback, verify). It appears only once the work has
 * taken more than a second, and only on a terminal (LEDGERFS_PROGRESS=1 forces it, e.g. under
 * `script`), so quick runs and scripts see nothing.
 */
export class Progress {
  private readonly started = Date.now();
  private shown = false;
  private lastDraw = 0;
  private readonly enabled: boolean;

  constructor(
    private readonly label: string,
    private readonly stream: NodeJS.WriteStream = process.stderr,
  ) {
    this.enabled = stream.isTTY === true || process.env.LEDGERFS_PROGRESS === '1';
  }

  update(done: number, total: number): void {
    if (!this.enabled) return;
    const now = Date.now();
    if (now - this.started < 1000 || (now - this.lastDraw < 100 && done < total)) return;
    this.lastDraw = now;
    this.shown = true;
    const width = 30;
    const frac = total > 0 ? Math.min(1, done / total) : 1;
    const fill = Math.round(frac * width);
    const secs = ((now - this.started) / 1000).toFixed(1);
    this.stream.write(`\r${this.label} [${'#'.repeat(fill)}${'.'.repeat(width - fill)}] ${done}/${total} ${Math.round(frac * 100)}% ${secs}s`);
  }

  finish(): void {
    if (this.shown) this.stream.write('\n');
    this.shown = false;
  }
}
