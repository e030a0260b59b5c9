// The residual stage alone, per kernel set: a random 2-bit index (d = 128, 64-token documents,
// random centroid ids, codes and weights), one query of 32 tokens scored against --docs random
// documents by scoreDocs, one thread and all threads; wall and CPU milliseconds per call (CPU time
// stays meaningful on a shared machine), and the fp32-equivalent rate 2 x docs x 64 x 32 x 128 / time.
//
// Run: node dist/bench/plaid-residual.js [--docs 1024] [--centroids 4096] [--bits 2] [--reps 20]
//        [--isa avx2,avx2int8] (default: every set this CPU runs)
import { type NativeIndex, type ResidualIsa, residualAddon } from '../src/plaid/native.js';
import { buildLists } from '../src/plaid/plaid.js';
import { arg } from './plaid-common.js';

const D = 128;
const L = 64;
const LQ = 32;
const ND = Number(arg('docs', '1024'));
const K = Number(arg('centroids', '4096'));
const BITS = Number(arg('bits', '2')) as 2 | 4;
const REPS = Number(arg('reps', '20'));
const N = 20000;
const a = residualAddon();
let seed = 12345;
const rnd = () => {
  seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
  return seed / 4294967296;
};
const P = Math.ceil((N * L) / 16) * 16;
const cids = Int32Array.from({ length: P }, () => Math.floor(rnd() * K));
const index: NativeIndex = {
  k: K,
  d: D,
  docs: N,
  bits: BITS,
  centroids: Float32Array.from({ length: K * D }, () => rnd() - 0.5),
  tables: Float32Array.from({ length: D * 16 }, () => (rnd() - 0.5) * 0.1),
  cids,
  codes: Uint8Array.from({ length: (P / 16) * D * 2 * BITS }, () => Math.floor(rnd() * 256)),
  ...buildLists(new Int32Array(N).fill(L), cids, K),
};
a.checkIndex(index);
const q = Float32Array.from({ length: LQ * D }, () => rnd() - 0.5);
const docs = Int32Array.from({ length: ND }, () => Math.floor(rnd() * N));
const flop = 2 * ND * L * LQ * D;
console.log(
  `${ND} documents x ${L} tokens, ${LQ} query tokens, d = ${D}, ${BITS}-bit, K = ${K} (query x centroids included)`,
);
console.log('isa threads | wall ms | CPU ms | fp32-equivalent GFLOP/s (wall)');
const isas = arg('isa', '') ? (arg('isa', '').split(',') as ResidualIsa[]) : a.isas();
for (const isa of isas)
  for (const threads of [1, 0]) {
    a.scoreDocs(index, q, docs, { threads, isa });
    const t0 = performance.now();
    const c0 = process.cpuUsage();
    for (let r = 0; r < REPS; r++) a.scoreDocs(index, q, docs, { threads, isa });
    const wall = (performance.now() - t0) / REPS;
    const c = process.cpuUsage(c0);
    const cpu = (c.user + c.system) / 1000 / REPS;
    console.log(
      `${isa} ${threads || 'all'} | ${wall.toFixed(2)} | ${cpu.toFixed(2)} | ${(flop / wall / 1e6).toFixed(0)}`,
    );
  }
