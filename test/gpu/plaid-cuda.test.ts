// The compressed index on CUDA (src/plaid/cuda-*.ts, native/cuda/plaid_*.cc, kernels/maxsim_plaid.cu):
// the assignment and the encode bitwise the CPU's (exact and two-level, K not a multiple of the
// tiles, d = 32 / 64 / 96 / 128, 2 and 4 bits, float32 / float16 / bfloat16, ragged documents, tied
// centroids); each search stage against the CPU run of the same stage (probe sets against float64
// dots, candidates as the union of the probed lists, interaction and residual scores bitwise the CPU
// kernels', the kept set as the exact top-n, residual scores against the float64 MaxSim of the
// decoded vectors); end-to-end hits equal to the CPU index search; bad inputs. Skips without a GPU.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { InvalidArgumentError } from '../../src/errors.js';
import { decodeToFloat32, encodeFloats } from '../../src/floats.js';
import { decodeTokens, tablesOf } from '../../src/plaid/codec.js';
import { plaidCuda } from '../../src/plaid/cuda-native.js';
import { bytesPerQuery } from '../../src/plaid/cuda-plan.js';
import { cudaSearchBatch } from '../../src/plaid/cuda-search.js';
import { residualAddon } from '../../src/plaid/native.js';
import { buildIndex, PlaidIndex } from '../../src/plaid/plaid.js';
import { syntheticCorpus, syntheticQueries } from '../../src/plaid/synthetic.js';
import { type FloatDType, raggedBatch, type TokenBatch } from '../../src/tensor.js';
import { rng, runSeed } from '../helpers.js';
import { skip } from './helpers.js';

const addon = residualAddon();
// the CPU kernel set whose arithmetic the GPU mirrors (portable may not fuse the multiply-add)
// the fp32 FMA kernel set the GPU stages follow (avx512vnni scores the residuals in int8)
const fmaIsa = addon.isas().find((i) => i !== 'portable' && i !== 'avx512vnni');

function corpus(
  docs: number,
  length: [number, number],
  dim: number,
  seed: number,
  dtype: FloatDType = 'float32',
) {
  const c = syntheticCorpus({ docs, length, dim, topics: 24, seed });
  const data = dtype === 'float32' ? c.data : encodeFloats(c.data, dtype);
  return { c, batch: raggedBatch(data as never, c.offsets, { dim, dtype }) };
}

function sameInts(a: ArrayLike<number>, b: ArrayLike<number>, what: string) {
  assert.equal(a.length, b.length, `${what}: length`);
  for (let i = 0; i < a.length; i++)
    if (a[i] !== b[i]) assert.fail(`${what}: [${i}] ${a[i]} != ${b[i]} (seed ${runSeed})`);
}

function sameBits(a: Float32Array, b: Float32Array, what: string) {
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  assert.equal(a.length, b.length, `${what}: length`);
  for (let i = 0; i < a.length; i++)
    if (ua[i] !== ub[i] && !(a[i] === 0 && b[i] === 0))
      assert.fail(`${what}: [${i}] ${a[i]} != ${b[i]} (seed ${runSeed})`);
}

describe('CUDA plaid codec', { skip }, () => {
  test('assignment bitwise the CPU: random rows, awkward K, tied centroids, exact and two-level', async () => {
    const rand = rng(runSeed);
    const cu = plaidCuda();
    for (const [n, k, d] of [
      [1, 1, 32],
      [70, 37, 64],
      [1000, 300, 96],
      [5000, 129, 128],
      [3, 1000, 33],
    ]) {
      const x = Float32Array.from({ length: n * d }, () => rand() * 2 - 1);
      const c = Float32Array.from({ length: k * d }, () => rand() * 2 - 1);
      if (k > 3) c.copyWithin(2 * d, 0, d); // centroid 2 = centroid 0: ties go to 0
      const cpu = await addon.assign(x, c, d, true, { isa: fmaIsa });
      const enc = await cu.plaidEncoder(0, { centroids: c, d, bits: 2 });
      const gpu = await cu.plaidAssign(enc, x);
      sameInts(gpu.ids, cpu.ids, `exact assign n=${n} k=${k} d=${d}`);
      sameBits(gpu.scores, cpu.scores, `exact assign scores n=${n} k=${k} d=${d}`);
      // two-level: groups from a seeded partition of the centroids
      const g = Math.max(1, Math.min(k, 7));
      const offsets = new Int32Array(g + 1);
      const owner = Int32Array.from({ length: k }, (_, i) => (i * 5 + 3) % g);
      for (let i = 0; i < k; i++) offsets[owner[i] + 1]++;
      for (let j = 0; j < g; j++) offsets[j + 1] += offsets[j];
      const members = new Int32Array(k);
      const cur = offsets.slice(0, g);
      for (let i = 0; i < k; i++) members[cur[owner[i]]++] = i;
      const coarse = Float32Array.from({ length: g * d }, () => rand() * 2 - 1);
      const groups = { coarse, offsets, members, probe: Math.min(3, g) };
      const cpuG = await addon.assign(x, c, d, true, { isa: fmaIsa, groups });
      const encG = await cu.plaidEncoder(0, { centroids: c, d, bits: 2, groups });
      const gpuG = await cu.plaidAssign(encG, x);
      sameInts(gpuG.ids, cpuG.ids, `grouped assign n=${n} k=${k} d=${d}`);
      sameBits(gpuG.scores, cpuG.scores, `grouped assign scores n=${n} k=${k} d=${d}`);
    }
  });

  for (const [d, bits, dtype, assignment, k] of [
    [32, 2, 'float32', 'exact', 37],
    [64, 4, 'float16', 'exact', 100],
    [96, 2, 'bfloat16', 'grouped', 130],
    [128, 4, 'float16', 'grouped', 257],
    [128, 2, 'float16', 'exact', 512],
  ] as const) {
    test(`buildIndex backend cuda = cpu, bitwise (d ${d}, ${bits}-bit, ${dtype}, ${assignment}, K ${k})`, async () => {
      const { batch } = corpus(300, [1, 40], d, runSeed % 1000, dtype);
      const o = { centroids: k, bits, seed: 7, iterations: 3, assignment, groups: 9, probe: 3 } as const;
      const cpu = await buildIndex(batch, { ...o, backend: 'cpu', isa: fmaIsa });
      const gpu = await buildIndex(batch, { ...o, backend: 'cuda' });
      assert.equal(gpu.buildStats.backend, 'cuda');
      sameBits(gpu.native.centroids, cpu.native.centroids, 'centroids');
      sameInts(gpu.native.cids, cpu.native.cids, 'cids');
      sameInts(gpu.native.codes, cpu.native.codes, 'codes');
      sameInts(gpu.native.bags, cpu.native.bags, 'bags');
      sameInts(gpu.native.ivf, cpu.native.ivf, 'ivf');
      const rel = Math.abs(gpu.buildStats.meanSquaredError - cpu.buildStats.meanSquaredError);
      assert.ok(
        rel <= 1e-9 * cpu.buildStats.meanSquaredError + 1e-30,
        'squared error (summed in another order)',
      );
    });
  }

  test('the default two-level assignment from GROUPED_FROM centroids up (K = 8192): bitwise the CPU', async () => {
    const { batch } = corpus(600, [20, 48], 64, runSeed % 983, 'float16');
    const o = { centroids: 8192, seed: 11, iterations: 2 } as const;
    const cpu = await buildIndex(batch, { ...o, backend: 'cpu', isa: fmaIsa });
    const gpu = await buildIndex(batch, { ...o, backend: 'cuda' });
    assert.equal(cpu.buildStats.assignment, 'grouped');
    assert.equal(gpu.buildStats.groups, cpu.buildStats.groups);
    sameBits(gpu.native.centroids, cpu.native.centroids, 'centroids (K 8192)');
    sameInts(gpu.native.cids, cpu.native.cids, 'cids (K 8192)');
    sameInts(gpu.native.codes, cpu.native.codes, 'codes (K 8192)');
  });

  test('a document slice boundary inside a 16-token block: codes or-ed in', async () => {
    const { batch } = corpus(2000, [3, 9], 64, runSeed % 997);
    const cpu = await buildIndex(batch, {
      centroids: 64,
      seed: 3,
      iterations: 1,
      backend: 'cpu',
      isa: fmaIsa,
    });
    const gpu = await buildIndex([batch, batch], { centroids: 64, seed: 3, iterations: 1, backend: 'cuda' });
    const cpu2 = await buildIndex([batch, batch], {
      centroids: 64,
      seed: 3,
      iterations: 1,
      backend: 'cpu',
      isa: fmaIsa,
    });
    sameInts(gpu.native.codes, cpu2.native.codes, 'codes over two parts');
    sameInts(gpu.native.cids, cpu2.native.cids, 'cids over two parts');
    assert.ok(cpu.count * 2 === gpu.count);
  });
});

