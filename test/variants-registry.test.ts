// The scoring contract is written once: native/cuda/kernels/maxsim_registry.h. The kernel sources
// instantiate its rows and native/cuda/kernels/variants_gen.cc prints variants.json from the same
// rows; this checks that the committed variants.json (what the dispatcher reads) is exactly that
// program's output. Needs a C++17 compiler (the one that builds the addon), no CUDA.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { test } from 'node:test';
import { dispatchTable, parseVariants, variantsPath } from '../src/backends/cuda-dispatch.js';

const root = resolve(dirname(variantsPath), '..', '..', '..');

function generated(): string {
  const r = spawnSync(process.execPath, [join(root, 'scripts', 'build-native.mjs'), 'variants', '--print'], {
    cwd: root,
    encoding: 'utf8',
  });
  assert.equal(r.status, 0, `node scripts/build-native.mjs variants --print failed: ${r.stderr}`);
  return r.stdout;
}

test('variants.json is the registry generator output, byte for byte', () => {
  const text = generated();
  const committed = readFileSync(variantsPath, 'utf8');
  assert.equal(
    text,
    committed,
    'native/cuda/kernels/variants.json is stale: run `node scripts/build-native.mjs variants` and commit it',
  );
  // and the dispatcher's table is the generated one: every kernel entry point, every field
  const fromRegistry = parseVariants(JSON.parse(text), 'variants_gen');
  assert.equal(fromRegistry.length, 63, 'one variant per scoring entry point');
  assert.deepEqual(
    fromRegistry,
    dispatchTable().variants.map((v) => v),
  );
});

test('the registry states each launch number once: the kernel sources expand its rows', () => {
  const dir = dirname(variantsPath);
  const read = (f: string) => readFileSync(join(dir, f), 'utf8');
  // each family's entry points come from the registry lists, not from literal tables
  assert.match(read('maxsim_mma.cu'), /^MAXSIM_MMA_VARIANTS\(MAXSIM_MMA_ROW\)$/m);
  assert.match(read('maxsim_wgmma.cu'), /^MAXSIM_WGMMA_VARIANTS\(MAXSIM_WGMMA_ROW\)$/m);
  assert.match(read('maxsim_simt.cu'), /^MAXSIM_SIMT_VARIANTS\(MAXSIM_SIMT_ROW\)$/m);
  const cuh = read('maxsim_8bit.cuh');
  assert.match(cuh, /MAXSIM_8BIT_MMA_VARIANTS\(MAXSIM_8BIT_MMA_ROW, PREFIX, E, KS_CTAS\)/);
  assert.match(cuh, /MAXSIM_8BIT_WGMMA_VARIANTS\(MAXSIM_8BIT_WGMMA_ROW, PREFIX, E\)/);
  for (const [f, t] of [
    ['maxsim_int8.cu', 'INT8'],
    ['maxsim_fp8.cu', 'FP8'],
  ])
    assert.match(
      read(f),
      new RegExp(`^MAXSIM_8BIT_KERNELS\\(maxsim_\\w+, \\w+, MAXSIM_${t}_KS_CTAS\\)$`, 'm'),
    );
  // no entry point is declared by name outside the registry expansion (a literal name would be a
  // second statement of its numbers)
  for (const f of ['maxsim_mma.cu', 'maxsim_wgmma.cu', 'maxsim_simt.cu', 'maxsim_8bit.cuh'])
    assert.doesNotMatch(
      read(f),
      /^\s*MAXSIM_\w*ENTRY\(maxsim_\w+,/m,
      `${f}: an entry point outside the registry`,
    );
});
