// Worker of bench/plaid-gpu.ts: documents [b0, b1) of the streamed synthetic corpus as float16 rows
// (the same documents whatever the split: each one comes from its own seeded stream).
import { parentPort, workerData } from 'node:worker_threads';
import { encodeFloats } from '../src/floats.js';
import { streamedDocuments, streamedSynthetic } from '../src/plaid/synthetic.js';

const { o, b0, b1 } = workerData as {
  o: { docs: number; length: number; dim: number; topics: number; seed: number };
  b0: number;
  b1: number;
};
const gen = streamedSynthetic(o);
const { data, lengths } = streamedDocuments(gen, b0, b1);
const half = encodeFloats(data, 'float16') as Uint16Array;
parentPort?.postMessage({ half, lengths }, [half.buffer as ArrayBuffer, lengths.buffer as ArrayBuffer]);