async function searchIndex(dim = 64): Promise<{
  index: PlaidIndex;
  queries: TokenBatch;
  c: ReturnType<typeof corpus>['c'];
}> {
  const { c, batch } = corpus(3000, [4, 48], dim, runSeed % 1009, 'float16');
  const index = await buildIndex(batch, { centroids: 200, seed: 5, iterations: 3, backend: 'cuda' });
  const q = syntheticQueries(c, 12, 32, dim, runSeed % 1013);
  const lens = Array.from({ length: 12 }, (_, i) => (i === 3 ? 1 : i === 5 ? 17 : 32));
  const offsets = [0];
  for (let i = 0; i < 12; i++) offsets.push(offsets[i] + lens[i]);
  const data = new Float32Array(offsets[12] * dim);
  for (let i = 0; i < 12; i++)
    data.set(q.data.subarray(i * 32 * dim, (i * 32 + lens[i]) * dim), offsets[i] * dim);
  return { index, queries: raggedBatch(data, offsets, { dim }), c };
}

/** The same index with 2-bit weights no longer evenly spaced (code 1 moved by a third of a step). */
function unevenWeights(index: PlaidIndex): PlaidIndex {
  const { d, bits } = index.buckets;
  const weights = Float32Array.from(index.buckets.weights);
  for (let k = 0; k < d; k++) weights[k * 4 + 1] += (weights[k * 4 + 3] - weights[k * 4]) / 9;
  const tables = tablesOf(weights, d, bits);
  const native = { ...index.native, tables };
  return new PlaidIndex(
    native,
    { ...index.buckets, weights, tables },
    index.sourceTokens(),
    index.buildStats,
  );
}

function queryRows(queries: TokenBatch, i: number): Float32Array {
  const s = queries.starts[i] * queries.dim;
  return decodeToFloat32(
    queries.data.subarray(s, s + queries.lengths[i] * queries.dim) as Float32Array,
    'float32',
    queries.dim,
  );
}

