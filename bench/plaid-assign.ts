// The two-level centroid assignment against the exact one (native/cpu/residual.h, ResidualGroups):
// k-means centroids fitted once on a sample, then every token of a streamed synthetic corpus assigned
// exactly and through G coarse groups with P probed: the share of tokens assigned differently, the
// mean squared distance to the assigned centroid (grouped / exact), and the time of each.
//
// Run: node dist/bench/plaid-assign.js [--docs 20000] [--length 64] [--dim 128] [--topics 2000]
//        [--centroids 2048] [--groups G] [--probes 1,2,4,8] [--sample 131072]
import os from 'node:os';
import { buildGroups, defaultGroupCount, kmeans } from '../src/plaid/kmeans.js';
import { residualAddon } from '../src/plaid/native.js';
import { streamedDocuments, streamedSynthetic } from '../src/plaid/synthetic.js';
import { arg } from './plaid-common.js';

const DOCS = Number(arg('docs', '20000'));
const LEN = Number(arg('length', '64'));
const D = Number(arg('dim', '128'));
const K = Number(arg('centroids', '2048'));
const G = Number(arg('groups', String(defaultGroupCount(K))));
const PROBES = arg('probes', '1,2,4,8').split(',').map(Number);
const SAMPLE = Number(arg('sample', String(64 * K)));

const gen = streamedSynthetic({
  docs: DOCS,
  length: LEN,
  dim: D,
  topics: Number(arg('topics', '2000')),
  seed: 1,
});
const { data } = streamedDocuments(gen, 0, DOCS);
const n = data.length / D;
const step = Math.max(1, Math.floor(n / SAMPLE));
const sample = new Float32Array(Math.floor(n / step) * D);
for (let i = 0; i < sample.length / D; i++) sample.set(data.subarray(i * step * D, i * step * D + D), i * D);
let t = performance.now();
const km = await kmeans(sample, D, K, { seed: 1, iterations: 4 });
console.log(
  `${n} tokens, K = ${K} (k-means on ${sample.length / D} rows, 4 iterations: ${((performance.now() - t) / 1000).toFixed(1)} s), load ${os.loadavg()[0].toFixed(1)}`,
);
const a = residualAddon();
const sqDist = (ids: Int32Array) => {
  let s = 0;
  for (let i = 0; i < n; i++)
    for (let k = 0; k < D; k++) {
      const e = data[i * D + k] - km.centroids[ids[i] * D + k];
      s += e * e;
    }
  return s / n;
};
t = performance.now();
const exact = (await a.assign(data, km.centroids, D, true, {})).ids;
const exactMs = performance.now() - t;
const exactSq = sqDist(exact);
console.log(
  `exact: ${(exactMs / 1000).toFixed(2)} s, mean squared distance ${exactSq.toFixed(5)}, load ${os.loadavg()[0].toFixed(1)}`,
);
console.log('groups probe | differing share | squared distance / exact | s | x exact speed | load');
for (const p of PROBES) {
  const groups = await buildGroups(km.centroids, D, G, p, { seed: 1 });
  t = performance.now();
  const ids = (await a.assign(data, km.centroids, D, true, { groups })).ids;
  if (p === PROBES[0]) {
    // group sizes, and the mean size of the group holding each token's exact centroid (the work per probe)
    const groupOf = new Int32Array(K);
    const sizes: number[] = [];
    for (let j = 0; j + 1 < groups.offsets.length; j++) {
      sizes.push(groups.offsets[j + 1] - groups.offsets[j]);
      for (let m = groups.offsets[j]; m < groups.offsets[j + 1]; m++) groupOf[groups.members[m]] = j;
    }
    let w = 0;
    for (let i = 0; i < n; i++) w += sizes[groupOf[exact[i]]];
    console.log(
      `group sizes: max ${Math.max(...sizes)}, mean ${(K / sizes.length).toFixed(1)}, token-weighted ${(w / n).toFixed(1)}`,
    );
  }
  const ms = performance.now() - t;
  let diff = 0;
  for (let i = 0; i < n; i++) if (ids[i] !== exact[i]) diff++;
  console.log(
    `${G} ${p} | ${(diff / n).toFixed(4)} | ${(sqDist(ids) / exactSq).toFixed(4)} | ${(ms / 1000).toFixed(2)} | ${(exactMs / ms).toFixed(1)}x | ${os.loadavg()[0].toFixed(1)}`,
  );
}
