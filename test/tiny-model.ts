// The tiny random-weight ColBERT of test/fixtures/tiny-colbert (scripts/make-tiny-colbert.py) and why
// the tests that encode with it skip: the model not made, or onnxruntime-node missing (CI installs the
// dev dependencies, so there a missing runtime fails instead of skipping).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadOrt } from '../src/encode/runtime.js';
import { packageRoot } from '../src/native.js';

export const TINY = path.join(packageRoot, 'test', 'fixtures', 'tiny-colbert');

const hasOrt = await loadOrt().then(
  () => true,
  () => false,
);

/** The skip reason of a test that encodes with the tiny model, or false. */
export const tinySkip: string | false = !fs.existsSync(path.join(TINY, 'model.onnx'))
  ? 'test/fixtures/tiny-colbert/model.onnx not made yet'
  : !hasOrt && !process.env.CI
    ? 'onnxruntime-node is not installed'
    : false;
