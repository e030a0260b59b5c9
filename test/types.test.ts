// Types that help (issue 20 item 5). This file is compiled by tsc with the rest of the tests, so the
// `@ts-expect-error` lines are compile-time tests: each must be an error, or the build fails.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import {
  type DeviceCorpus,
  denseBatch,
  type Hit,
  InvalidArgumentError,
  raggedBatch,
  type ShardedCorpus,
  type TokenBatch,
  type TokenMatrix,
  tokenMatrix,
} from '../src/index.js';
import { floatToBf16Bits } from '../src/subpaths/internal.js';
import { readNpy, writeNpy } from '../src/subpaths/io.js';
import { maxsimSync } from '../src/subpaths/sync.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-types-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

// Never called: only compiled.
export function compileTimeChecks(d: Float32Array, o: number[]): unknown[] {
  return [
    // @ts-expect-error a string is not token data
    tokenMatrix('1,2,3,4', 1, 4),
    // @ts-expect-error the options (with dim) are required
    raggedBatch(d, o),
    // @ts-expect-error dim is required
    raggedBatch(d, o, {}),
    // @ts-expect-error no such dtype
    tokenMatrix(d, 1, 4, { dtype: 'float64' }),
    // @ts-expect-error offsets of strings
    raggedBatch(d, ['0', '1'], { dim: 4 }),
    // @ts-expect-error denseBatch needs count, length and dim
    denseBatch(d, { dim: 4 }),
  ];
}

// Never called: DeviceCorpus.topK and ShardedCorpus.topK answer like the root topK, one list for one
// query (a TokenMatrix), a list per query for a batch (the GPU runs are in test/gpu/two-stage and sharded).
export async function deviceTopKShapes(
  c: DeviceCorpus,
  s: ShardedCorpus,
  q: TokenMatrix,
  b: TokenBatch,
  either: TokenMatrix | TokenBatch,
): Promise<unknown[]> {
  const one: Hit[] = await c.topK(q, 3);
  const lists: Hit[][] = await c.topK(b, 3);
  const shardedOne: Hit[] = await s.topK(q, 3, { rescore: { docs: s, candidates: 9 } });
  const shardedLists: Hit[][] = await s.topK(b, 3);
  const unknownShape: Hit[] | Hit[][] = await c.topK(either, 3);
  // @ts-expect-error one query gives one list, not a list per query
  const wrong: Hit[][] = await c.topK(q, 3);
  // @ts-expect-error a batch gives a list per query
  const wrongToo: Hit[] = await s.topK(b, 3);
  return [one, lists, shardedOne, shardedLists, unknownShape, wrong, wrongToo];
}

describe('types that help', () => {
  test('readNpy results feed raggedBatch and tokenMatrix without casts', () => {
    const d = 4;
    const values = Float32Array.from({ length: 5 * d }, (_, i) => Math.sin(i));
    writeNpy(path.join(tmp, 'docs.npy'), { dtype: 'float32', shape: [5, d], data: values });
    writeNpy(path.join(tmp, 'off.npy'), { dtype: 'int64', shape: [3], data: BigInt64Array.of(0n, 2n, 5n) });
    writeNpy(path.join(tmp, 'q.npy'), { dtype: 'float32', shape: [2, d], data: values.slice(0, 2 * d) });
    const docs = readNpy(path.join(tmp, 'docs.npy'));
    const offsets = readNpy(path.join(tmp, 'off.npy'));
    const q = readNpy(path.join(tmp, 'q.npy'));
    const batch: TokenBatch = raggedBatch(docs.data, offsets.data, { dim: docs.shape[1] });
    const query: TokenMatrix = tokenMatrix(q.data, q.shape[0], q.shape[1]);
    assert.deepEqual([...batch.lengths], [2, 3]);
    assert.equal(maxsimSync(query, batch).length, 2);
    // an int64 array read as token data compiles, and is refused at run time by name
    assert.throws(
      () => tokenMatrix(offsets.data, 3, 1),
      (e: unknown) =>
        e instanceof InvalidArgumentError && e.argument === 'data' && /number\[\]/.test(e.message),
    );
  });

  test('Float64Array and number[] are converted (one copy) to float32, or to the dtype asked for', () => {
    const values = [0.5, -1.25, 3, 1e-3, 7, -2, 0, 1];
    const fromArray = tokenMatrix(values, 2, 4);
    const fromF64 = tokenMatrix(Float64Array.from(values), 2, 4);
    for (const m of [fromArray, fromF64]) {
      assert.equal(m.dtype, 'float32');
      assert.ok(m.data instanceof Float32Array);
      assert.deepEqual([...m.data], [...Float32Array.from(values)]);
    }
    const bf16 = raggedBatch(values, [0, 1, 2], { dim: 4, dtype: 'bfloat16' });
    assert.ok(bf16.data instanceof Uint16Array);
    assert.deepEqual([...bf16.data], values.map(floatToBf16Bits));
    // a copy: later writes to the source are not seen
    const src = Float64Array.from(values);
    const m = tokenMatrix(src, 2, 4);
    src[0] = 99;
    assert.equal(m.data[0], 0.5);
    // scoring from JSON-shaped input
    const docs = raggedBatch(JSON.parse('[1, 0, 0, 1, 0.5, 0.5]') as number[], [0, 2, 3], { dim: 2 });
    assert.deepEqual([...maxsimSync(tokenMatrix([1, 0], 1, 2), docs)], [1, 0.5]);
    // refused, by name
    assert.throws(() => tokenMatrix([1, '2' as never, 3, 4], 1, 4), /data\[1\]/);
    assert.throws(() => tokenMatrix([1, 2, 3, 4], 1, 4, { dtype: 'int8' }), /data\.dtype/);
    assert.throws(() => tokenMatrix([1, Number.NaN], 1, 2), /non-finite/);
    // beyond float32: refused as such, not left to become Infinity
    assert.throws(
      () => tokenMatrix(new Float64Array([1e39, 0]), 1, 2),
      /within the float32 range .* for data but received 1 value beyond it \(the first, 1e\+39, at index 0\)/,
    );
  });
});
