// bench/serve.ts's command line: its options (see serve.ts's header for the list) and their checks.

import * as os from 'node:os';

export interface Args {
  docs: number;
  docLen: number;
  dim: number;
  queryLen: number;
  topK: number;
  connections: number;
  duration: number;
  rounds: number;
  amount?: number;
  threads?: number;
  soak?: number;
  sampleEvery?: number;
  rerank: boolean;
  candidates: number;
  passesInFlight?: number;
  backend: string;
  maxBatch: number;
  maxWaitMs: number | 'auto';
  corpus?: string;
  /** Where the generated corpus is kept (reused by a later run with the same arguments). */
  corpusDir?: string;
  clientWorkers: number;
  dtype: 'float16' | 'bfloat16' | 'float32' | 'int8';
  /** serve --dtype: 8-bit search passes. */
  passDtype?: 'int8' | 'fp8';
  json: boolean;
}

export function parseArgs(argv: string[]): Args {
  const a: Args = {
    docs: 4000,
    docLen: 64,
    dim: 128,
    queryLen: 32,
    topK: 10,
    connections: 32,
    duration: 5,
    rounds: 3,
    backend: 'cpu',
    maxBatch: 128,
    maxWaitMs: 'auto',
    rerank: false,
    candidates: 1000,
    clientWorkers: os.cpus().length >= 8 ? 4 : 1,
    dtype: 'float16',
    json: false,
  };
  const ints: Record<string, keyof Args> = {
    '--docs': 'docs',
    '--doc-len': 'docLen',
    '--dim': 'dim',
    '--query-len': 'queryLen',
    '--top-k': 'topK',
    '--connections': 'connections',
    '--duration': 'duration',
    '--rounds': 'rounds',
    '--amount': 'amount',
    '--threads': 'threads',
    '--soak': 'soak',
    '--sample-every': 'sampleEvery',
    '--candidates': 'candidates',
    '--passes-in-flight': 'passesInFlight',
    '--max-batch': 'maxBatch',
    '--client-workers': 'clientWorkers',
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = argv[i + 1];
    if (flag === '--json') a.json = true;
    else if (flag === '--rerank') a.rerank = true;
    else if (flag in ints) {
      const n = Number(value);
      if (!Number.isInteger(n) || n < 1)
        throw new Error(`${flag}: expected a positive integer, received ${value}`);
      (a as unknown as Record<string, number>)[ints[flag]] = n;
      i++;
    } else if (flag === '--max-wait-ms') {
      a.maxWaitMs = value === 'auto' ? 'auto' : Number(value);
      if (!(a.maxWaitMs === 'auto' || a.maxWaitMs >= 0))
        throw new Error(`--max-wait-ms: expected auto or a number >= 0, received ${value}`);
      i++;
    } else if (flag === '--backend') {
      if (!['cpu', 'cuda', 'auto'].includes(value))
        throw new Error(`--backend: cpu, cuda or auto, received ${value}`);
      a.backend = value;
      i++;
    } else if (flag === '--dtype') {
      if (!['float16', 'bfloat16', 'float32', 'int8'].includes(value))
        throw new Error(`--dtype: float16, bfloat16, float32 or int8, received ${value}`);
      a.dtype = value as Args['dtype'];
      i++;
    } else if (flag === '--pass-dtype') {
      if (value !== 'int8' && value !== 'fp8')
        throw new Error(`--pass-dtype: int8 or fp8, received ${value}`);
      a.passDtype = value;
      i++;
    } else if (flag === '--corpus') {
      a.corpus = value;
      i++;
    } else if (flag === '--corpus-dir') {
      a.corpusDir = value;
      i++;
    } else throw new Error(`unknown argument ${flag}`);
  }
  if ((a.soak ?? 0) > 1800) throw new Error('--soak: at most 1800 s');
  if (a.rerank && a.candidates > a.docs)
    throw new Error(`--candidates: at most --docs (${a.docs}), received ${a.candidates}`);
  if (a.duration * a.rounds * 2 > 1800) throw new Error('--duration x --rounds x 2: at most 1800 s');
  return a;
}