describe('CUDA plaid search', { skip }, () => {
  test('every stage against the CPU run of the same stage', async () => {
    const { index, queries } = await searchIndex();
    const ix = index.native;
    for (const [nprobe, candidates, threshold] of [
      [4, 64, Number.NEGATIVE_INFINITY],
      [9, 500, Number.NEGATIVE_INFINITY],
      [2, 40, 0.3],
    ]) {
      const r = await cudaSearchBatch(index, queries, {
        k: 10,
        nprobe,
        candidates,
        rescore: 30,
        threshold,
        stages: true,
        precision: 'float32',
      });
      const stages = r.stages ?? [];
      assert.equal(stages.length, queries.count);
      for (let qi = 0; qi < queries.count; qi++) {
        const q = queryRows(queries, qi);
        const lq = queries.lengths[qi];
        const s = stages[qi];
        // probe: every probed centroid is within rounding of its token's nprobe-th best (float64)
        const dots = new Float64Array(lq * ix.k);
        for (let i = 0; i < lq; i++)
          for (let c = 0; c < ix.k; c++) {
            let t = 0;
            for (let j = 0; j < ix.d; j++) t += q[i * ix.d + j] * ix.centroids[c * ix.d + j];
            dots[i * ix.k + c] = t;
          }
        const want = new Set<number>();
        for (let i = 0; i < lq; i++) {
          const row = Array.from(dots.subarray(i * ix.k, (i + 1) * ix.k));
          const order = row.map((v, c) => [v, c]).sort((a, b) => b[0] - a[0] || a[1] - b[1]);
          for (const [, c] of order.slice(0, nprobe)) want.add(c);
        }
        const got = new Set(s.probed);
        assert.equal(got.size, s.probed.length, 'distinct probed');
        for (const c of got)
          if (!want.has(c)) {
            // only a near-tie may differ
            const ok = Array.from({ length: lq }, (_, i) => {
              const row = Array.from(dots.subarray(i * ix.k, (i + 1) * ix.k)).sort((a, b) => b - a);
              return dots[i * ix.k + c] >= row[nprobe - 1] - 1e-5;
            }).some(Boolean);
            assert.ok(ok, `probed centroid ${c} of query ${qi} is not among its tokens' ${nprobe} best`);
          }
        // candidates: the union of the probed lists, ascending
        const mark = new Uint8Array(ix.docs);
        for (const c of s.probed)
          for (let j = ix.ivfOffsets[c]; j < ix.ivfOffsets[c + 1]; j++) mark[ix.ivf[j]] = 1;
        const cand = [];
        for (let b = 0; b < ix.docs; b++) if (mark[b]) cand.push(b);
        sameInts(s.candidates, cand, `candidates of query ${qi}`);
        // interaction: bitwise the CPU kernel; with pruning, the kept centroids from float64 dots
        // (documents with a centroid within rounding of the threshold are left out of the check)
        let keep: Uint8Array | null = null;
        const near = new Uint8Array(ix.k);
        if (threshold > Number.NEGATIVE_INFINITY) {
          keep = new Uint8Array(ix.k);
          for (let c = 0; c < ix.k; c++) {
            let best = Number.NEGATIVE_INFINITY;
            for (let i = 0; i < lq; i++) best = Math.max(best, dots[i * ix.k + c]);
            keep[c] = best >= threshold ? 1 : 0;
            near[c] = Math.abs(best - threshold) < 1e-5 ? 1 : 0;
          }
        }
        const ci = addon.centroidDocs(ix, q, s.candidates, keep, { isa: fmaIsa });
        let checked = 0;
        for (let i = 0; i < ci.length; i++) {
          const b = s.candidates[i];
          let skipDoc = false;
          for (let j = ix.bagOffsets[b]; j < ix.bagOffsets[b + 1]; j++) if (near[ix.bags[j]]) skipDoc = true;
          if (skipDoc) continue;
          checked++;
          sameBits(
            s.interaction.subarray(i, i + 1),
            ci.subarray(i, i + 1),
            `interaction of query ${qi}, doc ${b}`,
          );
        }
        assert.ok(checked >= ci.length * 0.9, 'most interaction scores checked');
        // kept: the exact top-n by (interaction desc, doc asc) of the GPU's own interaction scores
        const order = Array.from(s.candidates.keys()).sort(
          (a, b) => s.interaction[b] - s.interaction[a] || s.candidates[a] - s.candidates[b],
        );
        const top = order
          .slice(0, candidates)
          .map((i) => s.candidates[i])
          .sort((a, b) => a - b);
        sameInts(s.kept, top, `kept of query ${qi}`);
        // residual: bitwise the CPU fused kernel, and close to float64 MaxSim of the decoded vectors
        const rs = addon.scoreDocs(ix, q, s.kept, { isa: fmaIsa });
        sameBits(s.residual, rs, `residual of query ${qi}`);
        for (let j = 0; j < Math.min(5, s.kept.length); j++) {
          const b = s.kept[j];
          const dec = decodeTokens(
            ix.centroids,
            index.buckets,
            ix.cids,
            ix.codes,
            ix.docOffsets[b],
            ix.docOffsets[b + 1],
          );
          const len = ix.docOffsets[b + 1] - ix.docOffsets[b];
          let want64 = 0;
          for (let i = 0; i < lq; i++) {
            let m = Number.NEGATIVE_INFINITY;
            for (let t = 0; t < len; t++) {
              let dot = 0;
              for (let k = 0; k < ix.d; k++) dot += q[i * ix.d + k] * dec[t * ix.d + k];
              m = Math.max(m, dot);
            }
            want64 += m;
          }
          assert.ok(
            Math.abs(s.residual[j] - want64) <= 1e-4 * (1 + Math.abs(want64)),
            `residual vs float64 (doc ${b})`,
          );
        }
      }
    }
  });

  test('end to end: the same hits as the CPU index search, exact scores', async () => {
    const { index, queries } = await searchIndex();
    for (const o of [
      { k: 10, nprobe: 4, candidates: 100, rescore: 40 },
      { k: 1, nprobe: 1, candidates: 1, rescore: 1 },
      { k: 25, nprobe: 16, candidates: 3000, rescore: 300 },
      { k: 10, nprobe: 8, candidates: 200, rescore: 50, threshold: 0.35 },
    ]) {
      const gpu = await index.searchAll(queries, { ...o, backend: 'cuda', precision: 'float32' });
      // the CPU side runs the interaction the GPU implements (the CPU default is 'lists') and
      // decodes every token, as the GPU does (the CPU default prunes)
      const cpu = await index.searchAll(queries, {
        ...o,
        isa: fmaIsa,
        interaction: 'bags',
        prune: Number.POSITIVE_INFINITY,
      });
      for (let qi = 0; qi < queries.count; qi++) {
        const g = gpu[qi].hits;
        const c = cpu[qi].hits;
        assert.equal(g.length, c.length, `hits of query ${qi}`);
        for (let j = 0; j < g.length; j++) {
          assert.ok(
            Math.abs(g[j].score - c[j].score) <= 1e-5 * (1 + Math.abs(c[j].score)),
            `score ${qi}/${j}`,
          );
          if (g[j].index !== c[j].index) {
            // only an exact-score near-tie may swap
            assert.ok(
              Math.abs(g[j].score - c[j].score) <= 1e-5 * (1 + Math.abs(c[j].score)),
              `doc ${qi}/${j}: ${g[j].index} vs ${c[j].index}`,
            );
          }
        }
        assert.equal(gpu[qi].stats.scores, 'exact');
        assert.equal(gpu[qi].stats.isa, 'cuda');
      }
    }
  });

  // every token's best nprobe centroids against a float64 scan of all K (float16: ties within its
  // rounding either way)
  async function checkProbes(index: PlaidIndex, queries: TokenBatch, nprobes: number[]) {
    const ix = index.native;
    for (const precision of ['float32', 'float16'] as const)
      for (const nprobe of nprobes) {
        const r = await cudaSearchBatch(index, queries, {
          k: 10,
          nprobe,
          candidates: 200,
          rescore: 20,
          stages: true,
          precision,
        });
        for (let qi = 0; qi < queries.count; qi++) {
          const rows = queryRows(queries, qi);
          const probed = new Set((r.stages ?? [])[qi].probed);
          assert.equal(probed.size, (r.stages ?? [])[qi].probed.length, 'distinct probed');
          const want = new Set<number>();
          const near = new Set<number>();
          for (let i = 0; i < queries.lengths[qi]; i++) {
            const dots: [number, number][] = [];
            let tol = 1e-5;
            for (let cc = 0; cc < ix.k; cc++) {
              let t = 0;
              let a = 0;
              for (let j = 0; j < ix.d; j++) {
                t += rows[i * ix.d + j] * ix.centroids[cc * ix.d + j];
                a += Math.abs(rows[i * ix.d + j] * ix.centroids[cc * ix.d + j]);
              }
              dots.push([t, cc]);
              if (precision === 'float16') tol = Math.max(tol, 2 ** -8 * a);
            }
            dots.sort((x, y) => y[0] - x[0] || x[1] - y[1]);
            const edge = dots[nprobe - 1][0];
            for (const [v, cc] of dots) {
              if (v > edge + tol) want.add(cc);
              else if (v >= edge - tol) near.add(cc);
              else break;
            }
          }
          for (const cc of want)
            assert.ok(probed.has(cc), `${precision} nprobe ${nprobe}: query ${qi} misses centroid ${cc}`);
          for (const cc of probed)
            assert.ok(
              want.has(cc) || near.has(cc),
              `${precision} nprobe ${nprobe}: query ${qi} probes ${cc}`,
            );
        }
      }
  }

  test("probes over several centroid chunks (K = 5000): every token's best nprobe, float32 and float16", async () => {
    const { c, batch } = corpus(3000, [4, 48], 64, runSeed % 997, 'float16');
    const index = await buildIndex(batch, { centroids: 5000, seed: 6, iterations: 1, backend: 'cuda' });
    const q = syntheticQueries(c, 7, 32, 64, runSeed % 991);
    // lengths 32, 1, 17, 32, 32 and 40 (two 32-row chunks of the padded query: LQ 64)
    const offsets = [0, 32, 33, 50, 82, 114, 154];
    await checkProbes(
      index,
      raggedBatch(q.data.subarray(0, offsets[6] * 64), offsets, { dim: 64 }),
      [1, 7, 32],
    );
  });

  test('probes past 512 groups of 128 centroids (K = 70,000: the floor merges runs of groups)', async () => {
    const { c, batch } = corpus(2000, [40, 64], 64, runSeed % 983, 'float16');
    const index = await buildIndex(batch, {
      centroids: 70000,
      seed: 8,
      iterations: 1,
      backend: 'cuda',
    });
    const q = syntheticQueries(c, 2, 32, 64, runSeed % 977);
    await checkProbes(index, raggedBatch(q.data, [0, 32, 64], { dim: 64 }), [32]);
  });

  test('a call split into many passes (two in flight) gives every query the results of one pass', async () => {
    const { index, queries } = await searchIndex();
    for (const precision of ['float32', 'float16'] as const) {
      const o = { k: 10, nprobe: 9, candidates: 300, rescore: 40, stages: true, precision };
      const one = await cudaSearchBatch(index, queries, o);
      const per = bytesPerQuery(index.centroids, 32, 16, index.count, 300, 40, precision);
      for (const budget of [per, 5 * per]) {
        const many = await cudaSearchBatch(index, queries, { ...o, budget });
        assert.equal(many.results.length, queries.count);
        for (let q = 0; q < queries.count; q++) {
          const a = one.results[q].hits;
          const b = many.results[q].hits;
          assert.deepEqual(
            b.map((h) => [h.index, h.score]),
            a.map((h) => [h.index, h.score]),
            `${precision} budget ${budget}: query ${q}`,
          );
          const sa = (one.stages ?? [])[q];
          const sb = (many.stages ?? [])[q];
          sameInts(sb.probed, sa.probed, `probed of ${q}`);
          sameInts(sb.candidates, sa.candidates, `candidates of ${q}`);
          sameInts(sb.kept, sa.kept, `kept of ${q}`);
          sameBits(Float32Array.from(sb.residual), Float32Array.from(sa.residual), `residual of ${q}`);
        }
        assert.equal(many.batch.generated, one.batch.generated);
        assert.equal(many.batch.rescored, one.batch.rescored);
      }
    }
  });

  for (const [dim, kind] of [
    [64, 'd 64'],
    [128, 'd 128 (the 2-bit d = 128 decode)'],
    [128, 'd 128, weights not evenly spaced (as an imported index)'],
  ] as const)
    test(`float16 stages (tensor cores): probes and residual scores within float16 rounding (${kind})`, async () => {
      const built = await searchIndex(dim);
      const index = kind.includes('not evenly') ? unevenWeights(built.index) : built.index;
      const { queries } = built;
      const ix = index.native;
      const r = await cudaSearchBatch(index, queries, {
        k: 10,
        nprobe: 9,
        candidates: 500,
        rescore: 30,
        stages: true,
        precision: 'float16',
      });
      assert.equal(r.precision, 'float16');
      assert.equal((await cudaSearchBatch(index, queries, { k: 10 })).precision, 'float16', 'the default');
      let errSum = 0;
      let wantSum = 0;
      for (let qi = 0; qi < queries.count; qi++) {
        const q = queryRows(queries, qi);
        const lq = queries.lengths[qi];
        const s = (r.stages ?? [])[qi];
        // probe: a probed centroid is among some token's 9 best within that token's float16 bound
        const dots = new Float64Array(lq * ix.k);
        const bound = new Float64Array(lq);
        for (let i = 0; i < lq; i++)
          for (let c = 0; c < ix.k; c++) {
            let t = 0;
            let a = 0;
            for (let j = 0; j < ix.d; j++) {
              t += q[i * ix.d + j] * ix.centroids[c * ix.d + j];
              a += Math.abs(q[i * ix.d + j] * ix.centroids[c * ix.d + j]);
            }
            dots[i * ix.k + c] = t;
            bound[i] = Math.max(bound[i], 2 ** -9 * a);
          }
        for (const c of new Set(s.probed)) {
          const ok = Array.from({ length: lq }, (_, i) => {
            const row = Array.from(dots.subarray(i * ix.k, (i + 1) * ix.k)).sort((a, b) => b - a);
            return dots[i * ix.k + c] >= row[8] - 2 * bound[i];
          }).some(Boolean);
          assert.ok(ok, `probed centroid ${c} of query ${qi} (seed ${runSeed})`);
        }
        // interaction (queries of <= 32 tokens: qc's int8 copy, a step |q_i| max|c| / 127 a token):
        // sum over tokens of the bag's best dot, within the tokens' bounds
        let cmax = 0;
        for (let c = 0; c < ix.k; c++) {
          let sq = 0;
          for (let j = 0; j < ix.d; j++) sq += ix.centroids[c * ix.d + j] ** 2;
          cmax = Math.max(cmax, Math.sqrt(sq));
        }
        const step = Array.from({ length: lq }, (_, i) => {
          let sq = 0;
          for (let j = 0; j < ix.d; j++) sq += q[i * ix.d + j] ** 2;
          return (Math.sqrt(sq) * cmax) / 127;
        });
        for (let j = 0; j < s.candidates.length; j += Math.max(1, Math.floor(s.candidates.length / 200))) {
          const b = s.candidates[j];
          let want = 0;
          let tol = 1e-6;
          for (let i = 0; i < lq; i++) {
            let m = Number.NEGATIVE_INFINITY;
            for (let t = ix.bagOffsets[b]; t < ix.bagOffsets[b + 1]; t++)
              m = Math.max(m, dots[i * ix.k + ix.bags[t]]);
            if (m > Number.NEGATIVE_INFINITY) want += m;
            tol += 2 * bound[i] + 0.6 * step[i];
          }
          const got = s.interaction[j];
          assert.ok(
            Math.abs(got - want) <= tol,
            `interaction of query ${qi}, doc ${b}: ${got} vs ${want} (seed ${runSeed})`,
          );
        }
        // kept: the exact top 500 of the GPU's own interaction scores, as in float32
        const order = Array.from(s.candidates.keys()).sort(
          (a, b) => s.interaction[b] - s.interaction[a] || s.candidates[a] - s.candidates[b],
        );
        sameInts(
          s.kept,
          order
            .slice(0, 500)
            .map((i) => s.candidates[i])
            .sort((a, b) => a - b),
          `kept of query ${qi}`,
        );
        // residual: against the float64 MaxSim of the decoded vectors, within the float16 bound
        for (let j = 0; j < s.kept.length; j += Math.max(1, Math.floor(s.kept.length / 25))) {
          const b = s.kept[j];
          const t0 = ix.docOffsets[b];
          const len = ix.docOffsets[b + 1] - t0;
          const dec = decodeTokens(ix.centroids, index.buckets, ix.cids, ix.codes, t0, t0 + len);
          let want = 0;
          let tol = 1e-5;
          for (let i = 0; i < lq; i++) {
            let m = Number.NEGATIVE_INFINITY;
            let a = 0;
            for (let t = 0; t < len; t++) {
              const cen = ix.cids[t0 + t] * ix.d;
              let dot = 0;
              let abs = 0;
              for (let k = 0; k < ix.d; k++) {
                const x = dec[t * ix.d + k];
                const c = ix.centroids[cen + k];
                dot += q[i * ix.d + k] * x;
                abs += Math.abs(q[i * ix.d + k]) * (Math.abs(c) + Math.abs(x - c));
              }
              m = Math.max(m, dot);
              a = Math.max(a, abs);
            }
            want += m;
            tol += 2 ** -9 * a;
          }
          const err = Math.abs(s.residual[j] - want);
          assert.ok(
            err <= tol,
            `residual of query ${qi}, doc ${b}: ${s.residual[j]} vs ${want} (bound ${tol})`,
          );
          errSum += err;
          wantSum += Math.abs(want);
        }
      }
      // a wrong decode moves scores by ~0.1; float16 rounding by ~1e-5 relative
      assert.ok(errSum <= 1e-3 * wantSum, `mean residual error ${errSum / wantSum} relative`);
    });

  test('float16 stages: exact scores; every document re-scored gives the CPU hits (d 48 / 128, 2 / 4 bits, long queries)', async () => {
    for (const [dim, bits, dtype] of [
      [48, 2, 'float16'],
      [128, 4, 'float32'],
      [64, 2, 'bfloat16'],
    ] as const) {
      const { c, batch } = corpus(400, [1, 70], dim, (runSeed + dim) % 997, dtype);
      const index = await buildIndex(batch, { centroids: 16, bits, seed: 4, iterations: 2, backend: 'cuda' });
      const lens = [1, 7, 32, 33, 64, 90];
      const q = syntheticQueries(c, lens.length, 96, dim, runSeed % 89);
      const offsets = [0];
      const data = new Float32Array(lens.reduce((a, b) => a + b, 0) * dim);
      for (let i = 0; i < lens.length; i++) {
        data.set(q.data.subarray(i * 96 * dim, (i * 96 + lens[i]) * dim), offsets[i] * dim);
        offsets.push(offsets[i] + lens[i]);
      }
      const queries = raggedBatch(data, offsets, { dim });
      // nprobe = K: every document a candidate, every candidate re-scored exactly
      const all = { k: 12, nprobe: 16, candidates: 400, rescore: 400 };
      const gpu = await index.searchAll(queries, { ...all, backend: 'cuda', precision: 'float16' });
      const cpu = await index.searchAll(queries, {
        ...all,
        isa: fmaIsa,
        interaction: 'bags',
        prune: Number.POSITIVE_INFINITY,
      });
      for (let qi = 0; qi < lens.length; qi++) {
        const g = gpu[qi].hits;
        const h = cpu[qi].hits;
        assert.equal(g.length, h.length, `hits of query ${qi} (d ${dim})`);
        for (let j = 0; j < g.length; j++)
          assert.ok(
            Math.abs(g[j].score - h[j].score) <= 1e-5 * (1 + Math.abs(h[j].score)) &&
              (g[j].index === h[j].index ||
                Math.abs(g[j].score - h[j].score) <= 1e-6 * (1 + Math.abs(h[j].score))),
            `d ${dim}, ${bits}-bit, query ${qi} (${lens[qi]} tokens), hit ${j}: ${g[j].index} ${g[j].score} vs ${h[j].index} ${h[j].score}`,
          );
      }
      // a narrow search: the float16 ranking keeps what float32 keeps, with the same exact scores
      const narrow = { k: 10, nprobe: 4, candidates: 60, rescore: 20 };
      const g16 = await index.searchAll(queries, { ...narrow, backend: 'cuda', precision: 'float16' });
      const g32 = await index.searchAll(queries, { ...narrow, backend: 'cuda', precision: 'float32' });
      let same = 0;
      let total = 0;
      for (let qi = 0; qi < lens.length; qi++) {
        const by = new Map(g32[qi].hits.map((x) => [x.index, x.score]));
        total += g32[qi].hits.length;
        for (const x of g16[qi].hits)
          if (by.has(x.index)) {
            same++;
            // float16 tokens: the float16 plan re-scores on tensor cores (the query in two float16
            // parts), within ~1e-7 of the float32 chain; other tokens take the same kernel
            const want = by.get(x.index) as number;
            if (dtype === 'float16')
              assert.ok(
                Math.abs(x.score - want) <= 1e-6 * (1 + Math.abs(want)),
                `exact score of doc ${x.index}`,
              );
            else assert.equal(x.score, want, `exact score of doc ${x.index}`);
          }
      }
      assert.ok(same >= 0.9 * total, `float16 vs float32 hits: ${same} of ${total} (d ${dim})`);
    }
  });

  test("the default precision: float16, and float32 for a call with a pass of queries outside float16's range", async () => {
    const { index, queries } = await searchIndex();
    const o = { k: 10, nprobe: 9, candidates: 300, rescore: 40 };
    const before = await cudaSearchBatch(index, queries, o);
    assert.equal(before.precision, 'float16');
    // one query a pass, so that a refusal comes from a pass after others ran on both streams
    const per = bytesPerQuery(index.centroids, 32, 16, index.count, 300, 40, 'float16');
    const d = queries.dim;
    const hits = (r: Awaited<ReturnType<typeof cudaSearchBatch>>) =>
      r.results.map((x) => x.hits.map((h) => [h.index, h.score]));
    for (const [f, at] of [
      [1e5, 0],
      [1e-4, 7],
    ] as const) {
      const data = Float32Array.from(queries.data as Float32Array);
      const s = queries.starts[at] * d;
      for (let i = s; i < s + queries.lengths[at] * d; i++) data[i] *= f;
      const scaled = raggedBatch(
        data,
        Array.from({ length: queries.count + 1 }, (_, i) =>
          i < queries.count ? queries.starts[i] : queries.starts[i - 1] + queries.lengths[i - 1],
        ),
        { dim: d },
      );
      for (const budget of [undefined, per]) {
        const r = await cudaSearchBatch(index, scaled, { ...o, budget });
        // one pass of all queries: its largest magnitude is in range for the tiny query
        const want = f > 1 || budget !== undefined ? 'float32' : 'float16';
        assert.equal(r.precision, want, `scale ${f}, budget ${budget}`);
        if (want === 'float32')
          assert.deepEqual(
            hits(r),
            hits(await cudaSearchBatch(index, scaled, { ...o, budget, precision: 'float32' })),
            `scale ${f}, budget ${budget}: the float32 hits`,
          );
      }
      await assert.rejects(
        cudaSearchBatch(index, scaled, { ...o, budget: per, precision: 'float16' }),
        (e: unknown) =>
          e instanceof InvalidArgumentError &&
          /options\.precision/.test(String(e)) &&
          /largest magnitude/.test(String(e)),
        `explicit float16, scale ${f}`,
      );
    }
    // a refused call leaves the index and the streams as they were
    const after = await cudaSearchBatch(index, queries, { ...o, budget: per });
    assert.equal(after.precision, 'float16');
    assert.deepEqual(hits(after), hits(before));
  });

  test('float16 exact re-score on tensor cores: float64 MaxSim within float32 rounding at any query scale', async () => {
    for (const dim of [16, 48, 128]) {
      const { c, batch } = corpus(120, [1, 50], dim, (runSeed + 7 * dim) % 991, 'float16');
      const index = await buildIndex(batch, {
        centroids: 16,
        bits: 2,
        seed: 5,
        iterations: 2,
        backend: 'cuda',
      });
      const tokens = decodeToFloat32(batch.data as Uint16Array, 'float16', dim);
      // queries of 1 to 40 tokens, scaled as a whole (tiny to huge) or token by token (mixed)
      const lens = [1, 5, 32, 40, 9, 33];
      // (the batch's largest magnitude stays in float16's range, where an explicit 'float16' runs)
      const scale = [1, 1e-6, 3e3, 0.05, 0, 0];
      const base = syntheticQueries(c, lens.length, 40, dim, runSeed % 83);
      const offsets = [0];
      const data = new Float32Array(lens.reduce((a, b) => a + b, 0) * dim);
      for (let i = 0; i < lens.length; i++) {
        for (let t = 0; t < lens[i]; t++) {
          const f = scale[i] || (t % 2 ? 2e3 : 2e-3) * (i === 5 && t === 0 ? 0 : 1);
          for (let k = 0; k < dim; k++)
            data[(offsets[i] + t) * dim + k] = base.data[(i * 40 + t) * dim + k] * f;
        }
        offsets.push(offsets[i] + lens[i]);
      }
      const queries = raggedBatch(data, offsets, { dim });
      // every document a candidate and re-scored: the hits are the exact scores, whatever the
      // float16 ranking stages make of out-of-range queries
      const all = { k: 20, nprobe: 16, candidates: 120, rescore: 120 };
      const got = await index.searchAll(queries, { ...all, backend: 'cuda', precision: 'float16' });
      for (let qi = 0; qi < lens.length; qi++) {
        assert.equal(got[qi].hits.length, 20, `hits of query ${qi}`);
        for (const h of got[qi].hits) {
          let want = 0;
          let size = 0;
          for (let i = 0; i < lens[qi]; i++) {
            let m = Number.NEGATIVE_INFINITY;
            let ma = 0;
            for (let t = c.offsets[h.index]; t < c.offsets[h.index + 1]; t++) {
              let dot = 0;
              let abs = 0;
              for (let k = 0; k < dim; k++) {
                const x = data[(offsets[qi] + i) * dim + k] * tokens[t * dim + k];
                dot += x;
                abs += Math.abs(x);
              }
              m = Math.max(m, dot);
              ma = Math.max(ma, abs);
            }
            want += m;
            size += ma;
          }
          // a float16 query (no low part) is off by ~1e-4 of size; float32 rounding by ~1e-7
          assert.ok(
            Math.abs(h.score - want) <= 4e-6 * size + 1e-37,
            `d ${dim}, query ${qi} (scale ${scale[qi] || 'mixed'}), doc ${h.index}: ${h.score} vs ${want} (size ${size}, seed ${runSeed})`,
          );
        }
      }
    }
  });

  test('without source tokens: residual scores, equal to the CPU residual search', async () => {
    const { c, batch } = corpus(800, [2, 30], 32, runSeed % 991);
    const index = await buildIndex(batch, {
      centroids: 50,
      seed: 2,
      iterations: 2,
      keepTokens: false,
      backend: 'cuda',
    });
    const q = syntheticQueries(c, 5, 8, 32, 3);
    const queries = raggedBatch(q.data, [0, 8, 16, 24, 32, 40], { dim: 32 });
    const gpu = await index.searchAll(queries, { k: 7, nprobe: 3, candidates: 64, backend: 'cuda' });
    const cpu = await index.searchAll(queries, {
      k: 7,
      nprobe: 3,
      candidates: 64,
      isa: fmaIsa,
      interaction: 'bags',
      prune: Number.POSITIVE_INFINITY,
    });
    for (let i = 0; i < 5; i++) {
      assert.deepEqual(gpu[i].hits, cpu[i].hits, `query ${i}`);
      assert.equal(gpu[i].stats.scores, 'residual');
    }
  });

  test('bad inputs: clear errors, no crash', async () => {
    const { index, queries } = await searchIndex();
    await assert.rejects(
      index.searchAll(queries, { k: 5, nprobe: 33, backend: 'cuda' }),
      InvalidArgumentError,
    );
    const long = raggedBatch(new Float32Array(300 * 64), [0, 300], { dim: 64 });
    await assert.rejects(index.searchAll(long, { k: 5, backend: 'cuda' }), /at most 256 tokens/);
    const wrongDim = raggedBatch(new Float32Array(32), [0, 1], { dim: 32 });
    await assert.rejects(index.searchAll(wrongDim, { k: 5, backend: 'cuda' }), /queries.dim/);
    const cu = plaidCuda();
    assert.throws(
      () => cu.plaidEncoder(0, { centroids: new Float32Array(10), d: 3, bits: 2 }),
      /options.centroids/,
    );
    assert.throws(
      () => cu.plaidEncoder(0, { centroids: new Float32Array(8), d: 4, bits: 3 as never }),
      /options.bits/,
    );
    const { handle } = await (await import('../../src/plaid/cuda-search.js')).deviceIndex(index);
    const plan = {
      lq: 16,
      nprobe: 4,
      np: 4 as 4 | 8,
      candidates: 10,
      rescore: 5,
      batch: 4,
      threshold: -1e30,
      exact: true,
      stages: false,
      precision: 'float32' as 'float32' | 'float16',
    };
    assert.throws(() => cu.plaidSearch(handle, new Float32Array(64), Int32Array.of(1), plan), /plan.lq/);
    const q32 = new Float32Array(index.dim);
    assert.throws(
      () =>
        cu.plaidSearch(handle, q32, Int32Array.of(1), {
          ...plan,
          lq: 32,
          precision: 'float16',
          exact: false,
        }),
      /plan.precision/,
    );
    assert.throws(
      () => cu.plaidSearch(handle, q32, Int32Array.of(1), { ...plan, lq: 32, precision: 'fp16' as never }),
      /plan.precision/,
    );
    assert.throws(
      () =>
        cu.plaidSearch(handle, new Float32Array(64), Int32Array.of(1), {
          ...plan,
          lq: 32,
          np: 8 as const,
          nprobe: 9,
        }),
      /plan.np/,
    );
    assert.throws(
      () => cu.plaidSearch(handle, new Float32Array(60), Int32Array.of(1), { ...plan, lq: 32 }),
      /queries/,
    );
    assert.throws(() => cu.plaidSearch({} as never, new Float32Array(64), Int32Array.of(1), plan), /index/);
  });
});

