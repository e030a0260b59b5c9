// The numbers both languages state are one table (native/common/constants.json): its generated C
// header and TypeScript module are what scripts/gen-constants.mjs makes of it, byte for byte, and
// the TypeScript names that predate the table hold its values.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import * as constants from '../src/backends/constants.js';
import { BLOCK_FIELDS } from '../src/backends/cuda-stream-plan.js';
import { packageRoot } from '../src/native.js';
import { MAX_DIM } from '../src/tensor.js';

test('the generated header and module are fresh', () => {
  const gen = path.join(packageRoot, 'scripts', 'gen-constants.mjs');
  const r = spawnSync(process.execPath, [gen, '--check'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
});

test('every row of the table reaches both languages with its value', () => {
  const table = JSON.parse(
    readFileSync(path.join(packageRoot, 'native', 'common', 'constants.json'), 'utf8'),
  ) as {
    constants: { name: string; value: number }[];
  };
  const header = readFileSync(path.join(packageRoot, 'native', 'common', 'maxsim_constants.h'), 'utf8');
  assert.ok(table.constants.length >= 10);
  for (const { name, value } of table.constants) {
    assert.equal((constants as Record<string, number>)[name], value, name);
    assert.match(header, new RegExp(`^#define MAXSIM_${name} ${value}$`, 'm'), name);
  }
  assert.equal(MAX_DIM, constants.MAX_DIM, 'tensor.ts MAX_DIM');
  assert.equal(BLOCK_FIELDS, constants.STREAM_BLOCK_FIELDS, 'cuda-stream-plan.ts BLOCK_FIELDS');
});

test('no native source states a table number again where it names the limit', () => {
  // the patterns the table replaced: a literal 2^20 dimension check, the Chamfer [1, 8], the pool's 256
  const files = [
    'native/binding/token_set.h',
    'native/binding/cuda_binding.cc',
    'native/binding/cuda_chamfer_binding.cc',
    'native/binding/chamfer_binding.cc',
    'native/binding/cuda_stream_binding.cc',
    'native/cpu/thread_pool.cc',
  ];
  for (const f of files) {
    const text = readFileSync(path.join(packageRoot, f), 'utf8');
    assert.doesNotMatch(text, /dim <= 1 << 20|"a dimension in \[1, 8\]"|n > 256|kBlockFields = 8/, f);
  }
});
