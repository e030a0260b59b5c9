// Timing helper shared by the benches: the cases run interleaved, round after round, so that a
// machine whose speed drifts (this VM's does, by ±30%) treats them alike; medians per case.

/** Median milliseconds (and every round's) per case, after `warmups` untimed rounds. */
export async function interleavedMedians(
  cases: Record<string, () => Promise<unknown>>,
  rounds: number,
  warmups = 1,
): Promise<Record<string, { median: number; rounds: number[] }>> {
  const times: Record<string, number[]> = Object.fromEntries(Object.keys(cases).map((n) => [n, []]));
  for (let w = 0; w < warmups; w++) for (const run of Object.values(cases)) await run();
  for (let r = 0; r < rounds; r++) {
    for (const [name, run] of Object.entries(cases)) {
      const t = performance.now();
      await run();
      times[name].push(performance.now() - t);
    }
  }
  const median = (x: number[]) => [...x].sort((a, b) => a - b)[x.length >> 1];
  return Object.fromEntries(Object.entries(times).map(([n, t]) => [n, { median: median(t), rounds: t }]));
}
