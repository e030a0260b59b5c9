// The backward under contention (every query token picks one of `hot` document tokens per document):
// CSR vs atomic vs 'auto' dD, device-resident, as one JSON line (src/bench/train.ts).
// Run: node dist/bench/train-contention.js [B] [hotTokens]
import { measureContention } from '../src/bench/train.js';

console.log(
  JSON.stringify(await measureContention(Number(process.argv[2] ?? 64), Number(process.argv[3] ?? 2))),
);
