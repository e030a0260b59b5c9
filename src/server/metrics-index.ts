// The metrics of the search paths: passes by path (index, scan) and, through the index, each
// stage's time and candidates per pass (the pass's queries summed).
import * as prom from 'prom-client';
import type { PassStats } from './index-path.js';

export function createSearchMetrics(registry: prom.Registry): (s: PassStats) => void {
  const passes = new prom.Counter({
    name: 'maxsim_search_passes_total',
    help: "search passes by path: index (through the corpus's index) or scan (the full scan), and the scores they returned (exact or residual)",
    labelNames: ['path', 'scores'] as const,
    registers: [registry],
  });
  const stageSeconds = new prom.Histogram({
    name: 'maxsim_index_stage_seconds',
    help: 'time of an index stage in one search pass (its queries summed): centroids, candidates, interaction, residual, rescore',
    labelNames: ['stage'] as const,
    buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5],
    registers: [registry],
  });
  const stageCandidates = new prom.Histogram({
    name: 'maxsim_index_stage_candidates',
    help: 'documents an index stage produced in one search pass (centroids: centroids probed)',
    labelNames: ['stage'] as const,
    buckets: [1, 10, 100, 1000, 10_000, 100_000, 1_000_000],
    registers: [registry],
  });
  return (s) => {
    passes.inc({ path: s.path, scores: s.scores });
    for (const stage of s.index?.stages ?? []) {
      stageSeconds.observe({ stage: stage.name }, stage.ms / 1000);
      stageCandidates.observe({ stage: stage.name }, stage.candidates);
    }
  };
}
