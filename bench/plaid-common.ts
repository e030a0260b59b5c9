// What the plaid benchmarks share: command-line flags, grid cells and percentiles.
import type { IndexInteraction } from '../src/plaid/plaid.js';

/** The value after --name on the command line, or def. */
export function arg(name: string, def: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : def;
}

/** The p-quantile (0..1) of xs, nearest rank from below. */
export function pct(xs: number[], p: number): number {
  if (xs.length === 0) return Number.NaN; // nothing timed (e.g. --single 0)
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
}

/**
 * One grid cell: 'def' (defaultSearch) or NPROBExCANDIDATESxRESCORE, then optionally xINTERACTION
 * ('lists' when left out) and xpPRUNE (the residual stage's token pruning; the default when left out).
 */
export function gridCell(
  g: string,
  def: { nprobe: number; candidates: number; rescore: number; prune: number; interaction: IndexInteraction },
): { nprobe: number; candidates: number; rescore: number; prune: number; interaction: IndexInteraction } {
  if (g === 'def') return { ...def };
  const parts = g.split('x');
  const [nprobe, candidates, rescore] = parts.slice(0, 3).map(Number);
  let interaction: IndexInteraction = 'lists';
  let prune = def.prune;
  let ok = [nprobe, candidates, rescore].every(Number.isInteger);
  for (const p of parts.slice(3)) {
    if (['lists', 'bags', 'hybrid'].includes(p)) interaction = p as IndexInteraction;
    else if (/^p(\d+(\.\d*)?|inf)$/.test(p))
      prune = p === 'pinf' ? Number.POSITIVE_INFINITY : Number(p.slice(1));
    else ok = false;
  }
  if (!ok)
    throw new Error(
      `grid cell '${g}': expected def or NPROBExCANDIDATESxRESCORE[xlists|bags|hybrid][xpPRUNE|xpinf]`,
    );
  return { nprobe, candidates, rescore, prune, interaction };
}
