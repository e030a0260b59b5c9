// Every CPU kernel set is admitted only on every feature its translation unit is compiled with:
// the addon's admission table (native/cpu/cpu_features.cc) against binding.gyp's -m flags, expanded
// to what the compiler then may emit (its predefined macros), and the usable sets against the table.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import { cpuAdmission, cpuInfo } from '../src/backends/cpu.js';
import { nativeUnavailableReason, packageRoot } from '../src/native.js';
import { cpuInt8Isas } from '../src/ops/quantize.js';

interface GypTarget {
  target_name: string;
  cflags_cc?: string[];
}

/** The x64 kernel targets of binding.gyp and their -m flags. */
function x64Targets(): Map<string, string[]> {
  const gyp = JSON.parse(
    fs.readFileSync(path.join(packageRoot, 'binding.gyp'), 'utf8').replace(/^\s*#.*$/gm, ''),
  ) as { conditions: [string, { targets: GypTarget[] }][] };
  const out = new Map<string, string[]>();
  for (const [cond, body] of gyp.conditions) {
    if (cond !== "target_arch=='x64'") continue;
    for (const t of body.targets) {
      // A `<!@(...)` probe adds its flag only where the compiler has it; count it as present.
      const flags = (t.cflags_cc ?? []).flatMap((f) =>
        f.startsWith('<!') ? (f.match(/-m[a-z0-9-]+/g) ?? []).filter((m) => m !== '-mavx2') : [f],
      );
      out.set(t.target_name, [...new Set(flags.filter((f) => f.startsWith('-m')).map((f) => f.slice(2)))]);
    }
  }
  return out;
}

// The compiler's ISA macros, by feature name; anything else it defines counts as unknown.
const macroFeature: Record<string, string> = {
  __SSE3__: 'sse3',
  __SSSE3__: 'ssse3',
  __SSE4_1__: 'sse4.1',
  __SSE4_2__: 'sse4.2',
  __POPCNT__: 'popcnt',
  __XSAVE__: 'xsave',
  __PCLMUL__: 'pclmul',
  __AVX__: 'avx',
  __AVX2__: 'avx2',
  __FMA__: 'fma',
  __F16C__: 'f16c',
  __AVX512F__: 'avx512f',
  __AVX512BW__: 'avx512bw',
  __AVX512VL__: 'avx512vl',
  __AVX512DQ__: 'avx512dq',
  __AVX512BF16__: 'avx512bf16',
  __AVX512VNNI__: 'avx512vnni',
  __AVXVNNI__: 'avxvnni',
  __AMX_TILE__: 'amx-tile',
  __AMX_BF16__: 'amx-bf16',
  __AMX_INT8__: 'amx-int8',
};

// Architectural implications the admission may rely on: every AVX-512F CPU has AVX2, every AVX2
// CPU has AVX, and every AVX CPU has XSAVE (the OS check needs it), SSE3-4.2 and POPCNT.
const implies: Record<string, string[]> = {
  avx512f: ['avx2'],
  avx2: ['avx'],
  avx: ['sse3', 'ssse3', 'sse4.1', 'sse4.2', 'popcnt', 'xsave'],
};

function closure(features: string[]): Set<string> {
  const out = new Set<string>();
  const visit = (f: string) => {
    if (out.has(f)) return;
    out.add(f);
    for (const g of implies[f] ?? []) visit(g);
  };
  for (const f of features) visit(f);
  return out;
}

/** What code built with these -m flags may use beyond the baseline, by the compiler's own macros. */
function compiledFeatures(flags: string[]): Set<string> | undefined {
  const cxx = process.env.CXX || 'c++';
  const macros = (args: string[]) => {
    const r = spawnSync(cxx, [...args, '-dM', '-E', '-x', 'c++', '/dev/null'], { encoding: 'utf8' });
    if (r.status !== 0) return undefined;
    return new Set(r.stdout.split('\n').map((l) => l.split(' ')[1]));
  };
  const base = macros([]);
  const withFlags = macros(flags.map((f) => `-m${f}`));
  if (!base || !withFlags) return undefined;
  const out = new Set<string>();
  for (const m of withFlags) {
    if (base.has(m) || !/^__[A-Z0-9_]+__$/.test(m)) continue;
    const f = macroFeature[m];
    if (f) out.add(f);
    else if (/^__(SSE|AVX|AMX|FMA|F16C|BMI|VPCLMUL|GFNI|VAES|XSAVE)/.test(m)) out.add(`unknown ${m}`);
  }
  return out;
}

const sorted = (s: Iterable<string>) => [...s].sort();

const reason = nativeUnavailableReason();
describe('CPU kernel admission', { skip: reason }, () => {
  test('binding.gyp: every x64 kernel target is admitted on exactly its flags', {
    skip: process.arch === 'x64' ? false : 'x64 kernel targets only',
  }, () => {
    const targets = x64Targets();
    const table = cpuAdmission();
    assert.ok(targets.size >= 8, `binding.gyp lists its x64 kernel targets (${sorted(targets.keys())})`);
    for (const [name, flags] of targets) {
      const rows = table.filter((r) => r.target === name);
      assert.ok(rows.length > 0, `${name}: some kernel set is compiled in it and admitted by the table`);
      for (const row of rows) {
        const label = `${row.family}/${row.set} (${name})`;
        // The flags, one for one (no flag without its check, no check without its flag).
        assert.deepEqual(sorted(closure(row.needs)), sorted(closure(flags)), `${label}: needs vs -m flags`);
        // And everything the compiler may emit under them.
        const emitted = compiledFeatures(flags);
        if (emitted) assert.deepEqual(sorted(closure(row.needs)), sorted(closure([...emitted])), label);
      }
    }
    for (const row of table) {
      if (row.target === 'maxsim_native') assert.deepEqual(row.needs, [], `${row.set} runs on the baseline`);
      else
        assert.ok(
          targets.has(row.target),
          `${row.family}/${row.set}: target ${row.target} is in binding.gyp`,
        );
    }
  });

  test('the usable kernel sets are the admitted ones, best first', () => {
    const table = cpuAdmission();
    const admitted = (family: string) =>
      table.filter((r) => r.family === family && r.admitted).map((r) => r.set);
    const info = cpuInfo();
    assert.deepEqual(
      info.isas,
      admitted('fp').filter((s) => info.isas.includes(s as never)),
    );
    for (const s of info.isas) assert.ok(admitted('fp').includes(s), `${s} is admitted`);
    assert.equal(info.isa, info.isas[0]);
    for (const s of cpuInt8Isas()) assert.ok(admitted('int8').includes(s), `int8 ${s} is admitted`);
    // and the other way: an admitted set that is compiled in is usable (a name typo drops it)
    const avxVnniCompiled =
      spawnSync(process.env.CXX || 'c++', ['-mavxvnni', '-x', 'c++', '-fsyntax-only', '/dev/null']).status ===
      0;
    for (const s of admitted('int8')) {
      if (s === 'avx-vnni' && !avxVnniCompiled) continue;
      assert.ok((cpuInt8Isas() as string[]).includes(s), `admitted int8 ${s} is usable`);
    }
    for (const s of admitted('fp')) assert.ok((info.isas as string[]).includes(s), `admitted ${s} is usable`);
    assert.equal(info.isas.at(-1), 'portable');
  });

  test('a CPU without AVX512-BF16 (Skylake-SP, Ice Lake, Zen 3) keeps AVX-512 fp32 but not the bf16 set', {
    skip: cpuInfo().isas.includes('avx512') ? false : 'no AVX-512 on this CPU',
  }, () => {
    const script = `
      const { cpuInfo, cpuAdmission } = await import(${JSON.stringify(path.join(packageRoot, 'dist/src/backends/cpu.js'))});
      console.log(JSON.stringify({ isas: cpuInfo().isas, features: cpuInfo().features, rows: cpuAdmission() }));`;
    const run = (disable: string) => {
      const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
        encoding: 'utf8',
        env: { ...process.env, MAXSIM_CPU_DISABLE: disable },
      });
      assert.equal(r.status, 0, r.stderr);
      return JSON.parse(r.stdout) as {
        isas: string[];
        features: string;
        rows: { set: string; family: string; admitted: boolean }[];
      };
    };
    const skylake = run('avx512bf16,amx-tile,amx-bf16,amx-int8,avxvnni');
    assert.ok(skylake.isas.includes('avx512'), JSON.stringify(skylake.isas));
    assert.ok(
      !skylake.isas.includes('avx512bf16') && !skylake.isas.includes('amx'),
      JSON.stringify(skylake.isas),
    );
    assert.ok(!skylake.features.split(' ').includes('avx512bf16'));
    // No AVX-512 state saved by the OS: nothing 512-bit, AVX2 first.
    const noZmm = run('avx512f');
    assert.equal(noZmm.isas[0], 'avx2', JSON.stringify(noZmm.isas));
    assert.ok(!noZmm.rows.some((r) => r.admitted && /avx512|amx/.test(r.set)), JSON.stringify(noZmm.rows));
    // FMA missing: AVX2 float kernels need it, the int8 AVX2 set does not.
    const noFma = run('fma,avx512f');
    assert.deepEqual(noFma.isas, ['portable']);
    assert.ok(noFma.rows.some((r) => r.family === 'int8' && r.set === 'avx2' && r.admitted));
  });
});
