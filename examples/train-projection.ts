// Learns a linear projection W (128 -> 64) of the demo corpus's token embeddings with in-batch
// contrastive training on MaxSim scores: on the GPU when CUDA is present (device-resident steps:
// the projected batch is uploaded, contrastiveStep runs on the device corpora, the gradients come
// back with download()), on the CPU otherwise or with --backend cpu.
//
// The starting projection is deliberately poor: nearly rank 4 (plus a little noise), so most of the
// 128 directions that tell tokens apart collapse onto a few. Each step takes a batch of training
// queries with their first planted document as the positive and the other queries' positives as
// negatives, projects the tokens through W, runs contrastiveStep, carries dQ / dD back through the
// projection to dW and updates W with Adam. Every epoch prints the loss and recall@10 of held-out
// queries against the whole projected corpus.
//
// Run: npm run build && npm run train:example [-- --backend cpu|cuda|auto]
// (about 25 s on 2 CPU cores; default auto: CUDA when present)

import { type CudaDevice, contrastiveStep, cuda, info, raggedBatch, type TokenBatch, topK } from 'maxsim';
import { demoCorpus, Rng } from 'maxsim/internal';

const IN_DIM = 128;
const OUT_DIM = 64;
const EPOCHS = 6;
const BATCH = 32;
const TRAIN_QUERIES = 512;
const EVAL_QUERIES = 64;
const LEARNING_RATE = 0.02;

/** Rows of a [rows, IN_DIM] float32 buffer times W [IN_DIM, OUT_DIM]. */
function project(x: Float32Array, rows: number, w: Float64Array): Float32Array {
  const out = new Float32Array(rows * OUT_DIM);
  const acc = new Float64Array(OUT_DIM);
  for (let r = 0; r < rows; r++) {
    acc.fill(0);
    for (let k = 0; k < IN_DIM; k++) {
      const xk = x[r * IN_DIM + k];
      const wk = k * OUT_DIM;
      for (let c = 0; c < OUT_DIM; c++) acc[c] += xk * w[wk + c];
    }
    out.set(acc, r * OUT_DIM);
  }
  return out;
}

/** Items `indices` of a float32 batch, copied into a packed ragged batch of IN_DIM tokens. */
function gather(batch: TokenBatch, indices: number[]): { data: Float32Array; offsets: number[] } {
  const offsets = [0];
  for (const i of indices) offsets.push(offsets[offsets.length - 1] + batch.lengths[i]);
  const data = new Float32Array(offsets[offsets.length - 1] * IN_DIM);
  indices.forEach((item, n) => {
    const start = batch.starts[item] * IN_DIM;
    data.set(
      batch.data.subarray(start, start + batch.lengths[item] * IN_DIM) as Float32Array,
      offsets[n] * IN_DIM,
    );
  });
  return { data, offsets };
}

function projectBatch(x: { data: Float32Array; offsets: number[] }, w: Float64Array): TokenBatch {
  const rows = x.data.length / IN_DIM;
  return raggedBatch(project(x.data, rows, w), x.offsets, { dim: OUT_DIM, checkFinite: false });
}

/** grad += X^T dY for one batch's tokens. */
function accumulateWeightGrad(x: Float32Array, dy: Float32Array, grad: Float64Array) {
  const rows = x.length / IN_DIM;
  for (let r = 0; r < rows; r++) {
    for (let k = 0; k < IN_DIM; k++) {
      const xk = x[r * IN_DIM + k];
      const gk = k * OUT_DIM;
      for (let c = 0; c < OUT_DIM; c++) grad[gk + c] += xk * dy[r * OUT_DIM + c];
    }
  }
}

class Adam {
  private readonly m: Float64Array;
  private readonly v: Float64Array;
  private step = 0;
  constructor(
    size: number,
    private readonly lr: number,
  ) {
    this.m = new Float64Array(size);
    this.v = new Float64Array(size);
  }
  update(param: Float64Array, grad: Float64Array) {
    const beta1 = 0.9;
    const beta2 = 0.999;
    this.step++;
    const c1 = 1 - beta1 ** this.step;
    const c2 = 1 - beta2 ** this.step;
    for (let i = 0; i < param.length; i++) {
      this.m[i] = beta1 * this.m[i] + (1 - beta1) * grad[i];
      this.v[i] = beta2 * this.v[i] + (1 - beta2) * grad[i] * grad[i];
      param[i] -= (this.lr * (this.m[i] / c1)) / (Math.sqrt(this.v[i] / c2) + 1e-8);
    }
  }
}

/** Nearly rank-4 start: 4 random directions per output plus 5% noise. */
function poorProjection(rand: () => number): Float64Array {
  const rank = 4;
  const a = Float64Array.from({ length: IN_DIM * rank }, () => rand() * 2 - 1);
  const b = Float64Array.from({ length: rank * OUT_DIM }, () => rand() * 2 - 1);
  const w = new Float64Array(IN_DIM * OUT_DIM);
  for (let k = 0; k < IN_DIM; k++) {
    for (let c = 0; c < OUT_DIM; c++) {
      let s = 0;
      for (let r = 0; r < rank; r++) s += a[k * rank + r] * b[r * OUT_DIM + c];
      w[k * OUT_DIM + c] = s / Math.sqrt(IN_DIM * rank) + (0.05 * (rand() * 2 - 1)) / Math.sqrt(IN_DIM);
    }
  }
  return w;
}

