// What the plaid benchmarks share: command-line flags and percentiles.

/** The value after --name on the command line, or def. */
export function arg(name: string, def: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : def;
}

/** The p-quantile (0..1) of xs, nearest rank from below. */
export function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
}
