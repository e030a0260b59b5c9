// The index's defaults: K for a token count, and the search settings for k hits over a corpus size
// (from the measured curves of bench/results/plaid-cpu.md; docs/index.md explains them).

import { InvalidArgumentError } from '../errors.js';
import { expectInteger } from '../tensor.js';

/** How reached documents are scored before the residual stage (IndexSearchOptions.interaction). */
export type IndexInteraction = 'lists' | 'bags' | 'hybrid';
export const INTERACTIONS: readonly IndexInteraction[] = ['lists', 'bags', 'hybrid'];

/** PLAID's K: 2^floor(log2(16 sqrt(tokens))), at least 1 and at most the token count. */
export function defaultCentroids(tokens: number): number {
  if (tokens < 1) return 1;
  return Math.max(1, Math.min(tokens, 2 ** Math.floor(Math.log2(16 * Math.sqrt(tokens)))));
}

/**
 * The search defaults for k hits over `docs` documents (default 100,000), from the recall / latency
 * curves of bench/results/plaid-cpu.md (structured synthetic corpus, 64 tokens per document, d = 128,
 * K = defaultCentroids, 2-bit): the probes and candidates grow with sqrt(docs / 100K) (nprobe 16 and
 * 4,096 candidates at 100K, 64 and 13,312 at 1M), re-scoring max(10 k, 512 max(1, round(sqrt(docs
 * / 1M)))) (k = 10: 512 holds recall@10 at 100K and 1M; k = 100 wants ~1,000); the residual
 * stage's token pruning at 0.25 (IndexSearchOptions.prune).
 */
export function defaultSearch(
  k: number,
  docs = 100_000,
): { nprobe: number; candidates: number; rescore: number; prune: number; interaction: 'lists' } {
  const scale = Math.sqrt(Math.max(1, docs) / 100_000);
  const nprobe = Math.min(128, 2 ** Math.ceil(Math.log2(Math.max(8, 16 * scale))));
  const candidates = Math.max(20 * k, 1024 * Math.max(1, Math.round(4 * scale)));
  // bench/results/plaid-cpu.md: at 1M, k = 10 re-scored 512 keeps recall@10 0.980 (1,024: 0.980) and
  // halves the re-score (the exact MaxSim of 1,024 documents costs as much as the centroid products)
  const rescore = Math.max(10 * k, 512 * Math.max(1, Math.round(Math.sqrt(Math.max(1, docs) / 1_000_000))));
  // bench/results/plaid-cpu.md: at 1M, 0.15-0.35 keep recall@10 / @100 and cut the residual stage by 25%
  const prune = 0.25;
  return { nprobe, candidates, rescore, prune, interaction: 'lists' };
}

/** A search's k, probes, candidates, re-scored count, threshold and prune: given, or the defaults; checked. */
export function searchSettings(
  options: {
    k: number;
    nprobe?: number;
    candidates?: number;
    rescore?: number;
    threshold?: number;
    prune?: number;
  },
  docs: number,
): { k: number; nprobe: number; candidates: number; rescore: number; threshold: number; prune: number } {
  const k = expectInteger('options.k', options.k, 1);
  const def = defaultSearch(k, docs);
  const nprobe = expectInteger('options.nprobe', options.nprobe ?? def.nprobe, 1);
  const candidates = expectInteger('options.candidates', options.candidates ?? def.candidates, 1);
  const rescore = expectInteger('options.rescore', options.rescore ?? def.rescore, k);
  const threshold = options.threshold ?? Number.NEGATIVE_INFINITY;
  if (typeof threshold !== 'number' || Number.isNaN(threshold))
    throw new InvalidArgumentError('options.threshold', 'a number', String(threshold));
  const prune = options.prune ?? def.prune;
  if (typeof prune !== 'number' || !(prune >= 0))
    throw new InvalidArgumentError('options.prune', 'a number >= 0 (Infinity: no pruning)', String(prune));
  return { k, nprobe, candidates, rescore, threshold, prune };
}
