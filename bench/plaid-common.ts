// What the plaid benchmarks share: command-line flags, grid cells and percentiles.
import type { IndexInteraction } from '../src/plaid/plaid.js';

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

/**
 * One grid cell: 'def' (defaultSearch) or NPROBExCANDIDATESxRESCORE[xINTERACTION] (interaction
 * 'lists' when left out).
 */
export function gridCell(
  g: string,
  def: { nprobe: number; candidates: number; rescore: number; interaction: IndexInteraction },
): { nprobe: number; candidates: number; rescore: number; interaction: IndexInteraction } {
  if (g === 'def') return { ...def };
  const [nprobe, candidates, rescore] = g.split('x').slice(0, 3).map(Number);
  const interaction = (g.split('x')[3] ?? 'lists') as IndexInteraction;
  if (
    ![nprobe, candidates, rescore].every(Number.isInteger) ||
    !['lists', 'bags', 'hybrid'].includes(interaction)
  )
    throw new Error(`grid cell '${g}': expected def or NPROBExCANDIDATESxRESCORE[xlists|bags|hybrid]`);
  return { nprobe, candidates, rescore, interaction };
}
