// one variant, int8 or fp8, the int8 suite's inputs (ragged and dense, d 16 and 128, Lq 1..1024); prints max rel err
import { cuda } from '../dist/src/backends/cuda.js';
import { referenceMaxsim } from '../dist/src/backends/reference.js';
import { quantize } from '../dist/src/ops/quantize.js';
import { denseBatch, encodeFloats, raggedBatch } from '../dist/src/tensor.js';
const [variant, dtype, dimsArg] = process.argv.slice(2);
let seed = 12345;
const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
const floats = (n, d) => { const a = new Float32Array(n * d); for (let i = 0; i < a.length; i++) a[i] = rand() * 2 - 1; return a; };
const ragged = (lens, d) => { const off = [0]; for (const l of lens) off.push(off.at(-1) + l); return quantize(raggedBatch(encodeFloats(floats(off.at(-1), d), 'float32'), off, { dim: d, dtype: 'float32' }), dtype); };
const dense = (lens, d) => { const cap = Math.max(...lens); return quantize(denseBatch(encodeFloats(floats(lens.length * cap, d), 'float32'), { count: lens.length, length: cap, dim: d, dtype: 'float32', lengths: lens }), dtype); };
const docLengths = [0, 1, 7, 64, 129, 300, 33, 0, 16, 128];
const dev = await cuda({ device: 0 });
for (const d of (dimsArg ?? '16,128').split(',').map(Number)) for (const layout of ['ragged', 'dense']) {
  const docs = layout === 'ragged' ? ragged(docLengths, d) : dense(docLengths, d);
  const corpus = await dev.upload(docs);
  for (const lq of [1, 32, 300, 1024]) {
    const q = ragged([lq, 0, Math.ceil(lq / 3)], d);
    let msg;
    try {
      const got = (await corpus.score(q, { variant })).data;
      const ref = referenceMaxsim(q, docs);
      let e = 0; for (let i = 0; i < got.length; i++) { if (Number.isNaN(got[i])) { e = NaN; break; } if (ref[i] !== -Infinity) e = Math.max(e, Math.abs(got[i] - ref[i]) / (Math.abs(ref[i]) + 1e-3)); else if (got[i] !== -Infinity) e = Infinity; }
      msg = `err ${e.toExponential(1)}`;
    } catch (err) { msg = `FAIL ${err.message.slice(0, 150)}`; console.log(`${variant} d=${d} ${layout} lq=${lq} ${msg}`); process.exit(1); }
    console.log(`${variant} d=${d} ${layout} lq=${lq} ${msg}`);
  }
  corpus.dispose();
}