describe('CUDA plaid corpus', { skip }, () => {
  test('corpus index --backend cuda = cpu; corpus.search with backend cuda goes through the GPU index', async () => {
    const fs = await import('node:fs');
    const os = await import('node:os');
    const path = await import('node:path');
    const { CorpusWriter } = await import('../../src/io/corpus/index.js');
    const { indexCorpus } = await import('../../src/io/corpus/index-build.js');
    const { openCorpus } = await import('../../src/ops/corpus-search.js');
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-plaid-cuda-'));
    try {
      const { c, batch } = corpus(900, [2, 20], 32, runSeed % 977, 'float16');
      const dirs = ['cpu', 'cuda'].map((b) => path.join(tmp, `${b}.msx`));
      for (const [i, dir] of dirs.entries()) {
        for (let s = 0; s < 3; s++) {
          const w =
            s === 0 ? CorpusWriter.create(dir, { dim: 32, dtype: 'float16' }) : CorpusWriter.append(dir);
          const part = {
            ...batch,
            count: 300,
            starts: batch.starts.subarray(s * 300),
            lengths: batch.lengths.subarray(s * 300),
          };
          w.add(part);
          w.commit();
        }
        await indexCorpus(dir, { centroids: 40, backend: i === 0 ? 'cpu' : 'cuda' });
      }
      // the published index segments decode to the same arrays (headers carry timings)
      const opened = dirs.map((d) => openCorpus(d));
      try {
        for (let si = 0; si < 3; si++) {
          const [a, b] = opened.map((o) => o.file.index?.segment(si)?.native);
          assert.ok(a && b, `segment ${si} indexed`);
          sameBits(a.centroids, b.centroids, `segment ${si} centroids`);
          sameInts(a.cids, b.cids, `segment ${si} cids`);
          sameInts(a.codes, b.codes, `segment ${si} codes`);
        }
      } finally {
        for (const o of opened) o.close();
      }
      // the CLI: maxsim corpus index DIR --backend cuda, on a copy indexed by the library above
      const { spawnSync } = await import('node:child_process');
      const { fileURLToPath } = await import('node:url');
      const cliDir = path.join(tmp, 'cli.msx');
      fs.cpSync(dirs[0], cliDir, { recursive: true });
      const main = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
      const r = spawnSync(
        process.execPath,
        [main, 'corpus', 'index', cliDir, '--rebuild', '--centroids', '40', '--backend', 'cuda'],
        {
          encoding: 'utf8',
          timeout: 120_000,
        },
      );
      assert.equal(r.status, 0, `corpus index --backend cuda: ${r.stderr}`);
      const bad = spawnSync(process.execPath, [main, 'corpus', 'index', cliDir, '--backend', 'gpu'], {
        encoding: 'utf8',
      });
      assert.notEqual(bad.status, 0, 'an unknown backend is refused');
      assert.match(bad.stderr, /backend/);
      const q = syntheticQueries(c, 6, 8, 32, 11);
      const queries = raggedBatch(
        q.data,
        Array.from({ length: 7 }, (_, i) => i * 8),
        { dim: 32 },
      );
      const corp = openCorpus(dirs[0]);
      try {
        const o = {
          topK: 7,
          index: { nprobe: 6, candidates: 200, rescore: 50, interaction: 'bags' as const },
        };
        const f32 = { ...o, index: { ...o.index, precision: 'float32' as const } };
        const gpu = await corp.searchWithStats(queries, { ...f32, backend: 'cuda' });
        const cpu = await corp.searchWithStats(queries, { ...o, backend: 'cpu' });
        assert.equal(gpu.stats.backend, 'cuda');
        assert.equal(cpu.stats.backend, 'cpu');
        assert.equal(gpu.stats.index?.precision, 'float32');
        assert.equal(cpu.stats.index?.precision, 'float32');
        // the GPU re-scores each segment's `rescore` best on the device (the segments' tokens uploaded
        // with the index) before the segments merge; the CPU merges the residual lists and re-scores
        // the corpus's `rescore` best. The GPU's re-scored set holds the CPU's (seed 4242 finds a
        // document 54th by residual score over the corpus, 7th in its segment, 4th by exact score), so
        // its hits are exact scores, each rank's no worse than the CPU's; no host re-score
        const docs = corp.file.info.documents;
        const scan = await corp.searchWithStats(queries, { topK: docs, index: false, backend: 'cpu' });
        noWorseExactHits(gpu.hits, cpu.hits, scan.hits, 'float32 stages');
        const rescore = gpu.stats.index?.stages.find((s) => s.name === 'rescore');
        assert.ok((rescore?.candidates ?? 0) > 0, 'lists re-scored on the device');
        assert.equal(gpu.stats.bytes, 0, 'no document read on the host for a re-score');
        // the default where the corpus keeps its tokens: float16 stages (the segments hold no tokens,
        // the corpus re-scores), so the returned scores are still the exact scan's
        const half = await corp.searchWithStats(queries, { ...o, backend: 'cuda' });
        assert.equal(half.stats.index?.precision, 'float16');
        let same = 0;
        half.hits.forEach((row, qi) => {
          const exact = new Map(scan.hits[qi].map((h) => [h.index, h.score]));
          for (const h of row) {
            const want = exact.get(h.index) ?? Number.NaN;
            assert.ok(
              Math.abs(h.score - want) <= 1e-5 * Math.max(1, Math.abs(want)),
              `query ${qi} doc ${h.index}`,
            );
          }
          const ids = new Set(cpu.hits[qi].map((h) => h.index));
          same += row.filter((h) => ids.has(h.index)).length;
        });
        assert.ok(
          same >= 0.9 * cpu.hits.flat().length,
          `float16 hits ${same} of ${cpu.hits.flat().length} the float32 ones`,
        );
      } finally {
        corp.close();
      }
      // an unindexed segment appended after the index: scanned on the host, merged with the
      // device-re-scored lists; an int8 corpus re-scores on the host (its tokens are not uploaded)
      const more = corpus(120, [2, 20], 32, (runSeed % 977) + 1, 'float16').batch;
      const w = CorpusWriter.append(dirs[0]);
      w.add(more);
      w.commit();
      const grown = openCorpus(dirs[0]);
      try {
        const index = { nprobe: 6, candidates: 200, rescore: 50, interaction: 'bags' as const };
        const gpu = await grown.searchWithStats(queries, {
          topK: 9,
          index: { ...index, precision: 'float32' },
          backend: 'cuda',
        });
        const cpu = await grown.searchWithStats(queries, { topK: 9, index, backend: 'cpu' });
        assert.equal(gpu.stats.index?.scannedDocuments, 120);
        // exact scores always; the documents may differ where centroid-bag scores tie at the
        // candidate cut (the two backends break such ties in their own order)
        const all = grown.file.info.documents;
        const scan = await grown.searchWithStats(queries, { topK: all, index: false, backend: 'cpu' });
        exactAndMostlySame(gpu.hits, cpu.hits, scan.hits, 'with an unindexed segment');
      } finally {
        grown.close();
      }
      const i8 = path.join(tmp, 'int8.msx');
      const w8 = CorpusWriter.create(i8, { dim: 32, dtype: 'int8' });
      w8.add(batch);
      w8.commit();
      await indexCorpus(i8, { centroids: 40, backend: 'cuda' });
      const c8 = openCorpus(i8);
      try {
        const index = { nprobe: 6, candidates: 200, rescore: 50, interaction: 'bags' as const };
        const gpu = await c8.searchWithStats(queries, {
          topK: 5,
          index: { ...index, precision: 'float32' },
          backend: 'cuda',
        });
        const cpu = await c8.searchWithStats(queries, { topK: 5, index, backend: 'cpu' });
        assert.ok(gpu.stats.bytes > 0, 'int8: re-scored on the host');
        assert.deepEqual(gpu.hits, cpu.hits, 'int8: the same host re-score');
      } finally {
        c8.close();
      }
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  });
});

/** Every hit of `a` carries its document's exact score; at least 90% of `b`'s documents are in `a`. */
function exactAndMostlySame(
  a: { index: number; score: number }[][],
  b: { index: number; score: number }[][],
  scan: { index: number; score: number }[][],
  what: string,
) {
  let same = 0;
  a.forEach((row, qi) => {
    assert.equal(row.length, b[qi].length, `${what}: hits of query ${qi} (seed ${runSeed})`);
    const exact = new Map(scan[qi].map((h) => [h.index, h.score]));
    for (const h of row) {
      const want = exact.get(h.index) ?? Number.NaN;
      assert.ok(
        Math.abs(h.score - want) <= 1e-5 * (1 + Math.abs(want)),
        `${what}: query ${qi} doc ${h.index} score ${h.score} vs exact ${want} (seed ${runSeed})`,
      );
    }
    const ids = new Set(b[qi].map((h) => h.index));
    same += row.filter((h) => ids.has(h.index)).length;
  });
  const n = b.flat().length;
  assert.ok(same >= 0.9 * n, `${what}: ${same} of ${n} hits the same (seed ${runSeed})`);
}

/**
 * Hits `a` are exact scores (those of `exact`, every document's, within 1e-5), in order, as many as
 * `b`'s, and each rank's score is no lower than `b`'s at that rank (a re-scored set that holds b's).
 */
function noWorseExactHits(
  a: { index: number; score: number }[][],
  b: { index: number; score: number }[][],
  exact: { index: number; score: number }[][],
  what: string,
) {
  assert.equal(a.length, b.length, what);
  a.forEach((row, qi) => {
    assert.equal(row.length, b[qi].length, `${what}: hits of query ${qi}`);
    const truth = new Map(exact[qi].map((h) => [h.index, h.score]));
    row.forEach((h, j) => {
      const want = truth.get(h.index);
      assert.ok(want !== undefined, `${what}: doc ${qi}/${j} ${h.index} is a document (seed ${runSeed})`);
      const tol = 1e-5 * (1 + Math.abs(want));
      assert.ok(
        Math.abs(h.score - want) <= tol,
        `${what}: score ${qi}/${j} ${h.score} vs the exact ${want} (seed ${runSeed})`,
      );
      if (j > 0) assert.ok(h.score <= row[j - 1].score + tol, `${what}: ${qi}/${j} in order`);
      assert.ok(
        h.score >= b[qi][j].score - tol,
        `${what}: rank ${qi}/${j} ${h.score} below the CPU's ${b[qi][j].score} (seed ${runSeed})`,
      );
    });
  });
}
