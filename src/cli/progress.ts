// Progress of a long CLI job on stderr. On a terminal: one line redrawn in place (a bar, the count,
// the rate and the time left). Elsewhere (piped or redirected stderr, CI logs): a plain line at most
// every few seconds, none for jobs that end before the first one is due, so short runs stay clean.
// `maxsim --quiet` turns both off.

const BAR_WIDTH = 24;
const REDRAW_MS = 100;
/** Plain-line period off a terminal; MAXSIM_PROGRESS_SECONDS overrides it (tests use a short one). */
function plainPeriodMs(): number {
  const s = Number(process.env.MAXSIM_PROGRESS_SECONDS);
  return Number.isFinite(s) && s >= 0 ? s * 1000 : 5000;
}

function duration(seconds: number): string {
  if (!Number.isFinite(seconds)) return '?';
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

function count(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

export class Progress {
  /** Set by `maxsim --quiet`: no progress output at all. */
  static quiet = false;

  private readonly mode: 'tty' | 'plain' | 'off';
  private readonly started = Date.now();
  private readonly period: number;
  private lastDraw = 0;
  private drawn = false;
  private lastDone = 0;
  private shownDone = -1;

  constructor(
    private readonly label: string,
    private readonly total: number,
    private readonly stream: NodeJS.WriteStream = process.stderr,
  ) {
    this.mode = Progress.quiet || !(total > 0) ? 'off' : stream.isTTY === true ? 'tty' : 'plain';
    this.period = this.mode === 'tty' ? REDRAW_MS : plainPeriodMs();
    // the first plain line is due one period after the start
    this.lastDraw = this.mode === 'plain' ? this.started : 0;
  }

  /** "done/total (p%), rate/s, ETA t" */
  private status(done: number): string {
    const fraction = Math.min(1, Math.max(0, done / this.total));
    const elapsed = (Date.now() - this.started) / 1000;
    const rate = elapsed > 0 ? done / elapsed : Number.NaN;
    const eta = rate > 0 ? (this.total - done) / rate : Number.POSITIVE_INFINITY;
    const parts = [`${count(done)}/${count(this.total)} (${Math.floor(fraction * 100)}%)`];
    if (Number.isFinite(rate) && done > 0) parts.push(`${count(rate)}/s`);
    parts.push(done >= this.total ? `done in ${duration(elapsed)}` : `ETA ${duration(eta)}`);
    return parts.join(', ');
  }

  /** Shows `done` of `total` steps (throttled; on a terminal the last step always draws). */
  update(done: number): void {
    this.lastDone = done;
    if (this.mode === 'off') return;
    const now = Date.now();
    const last = this.mode === 'tty' && done >= this.total;
    if (!last && now - this.lastDraw < this.period) return;
    this.lastDraw = now;
    if (this.mode === 'tty') {
      const fraction = Math.min(1, Math.max(0, done / this.total));
      const filled = Math.round(fraction * BAR_WIDTH);
      const bar = '#'.repeat(filled) + '-'.repeat(BAR_WIDTH - filled);
      this.stream.write(`\r\x1b[K${this.label} [${bar}] ${this.status(done)}`);
    } else {
      this.stream.write(`${this.label}: ${this.status(done)}\n`);
    }
    this.shownDone = done;
    this.drawn = true;
  }

  /** Shows a status text instead of a count, for steps that have none (throttled). */
  note(message: string): void {
    if (this.mode === 'off') return;
    const now = Date.now();
    if (now - this.lastDraw < this.period) return;
    this.lastDraw = now;
    if (this.mode === 'tty') this.stream.write(`\r\x1b[K${this.label}: ${message}`);
    else this.stream.write(`${this.label}: ${message}\n`);
    this.drawn = true;
  }

  /** Ends the progress of a failed or interrupted run: a terminal line is erased, nothing more is said. */
  abandon(): void {
    if (this.drawn && this.mode === 'tty') this.stream.write('\r\x1b[K');
    this.drawn = false;
  }

  /** Ends the progress: a terminal line is erased; off a terminal a final line closes what was shown. */
  finish(): void {
    if (this.drawn && this.mode === 'tty') this.stream.write('\r\x1b[K');
    else if (this.drawn && this.mode === 'plain' && this.lastDone !== this.shownDone)
      this.stream.write(`${this.label}: ${this.status(this.lastDone)}\n`);
    this.drawn = false;
  }
}
