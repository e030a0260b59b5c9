// `maxsim chamfer`: Chamfer distance between point clouds read from .npy / .safetensors files.
import { Command, Option } from 'commander';
import { MAX_THREADS } from '../backends/constants.js';
import type { BackendChoice } from '../backends/select.js';
import { arrayToDocs, loadArray } from '../io/load.js';
import { chamfer } from '../ops/chamfer.js';
import { raggedBatch, type TokenBatch, type TokenData } from '../tensor.js';
import { BACKEND_CHOICES, fixed, integerOption, jsonScore, printTable } from './common.js';

interface ChamferCommandOptions {
  a: string;
  b: string;
  aOffsets?: string;
  bOffsets?: string;
  backend: BackendChoice;
  reduction: 'mean' | 'sum';
  threads?: number;
  json?: boolean;
  checkFinite: boolean;
}

/** [N, d] (one cloud), packed [T, d] with offsets [B+1], or dense [B, L, d]. */
export function loadClouds(
  spec: string,
  offsetsSpec: string | undefined,
  name: string,
  checkFinite: boolean,
): TokenBatch {
  const arr = loadArray(spec, { argument: name });
  if (arr.shape.length === 2 && offsetsSpec === undefined) {
    const [n, dim] = arr.shape;
    return raggedBatch(arr.data as TokenData, [0, n], { dtype: arr.dtype as 'float32', dim, checkFinite });
  }
  const offsets =
    offsetsSpec === undefined ? undefined : loadArray(offsetsSpec, { argument: `${name}-offsets` });
  return arrayToDocs(arr, { offsets, checkFinite }, name);
}

export function chamferCommand(): Command {
  return new Command('chamfer')
    .description(
      'Chamfer distance per pair of point clouds (cloud b of --a with cloud b of --b): the mean (or sum) over ' +
        "each cloud's points of the squared distance to the nearest point of the other, both directions added",
    )
    .requiredOption(
      '--a <spec>',
      'points: [N, d] (one cloud) or packed [T, d] with --a-offsets; float32, d <= 8',
    )
    .requiredOption('--b <spec>', 'points of the paired clouds, like --a')
    .option('--a-offsets <spec>', 'packed --a: point offsets [B+1] (int32/int64)')
    .option('--b-offsets <spec>', 'packed --b: point offsets [B+1]')
    .addOption(new Option('--backend <name>', 'where to compute').choices(BACKEND_CHOICES).default('auto'))
    .addOption(
      new Option('--reduction <how>', "over each cloud's points").choices(['mean', 'sum']).default('mean'),
    )
    .option('--threads <n>', 'CPU worker threads (0 = all cores)', integerOption(0, MAX_THREADS))
    .option(
      '--json',
      'print JSON: {"distances": [one value per pair]} (+Infinity, a cloud facing an empty one, as null)',
    )
    .option('--no-check-finite', 'skip the scan for NaN / Infinity in the inputs (trusted input)')
    .action(async (opts: ChamferCommandOptions) => {
      const P = loadClouds(opts.a, opts.aOffsets, '--a', opts.checkFinite);
      const Q = loadClouds(opts.b, opts.bOffsets, '--b', opts.checkFinite);
      const r = await chamfer(P, Q, {
        backend: opts.backend,
        reduction: opts.reduction,
        threads: opts.threads,
      });
      if (opts.json) {
        console.log(JSON.stringify({ distances: Array.from(r.distances, jsonScore) }));
        return;
      }
      printTable(
        ['pair', 'points a', 'points b', 'distance', 'a -> b', 'b -> a'],
        Array.from(r.distances, (dist, b) => [
          String(b),
          String(P.lengths[b]),
          String(Q.lengths[b]),
          fixed(dist, 6),
          fixed(r.forward[b], 6),
          fixed(r.reverse[b], 6),
        ]),
      );
    });
}
