// A one-line progress bar on stderr, redrawn in place. Only on a terminal: piped or redirected stderr gets
// nothing, so logs and captured output stay clean.

const BAR_WIDTH = 24;
const REDRAW_MS = 100;

export class Progress {
  private readonly enabled: boolean;
  private lastDraw = 0;
  private drawn = false;

  constructor(
    private readonly label: string,
    private readonly total: number,
    private readonly stream: NodeJS.WriteStream = process.stderr,
  ) {
    this.enabled = stream.isTTY === true && total > 0;
  }

  /** Shows `done` of `total` steps (throttled; the last step always draws). */
  update(done: number): void {
    if (!this.enabled) return;
    const now = Date.now();
    if (done < this.total && now - this.lastDraw < REDRAW_MS) return;
    this.lastDraw = now;
    const fraction = Math.min(1, Math.max(0, done / this.total));
    const filled = Math.round(fraction * BAR_WIDTH);
    const bar = '#'.repeat(filled) + '-'.repeat(BAR_WIDTH - filled);
    this.stream.write(`\r\x1b[K${this.label} [${bar}] ${done}/${this.total}`);
    this.drawn = true;
  }

  /** Shows a status text instead of a bar, for steps that have no count (throttled). */
  note(message: string): void {
    if (!this.enabled) return;
    const now = Date.now();
    if (now - this.lastDraw < REDRAW_MS) return;
    this.lastDraw = now;
    this.stream.write(`\r\x1b[K${this.label}: ${message}`);
    this.drawn = true;
  }

  /** Erases the bar so the next output starts on a clean line. */
  finish(): void {
    if (this.drawn) this.stream.write('\r\x1b[K');
    this.drawn = false;
  }
}
