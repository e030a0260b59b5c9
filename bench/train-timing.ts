// One training step at ColPali shape (all pairs B x B, Lq = Ld = 1024, d = 128, fp16) by phase, as one
// JSON line (src/bench/train.ts; `maxsim bench --train` runs the same, one process per B).
// inputs 'device' (CUDA): uploaded once, the argmax and the gradients stay on the GPU; 'host': host
// arrays in and out (every pass uploads, the argmax and the gradients cross the bus).
// Run: node dist/bench/train-timing.js [cpu|cuda] [B] [csr|atomic|auto] [repeats] [host|device]
import { measureTrainStep } from '../src/bench/train.js';
import type { TrainDDPath } from '../src/ops/train.js';

const backend = (process.argv[2] ?? 'cuda') as 'cpu' | 'cuda';
const row = await measureTrainStep(
  { batch: Number(process.argv[3] ?? 32), queryLength: 1024, docLength: 1024, dim: 128, dtype: 'float16' },
  {
    backend,
    dDPath: (process.argv[4] ?? 'csr') as TrainDDPath,
    repeats: Number(process.argv[5] ?? 3),
    inputs: (process.argv[6] ?? 'host') as 'host' | 'device',
  },
);
console.log(JSON.stringify(row));
