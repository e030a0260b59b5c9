// The int8 residual sets (avx512vnni, avxvnni, avx2int8: native/cpu/residual_int8_impl.h) against
// float64 with residual.h's error bound, over fresh random indexes: ragged and 1-token documents,
// documents crossing blocks, queries of 1..90 tokens, d from 1 to 128 (d not a multiple of 4
// included), and extreme operands (every query byte and table weight at its largest magnitude, where
// VPMADDUBSW would saturate with 8-bit weights). 4-bit indexes fall back to the fp32 set, bit for bit.
// On AVX2-only CPUs (simulated with MAXSIM_CPU_DISABLE) the default is the fastest int8 set.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import { cpuInfo } from '../src/backends/cpu.js';
import { packageRoot } from '../src/native.js';
import { int8Residual, type NativeIndex, type ResidualIsa, residualAddon } from '../src/plaid/native.js';
import { rng, runSeed } from './helpers.js';
import { randomIndex, referenceResidual } from './plaid-kernel-helpers.js';

const addon = residualAddon();
const isas = addon.isas();
const features = cpuInfo().features.split(' ');
const x64 = process.arch === 'x64';
const avx2 = x64 && features.includes('avx2') && features.includes('fma');

/** Why the int8 set cannot run here (false: it must be usable, else the test fails). */
function skipOf(isa: ResidualIsa): string | false {
  if (!x64) return 'x86-64 kernel set';
  if (isa === 'avx512vnni')
    return features.includes('avx512vnni') && features.includes('avx512bw')
      ? false
      : 'no AVX-512 VNNI on this CPU';
  if (!avx2) return 'no AVX2 + FMA on this CPU';
  if (isa === 'avxvnni') {
    if (!features.includes('avxvnni')) return 'no AVX-VNNI on this CPU';
    const probe = spawnSync(process.env.CXX || 'c++', [
      '-mavxvnni',
      '-x',
      'c++',
      '-fsyntax-only',
      '/dev/null',
    ]);
    return probe.status === 0 ? false : 'the compiler has no -mavxvnni (set compiled out)';
  }
  return false;
}

function check(
  ix: NativeIndex,
  q: Float32Array,
  lq: number,
  docs: Int32Array,
  isa: ResidualIsa,
  ctx: string,
) {
  const got = addon.scoreDocs(ix, q, docs, { isa });
  const wmax = ix.bits === 2 ? (int8Residual[isa]?.weightMax ?? 0) : 0;
  for (const b of docs) {
    const len = ix.docOffsets[b + 1] - ix.docOffsets[b];
    const ref = referenceResidual(ix, q, lq, b, wmax);
    const c = `${ctx} doc ${b} (length ${len}, seed ${runSeed})`;
    if (len === 0) assert.equal(got[b], Number.NEGATIVE_INFINITY, c);
    else
      assert.ok(
        Math.abs(got[b] - ref.score) <= ref.bound,
        `${c}: ${got[b]} vs ${ref.score} (bound ${ref.bound})`,
      );
  }
  return got;
}