/** The backend from --backend (default auto: CUDA when present, else the CPU, saying why). */
async function pickDevice(): Promise<CudaDevice | undefined> {
  const at = process.argv.indexOf('--backend');
  const wanted = at >= 0 ? process.argv[at + 1] : 'auto';
  if (wanted !== 'cpu' && wanted !== 'cuda' && wanted !== 'auto') {
    throw new Error(`Expected --backend cpu, cuda or auto but received ${JSON.stringify(wanted)}`);
  }
  if (wanted === 'cpu') return undefined;
  const status = info().cuda;
  if (!status.available) {
    if (wanted === 'cuda') throw new Error(`--backend cuda: CUDA is unavailable (${status.reason})`);
    console.log(`training on the CPU (CUDA unavailable: ${status.reason})`);
    return undefined;
  }
  return cuda();
}

/** One contrastive step on the projected batch: device-resident on a GPU, on the CPU otherwise. */
async function step(gpu: CudaDevice | undefined, queries: TokenBatch, docs: TokenBatch) {
  if (!gpu) return contrastiveStep(queries, docs, { backend: 'cpu' });
  const [q, d] = [await gpu.upload(queries), await gpu.upload(docs)];
  try {
    const s = await contrastiveStep(q, d);
    const [dQ, dD] = [await s.dQ.download(), await s.dD.download()];
    s.dQ.dispose();
    s.dD.dispose();
    // The gradient sets are packed float32, in the order of the (packed) projected batches.
    return { loss: s.loss, dQ: dQ.data as Float32Array, dD: dD.data as Float32Array };
  } finally {
    q.dispose();
    d.dispose();
  }
}

/** Mean over held-out queries of the fraction of their planted documents in the top 10. */
async function recallAt10(
  queries: { data: Float32Array; offsets: number[] },
  docs: { data: Float32Array; offsets: number[] },
  relevant: number[][],
  w: Float64Array,
  gpu: CudaDevice | undefined,
): Promise<number> {
  const hits = await topK(projectBatch(queries, w), projectBatch(docs, w), 10, {
    backend: gpu ? 'cuda' : 'cpu',
  });
  let total = 0;
  hits.forEach((top, q) => {
    const found = relevant[q].filter((doc) => top.some((h) => h.index === doc)).length;
    total += found / relevant[q].length;
  });
  return total / relevant.length;
}

const gpu = await pickDevice();
if (gpu) console.log(`training on ${gpu.info.name} (CUDA, device-resident steps)`);
const started = Date.now();
const corpus = demoCorpus({
  docs: 2000,
  queries: TRAIN_QUERIES + EVAL_QUERIES,
  queryLength: 16,
  minDocLength: 16,
  maxDocLength: 48,
  seed: 7,
});
const allDocs = gather(
  corpus.docs,
  Array.from({ length: corpus.docs.count }, (_, i) => i),
);
const evalIds = Array.from({ length: EVAL_QUERIES }, (_, i) => TRAIN_QUERIES + i);
const evalQueries = gather(corpus.queries, evalIds);
const evalRelevant = evalIds.map((q) => corpus.relevant[q]);

// Seeded, so every run prints the same numbers.
const rng = new Rng(1);
const rand = () => rng.float();
const w = poorProjection(rand);
const adam = new Adam(w.length, LEARNING_RATE);
const grad = new Float64Array(w.length);

console.log(
  `epoch 0: recall@10 ${(await recallAt10(evalQueries, allDocs, evalRelevant, w, gpu)).toFixed(3)} (initial)`,
);
for (let epoch = 1; epoch <= EPOCHS; epoch++) {
  const order = Array.from({ length: TRAIN_QUERIES }, (_, i) => i);
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  let lossSum = 0;
  let steps = 0;
  for (let b = 0; b + BATCH <= order.length; b += BATCH) {
    const ids = order.slice(b, b + BATCH);
    const q = gather(corpus.queries, ids);
    const d = gather(
      corpus.docs,
      ids.map((id) => corpus.relevant[id][0]),
    );
    // Query i's positive is document i of the batch (the default labels).
    const result = await step(gpu, projectBatch(q, w), projectBatch(d, w));
    grad.fill(0);
    accumulateWeightGrad(q.data, result.dQ, grad);
    accumulateWeightGrad(d.data, result.dD, grad);
    adam.update(w, grad);
    lossSum += result.loss;
    steps++;
  }
  const recall = await recallAt10(evalQueries, allDocs, evalRelevant, w, gpu);
  console.log(`epoch ${epoch}: loss ${(lossSum / steps).toFixed(4)}, recall@10 ${recall.toFixed(3)}`);
}
console.log(`done in ${((Date.now() - started) / 1000).toFixed(1)} s`);
gpu?.dispose();