describe('int8 residual sets', () => {
  for (const isa of Object.keys(int8Residual) as ResidualIsa[]) {
    const skip = skipOf(isa);
    test(`${isa}: usable where the CPU has it`, { skip }, () => {
      assert.ok(isas.includes(isa), `${isa} in ${isas}`);
    });

    test(`${isa} 2-bit: random ragged documents, lq 1..90, d 1..128 vs float64 (seed ${runSeed})`, {
      skip,
    }, () => {
      const rand = rng(runSeed + 31);
      for (const d of [1, 5, 32, 48, 64, 96, 100, 128]) {
        const lengths = Array.from(
          { length: 9 },
          () => [0, 1, 1, 2, 15, 16, 17, 40, 70][Math.floor(rand() * 9)],
        );
        lengths.push(1, 33);
        const k = 1 + Math.floor(rand() * 50);
        const ix = randomIndex(rand, lengths, d, k, 2);
        addon.checkIndex(ix);
        const docs = Int32Array.from(lengths.keys());
        for (const lq of [1, 2 + Math.floor(rand() * 14), 16, 17 + Math.floor(rand() * 30), 64, 90]) {
          const q = Float32Array.from({ length: lq * d }, () => rand() * 2 - 1);
          check(ix, q, lq, docs, isa, `${isa} d ${d} lq ${lq}`);
        }
      }
    });

    test(`${isa} 2-bit: extreme operands stay within the bound (no int16 saturation; seed ${runSeed})`, {
      skip,
    }, () => {
      const rand = rng(runSeed + 32);
      for (const d of [32, 64, 128]) {
        const lengths = [16, 1, 40];
        const ix = randomIndex(rand, lengths, d, 8, 2);
        // every weight at +-0.3: the table's int8 values are all +-weightMax
        for (let k = 0; k < d; k++) for (let e = 0; e < 16; e++) ix.tables[k * 16 + e] = e & 1 ? -0.3 : 0.3;
        const docs = Int32Array.from(lengths.keys());
        for (const sign of [1, -1, 0]) {
          // every query byte at 255 (sign 1), 1 (sign -1) or both alternating: the largest pair sums
          const lq = 24;
          const q = Float32Array.from({ length: lq * d }, (_, i) => (sign || (i % 2 ? 1 : -1)) * 0.5);
          check(ix, q, lq, docs, isa, `${isa} extremes d ${d} sign ${sign}`);
        }
      }
    });

    test(`${isa} 4-bit: the fp32 set's scores`, { skip }, () => {
      const rand = rng(runSeed + 33);
      const lengths = [1, 17, 40, 3];
      const ix = randomIndex(rand, lengths, 64, 12, 4);
      const q = Float32Array.from({ length: 20 * 64 }, () => rand() * 2 - 1);
      const docs = Int32Array.from(lengths.keys());
      const fp32 = int8Residual[isa]?.fp32 as ResidualIsa;
      assert.deepEqual(addon.scoreDocs(ix, q, docs, { isa }), addon.scoreDocs(ix, q, docs, { isa: fp32 }));
    });
  }

  test('AVX2-only CPUs default to an int8 set, AVX-512 ones keep avx512vnni first', {
    skip: avx2 ? false : 'no AVX2 + FMA on this CPU',
  }, () => {
    const script = `
      const { residualAddon } = await import(${JSON.stringify(path.join(packageRoot, 'dist/src/plaid/native.js'))});
      console.log(JSON.stringify(residualAddon().isas()));`;
    const run = (disable: string) => {
      const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
        encoding: 'utf8',
        env: { ...process.env, MAXSIM_CPU_DISABLE: disable },
      });
      assert.equal(r.status, 0, r.stderr);
      return JSON.parse(r.stdout) as string[];
    };
    // Zen 2/3, Haswell to Comet Lake: no AVX-512, no AVX-VNNI
    assert.deepEqual(run('avx512f,avxvnni'), ['avx2int8', 'avx2', 'portable']);
    const noZmm = run('avx512f');
    assert.deepEqual(noZmm.slice(-2), ['avx2', 'portable']);
    assert.equal(noZmm[0], isas.includes('avxvnni') ? 'avxvnni' : 'avx2int8');
    if (isas.includes('avx512vnni')) assert.equal(isas[0], 'avx512vnni');
  });
});

test('an isa that is not a name is refused, naming isa (it ran the default before)', () => {
  const rand = rng(runSeed + 7);
  const ix = randomIndex(rand, [3, 17], 32, 8, 2);
  const q = Float32Array.from({ length: 4 * 32 }, () => rand() - 0.5);
  const docs = Int32Array.of(0, 1);
  for (const isa of [42, true, {}, ['avx2']])
    assert.throws(
      () => addon.scoreDocs(ix, q, docs, { isa: isa as never }),
      (e: unknown) => /isa/.test(String(e)) && /a kernel set's name/.test(String(e)),
      JSON.stringify(isa),
    );
  for (const isa of [undefined, null])
    assert.equal(addon.scoreDocs(ix, q, docs, { isa: isa as never }).length, 2);
});
