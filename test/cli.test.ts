// End-to-end tests of the `maxsim` command line: spawn the compiled CLI and check exit codes and output.
import assert from 'node:assert/strict';
import { type SpawnSyncReturns, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { referenceMaxsim } from '../src/backends/reference.js';
import { cudaUnavailableReason } from '../src/backends/select.js';
import { describeCuda } from '../src/cli/info.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { encodeFloats } from '../src/floats.js';
import type { NpyArray } from '../src/io/array.js';
import { arrayToDocs, arrayToQueries, loadArray } from '../src/io/load.js';
import { encodeNpy, readNpy, writeNpy } from '../src/io/npy.js';
import { writeSafetensors } from '../src/io/safetensors.js';
import { cpuMaxsimInt8Sync, quantize } from '../src/ops/quantize.js';
import { denseBatch, matrixAsBatch, raggedBatch, tokenMatrix } from '../src/tensor.js';

// dist/test/cli.test.js -> dist/src/cli/main.js
const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-cli-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

function maxsimCli(...args: string[]): SpawnSyncReturns<string> {
  return spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 120_000 });
}

function describeRun(r: SpawnSyncReturns<string>): string {
  return `status ${r.status}, signal ${r.signal}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`;
}

function expectSuccess(r: SpawnSyncReturns<string>): void {
  assert.equal(r.signal, null, describeRun(r));
  assert.equal(r.status, 0, describeRun(r));
}

/** Exit code `code`, exactly one stderr line starting with 'maxsim:', no stack trace, never a signal. */
function expectCleanError(r: SpawnSyncReturns<string>, code: number): string {
  assert.equal(r.signal, null, describeRun(r));
  assert.equal(r.status, code, describeRun(r));
  const lines = r.stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, describeRun(r));
  assert.match(lines[0], /^maxsim: \S/, describeRun(r));
  assert.doesNotMatch(r.stderr, /^\s+at /m, describeRun(r));
  return lines[0];
}

function file(name: string): string {
  return path.join(tmp, name);
}

function float32(shape: number[], data: Float32Array): NpyArray {
  return { dtype: 'float32', shape, data };
}

// ---- fixtures: 3 queries [3, 5, 16]; 6 documents packed [T, 16] (document 2 empty) and dense [6, 9, 16] ----
const D = 16;
const rng = new Rng(7);
const queryValues = randomUnitTokens(rng, 3 * 5, D);
const docLengths = [4, 9, 0, 1, 7, 3];
const docOffsets = [0, 4, 13, 13, 14, 21, 24]; // running sum of docLengths
const packedValues = randomUnitTokens(rng, docOffsets[docOffsets.length - 1], D);
const denseValues = randomUnitTokens(rng, 6 * 9, D);

writeNpy(file('q.npy'), float32([3, 5, D], queryValues));
writeNpy(file('q1.npy'), float32([5, D], queryValues.slice(0, 5 * D)));
writeSafetensors(file('docs.safetensors'), {
  embeddings: float32([packedValues.length / D, D], packedValues),
  offsets: { dtype: 'int64', shape: [docOffsets.length], data: BigInt64Array.from(docOffsets.map(BigInt)) },
  lengths: { dtype: 'int32', shape: [docLengths.length], data: Int32Array.from(docLengths) },
});
writeSafetensors(file('docs-f16.safetensors'), {
  embeddings: {
    dtype: 'float16',
    shape: [packedValues.length / D, D],
    data: encodeFloats(packedValues, 'float16'),
  },
  offsets: { dtype: 'int64', shape: [docOffsets.length], data: BigInt64Array.from(docOffsets.map(BigInt)) },
});
writeNpy(file('dense.npy'), float32([6, 9, D], denseValues));
writeNpy(file('dense-lengths.npy'), {
  dtype: 'int64',
  shape: [6],
  data: BigInt64Array.from([9n, 0n, 3n, 9n, 1n, 5n]),
});

const queries = denseBatch(queryValues, { count: 3, length: 5, dim: D });
const packedDocs = raggedBatch(packedValues, docOffsets, { dim: D });
const packedRef = referenceMaxsim(queries, packedDocs);

function assertScoresMatch(
  got: readonly (number | null)[],
  ref: Float64Array | readonly number[],
  what: string,
): void {
  assert.equal(got.length, ref.length, what);
  for (let i = 0; i < ref.length; i++) {
    const r = ref[i];
    const g = got[i];
    if (r === Number.NEGATIVE_INFINITY) {
      assert.equal(g, null, `${what}[${i}]: an empty document scores null in JSON`);
      continue;
    }
    assert.ok(
      typeof g === 'number' && Math.abs(g - r) <= 1e-5 * Math.max(1, Math.abs(r)),
      `${what}[${i}]: ${g} vs ${r}`,
    );
  }
}

describe('maxsim info', () => {
  test('--json parses and names the backends', () => {
    const r = maxsimCli('info', '--json');
    expectSuccess(r);
    const report = JSON.parse(r.stdout);
    assert.equal(typeof report.version, 'string');
    assert.equal(typeof report.backends.cpu, 'boolean');
    assert.equal(typeof report.backends.cuda, 'boolean');
    if (!report.backends.cuda) assert.equal(typeof report.cudaUnavailable, 'string');
    // info().cuda is the CUDA status (cudaStatus folded in): always there, available or with the reason
    assert.equal(typeof report.cuda.available, 'boolean');
    if (!report.cuda.available) assert.equal(typeof report.cuda.reason, 'string');
    assert.equal(report.cuda.available, report.backends.cuda);
    if (report.backends.cpu) assert.ok(report.cpu.isas.includes(report.cpu.isa));
  });

  test('the CUDA lines name the driver, whether it encodes TMA tensor maps, the devices and kernels', () => {
    const status = {
      available: true,
      driverVersion: 13000,
      tensorMaps: true,
      devices: [
        {
          index: 0,
          name: 'NVIDIA H200',
          computeCapability: [9, 0] as [number, number],
          sms: 132,
          totalMemory: 150 * 2 ** 30,
          l2Bytes: 60 << 20,
          smemOptin: 232_448,
        },
      ],
      kernelDir: '/k',
      kernelFiles: ['maxsim_wgmma.fatbin'],
    };
    assert.deepEqual(describeCuda(status), [
      'driver CUDA 13.0, TMA tensor maps: yes',
      'device 0: NVIDIA H200, sm_90, 132 SMs, 150.0 GiB',
      'kernels /k: maxsim_wgmma.fatbin',
    ]);
    assert.equal(describeCuda({ ...status, tensorMaps: false })[0], 'driver CUDA 13.0, TMA tensor maps: no');
    assert.deepEqual(describeCuda({ available: false, reason: 'no driver' }), []);
  });

  test('prints text, and --version / --help exit 0', () => {
    const r = maxsimCli('info');
    expectSuccess(r);
    assert.match(r.stdout, /^maxsim \d+\.\d+\.\d+/);
    assert.match(r.stdout, /cuda/);
    const v = maxsimCli('--version');
    expectSuccess(v);
    assert.match(v.stdout.trim(), /^\d+\.\d+\.\d+/);
    for (const command of ['info', 'demo', 'score', 'search', 'bench', 'verify']) {
      const h = maxsimCli(command, '--help');
      expectSuccess(h);
      assert.match(h.stdout, new RegExp(`Usage: maxsim ${command}`));
    }
  });
});

describe('maxsim demo', () => {
  test('searches a small corpus and finds the planted documents', () => {
    const r = maxsimCli('demo', '--docs', '400', '--queries', '3');
    expectSuccess(r);
    assert.match(r.stdout, /generated in/);
    assert.match(r.stdout, /GFLOP\/s/);
    const recall = Number(/recall@10: ([\d.]+)/.exec(r.stdout)?.[1]);
    assert.ok(recall >= 0.9, r.stdout);
  });

  test('--json reports hits, recall and throughput', () => {
    const r = maxsimCli('demo', '--docs', '300', '--queries', '2', '--dtype', 'bf16', '--json');
    expectSuccess(r);
    const report = JSON.parse(r.stdout);
    assert.equal(report.corpus.docs, 300);
    assert.equal(report.corpus.dtype, 'bfloat16');
    assert.equal(report.queries.length, 2);
    assert.equal(report.queries[0].hits.length, 10);
    assert.ok(report.recallAt10 >= 0.9);
    assert.ok(report.gflops > 0 && report.docsPerSecond > 0 && report.generationSeconds >= 0);
  });
});

describe('maxsim score', () => {
  test('packed .safetensors documents with offsets match the reference', () => {
    const r = maxsimCli(
      'score',
      '--queries',
      file('q.npy'),
      '--docs',
      `${file('docs.safetensors')}:embeddings`,
      '--doc-offsets',
      `${file('docs.safetensors')}:offsets`,
      '--json',
    );
    expectSuccess(r);
    const { scores } = JSON.parse(r.stdout) as { scores: (number | null)[][] };
    assert.equal(scores.length, 3);
    assertScoresMatch(scores.flat(), packedRef, 'scores');
  });

  test('--doc-offsets that break the offsets contract exit 1 naming the rule (issue 20)', () => {
    const cases: [string, number[], RegExp][] = [
      ['no-zero', docOffsets.slice(1), /--docs offsets\[0\] but received 4/], // no leading 0: shifted indices
      ['short', docOffsets.slice(0, -1), /token count 24 .*--docs offsets\[5\] but received 21/],
      ['long', [...docOffsets, 30], /<= 24 .*--docs offsets\[7\] but received 30/],
    ];
    for (const [name, offsets, message] of cases) {
      const spec = file(`offsets-${name}.npy`);
      writeNpy(spec, {
        dtype: 'int64',
        shape: [offsets.length],
        data: BigInt64Array.from(offsets.map(BigInt)),
      });
      for (const command of ['score', 'search']) {
        const r = maxsimCli(
          command,
          '--queries',
          file('q.npy'),
          '--docs',
          `${file('docs.safetensors')}:embeddings`,
          '--doc-offsets',
          spec,
          '--backend',
          'cpu',
        );
        assert.match(expectCleanError(r, 1), message, `${command} ${name}`);
      }
      // the other entry points that take --doc-offsets: quantize (the same loader) and corpus build
      const docsSpec = `${file('docs.safetensors')}:embeddings`;
      const q = maxsimCli(
        'quantize',
        '--docs',
        docsSpec,
        '--doc-offsets',
        spec,
        '--out',
        file(`q8-${name}.safetensors`),
      );
      assert.match(expectCleanError(q, 1), message, `quantize ${name}`);
      assert.ok(!fs.existsSync(file(`q8-${name}.safetensors`)));
      const c = maxsimCli(
        'corpus',
        'build',
        '--docs',
        docsSpec,
        '--doc-offsets',
        spec,
        '--out',
        file(`c-${name}.msx`),
      );
      assert.match(expectCleanError(c, 1), /--doc-offsets/, `corpus build ${name}`);
    }
  });

  test('lengths instead of offsets, a single [L, d] query, --backend cpu', () => {
    const r = maxsimCli(
      'score',
      '--queries',
      file('q1.npy'),
      '--docs',
      `${file('docs.safetensors')}:embeddings`,
      '--doc-lengths',
      `${file('docs.safetensors')}:lengths`,
      '--backend',
      'cpu',
      '--json',
    );
    expectSuccess(r);
    const { scores } = JSON.parse(r.stdout) as { scores: (number | null)[] };
    assertScoresMatch(scores, packedRef.slice(0, 6), 'scores');
  });

  test('float16 documents are scored on the values they hold', () => {
    // on the CPU, where float32 queries stay float32 (CUDA meets a float16 corpus with float16 queries,
    // which the GPU suites check)
    const r = maxsimCli(
      'score',
      '--queries',
      file('q.npy'),
      '--docs',
      `${file('docs-f16.safetensors')}:embeddings`,
      '--doc-offsets',
      `${file('docs-f16.safetensors')}:offsets`,
      '--backend',
      'cpu',
      '--json',
    );
    expectSuccess(r);
    const docs = raggedBatch(encodeFloats(packedValues, 'float16'), docOffsets, { dim: D, dtype: 'float16' });
    assertScoresMatch(JSON.parse(r.stdout).scores.flat(), referenceMaxsim(queries, docs), 'scores');
  });

  test('dense .npy documents with lengths, written to --out', () => {
    const out = file('scores.npy');
    const r = maxsimCli(
      'score',
      '--queries',
      file('q.npy'),
      '--docs',
      file('dense.npy'),
      '--doc-lengths',
      file('dense-lengths.npy'),
      '--out',
      out,
    );
    expectSuccess(r);
    const written = readNpy(out);
    assert.equal(written.dtype, 'float32');
    assert.deepEqual(written.shape, [3, 6]);
    const docs = denseBatch(denseValues, { count: 6, length: 9, dim: D, lengths: [9, 0, 3, 9, 1, 5] });
    const ref = referenceMaxsim(queries, docs);
    const got = Array.from(written.data as Float32Array, (s) => (Number.isFinite(s) ? s : null));
    assertScoresMatch(got, ref, 'written scores');
  });

  test('prints a table by default', () => {
    const r = maxsimCli('score', '--queries', file('q1.npy'), '--docs', file('dense.npy'));
    expectSuccess(r);
    const lines = r.stdout.trimEnd().split('\n');
    assert.equal(lines.length, 7);
    assert.match(lines[0], /doc\s+score/);
    const ref = referenceMaxsim(
      tokenMatrix(queryValues.slice(0, 5 * D), 5, D),
      denseBatch(denseValues, { count: 6, length: 9, dim: D }),
    );
    lines.slice(1).forEach((line, b) => {
      const [doc, score] = line.trim().split(/\s+/).map(Number);
      assert.equal(doc, b);
      assert.ok(Math.abs(score - ref[b]) <= 1e-5 * Math.max(1, Math.abs(ref[b])), line);
    });
  });
});

describe('maxsim search', () => {
  test('prints one sorted JSON line per query, agreeing with the reference', () => {
    const r = maxsimCli(
      'search',
      '--queries',
      file('q.npy'),
      '--docs',
      `${file('docs.safetensors')}:embeddings`,
      '--doc-offsets',
      `${file('docs.safetensors')}:offsets`,
      '--top-k',
      '4',
    );
    expectSuccess(r);
    const lines = r.stdout.trimEnd().split('\n');
    assert.equal(lines.length, 3);
    lines.forEach((line, q) => {
      const parsed = JSON.parse(line) as {
        query: number;
        results: { index: number; score: number | null }[];
      };
      assert.equal(parsed.query, q);
      assert.equal(parsed.results.length, 4);
      const row = packedRef.slice(q * 6, (q + 1) * 6);
      const expected = Array.from(row.keys()).sort((a, b) => row[b] - row[a] || a - b);
      for (let i = 0; i < 4; i++) {
        const hit = parsed.results[i];
        if (i > 0) assert.ok((parsed.results[i - 1].score ?? -Infinity) >= (hit.score ?? -Infinity), line);
        assert.equal(hit.index, expected[i], line);
        assert.ok(
          hit.score !== null &&
            Math.abs(hit.score - row[hit.index]) <= 1e-5 * Math.max(1, Math.abs(row[hit.index])),
        );
      }
    });
  });

  test('--prefilter int8 (two-stage) prints the same results as the exact search', () => {
    const args = [
      'search',
      '--queries',
      file('q.npy'),
      '--docs',
      `${file('docs.safetensors')}:embeddings`,
      '--doc-offsets',
      `${file('docs.safetensors')}:offsets`,
      '--top-k',
      '3',
    ];
    const exact = maxsimCli(...args);
    const two = maxsimCli(...args, '--prefilter', 'int8');
    expectSuccess(exact);
    expectSuccess(two);
    assert.equal(two.stdout, exact.stdout);
  });

  test('--dtype int8 ranks by int8 scores; --dtype fp8 needs a GPU', () => {
    const args = [
      'search',
      '--queries',
      file('q.npy'),
      '--docs',
      `${file('docs.safetensors')}:embeddings`,
      '--doc-offsets',
      `${file('docs.safetensors')}:offsets`,
      '--top-k',
      '3',
      '--backend',
      'cpu',
    ];
    const int8 = maxsimCli(...args, '--dtype', 'int8');
    expectSuccess(int8);
    const scores = maxsimCli(
      'score',
      '--queries',
      file('q.npy'),
      '--docs',
      `${file('docs.safetensors')}:embeddings`,
      '--doc-offsets',
      `${file('docs.safetensors')}:offsets`,
      '--backend',
      'cpu',
      '--dtype',
      'int8',
      '--json',
    );
    expectSuccess(scores);
    // the search's scores are the score command's int8 scores
    const rows: (number | null)[][] = JSON.parse(scores.stdout).scores;
    const lines = int8.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    for (const line of lines) {
      for (const hit of line.results) assert.equal(hit.score, rows[line.query][hit.index]);
    }
    assert.match(expectCleanError(maxsimCli(...args, '--dtype', 'fp8'), 1), /fp8 is a GPU format/);
    // int8 files with their scales (--doc-scales / --query-scales) rank exactly like --dtype int8
    const docs = arrayToDocs(loadArray(`${file('docs.safetensors')}:embeddings`), {
      offsets: loadArray(`${file('docs.safetensors')}:offsets`),
    });
    const q = arrayToQueries(loadArray(file('q.npy')), 'q');
    const d8 = quantize(docs, 'int8');
    const q8 = quantize(q, 'int8');
    const dim = docs.dim;
    writeNpy(file('d8.npy'), {
      dtype: 'int8',
      shape: [d8.data.length / dim, dim],
      data: d8.data as Int8Array,
    });
    writeNpy(file('d8s.npy'), { dtype: 'float32', shape: [d8.scales!.length], data: d8.scales! });
    const qShape = q.kind === 'matrix' ? [q.length, dim] : [q.count, q.maxLength, dim];
    writeNpy(file('q8.npy'), { dtype: 'int8', shape: qShape, data: q8.data as Int8Array });
    writeNpy(file('q8s.npy'), { dtype: 'float32', shape: [q8.scales!.length], data: q8.scales! });
    const files8 = maxsimCli(
      'search',
      '--queries',
      file('q8.npy'),
      '--query-scales',
      file('q8s.npy'),
      '--docs',
      file('d8.npy'),
      '--doc-scales',
      file('d8s.npy'),
      '--doc-offsets',
      `${file('docs.safetensors')}:offsets`,
      '--top-k',
      '3',
      '--backend',
      'cpu',
    );
    expectSuccess(files8);
    assert.equal(files8.stdout, int8.stdout);
    // maxsim quantize writes the same int8 documents (with scales and offsets) in one file
    const q8file = file('docs8.safetensors');
    const wrote = maxsimCli(
      'quantize',
      '--docs',
      `${file('docs.safetensors')}:embeddings`,
      '--doc-offsets',
      `${file('docs.safetensors')}:offsets`,
      '--out',
      q8file,
      '--json',
    );
    expectSuccess(wrote);
    const summary = JSON.parse(wrote.stdout);
    assert.equal(summary.documents, docs.count);
    assert.ok(summary.maxRel > 0 && summary.maxRel <= 1 / 254 + 1e-9, `maxRel ${summary.maxRel}`);
    const fromFile = maxsimCli(
      'search',
      '--queries',
      file('q.npy'),
      '--docs',
      `${q8file}:embeddings`,
      '--doc-scales',
      `${q8file}:scales`,
      '--doc-offsets',
      `${q8file}:offsets`,
      '--top-k',
      '3',
      '--backend',
      'cpu',
      '--dtype',
      'int8',
    );
    expectSuccess(fromFile);
    assert.equal(fromFile.stdout, int8.stdout);
  });

  test('--scales document: score, search and quantize agree; refused where nothing is quantized', () => {
    const docArgs = [
      '--docs',
      `${file('docs.safetensors')}:embeddings`,
      '--doc-offsets',
      `${file('docs.safetensors')}:offsets`,
    ];
    const common = ['--queries', file('q.npy'), ...docArgs, '--backend', 'cpu'];
    const scored = maxsimCli('score', ...common, '--dtype', 'int8', '--scales', 'document', '--json');
    expectSuccess(scored);
    // the scores of the documents quantized with one scale each, queries per token
    const docs = arrayToDocs(loadArray(`${file('docs.safetensors')}:embeddings`), {
      offsets: loadArray(`${file('docs.safetensors')}:offsets`),
    });
    const q = arrayToQueries(loadArray(file('q.npy')), 'q');
    const qb = q.kind === 'matrix' ? matrixAsBatch(q) : q;
    const d8 = quantize(docs, 'int8', { scales: 'document' });
    const want = cpuMaxsimInt8Sync(quantize(qb, 'int8'), d8);
    const rows: (number | null)[][] = JSON.parse(scored.stdout).scores;
    for (const [i, r] of rows.entries())
      for (const [b, v] of r.entries()) {
        const w = want[i * docs.count + b];
        assert.equal(v, Number.isFinite(w) ? w : null, `query ${i} document ${b}`);
      }
    // maxsim quantize --scales document writes those documents; searching the file ranks the same
    const out = file('docs8-doc.safetensors');
    const wrote = maxsimCli('quantize', ...docArgs, '--out', out, '--scales', 'document', '--json');
    expectSuccess(wrote);
    assert.equal(JSON.parse(wrote.stdout).scales, 'document');
    const search = [
      'search',
      '--queries',
      file('q.npy'),
      '--top-k',
      '3',
      '--backend',
      'cpu',
      '--dtype',
      'int8',
    ];
    const fromFlag = maxsimCli(...search, ...docArgs, '--scales', 'document');
    const fromFile = maxsimCli(
      ...search,
      '--docs',
      `${out}:embeddings`,
      '--doc-scales',
      `${out}:scales`,
      '--doc-offsets',
      `${out}:offsets`,
    );
    expectSuccess(fromFlag);
    expectSuccess(fromFile);
    assert.equal(fromFile.stdout, fromFlag.stdout);
    // two-stage with a document-scaled scan is still exact
    const exact = maxsimCli('search', ...common, '--top-k', '3');
    const two = maxsimCli('search', ...common, '--top-k', '3', '--prefilter', 'int8', '--scales', 'document');
    expectSuccess(two);
    assert.equal(two.stdout, exact.stdout);
    assert.match(expectCleanError(maxsimCli('score', ...common, '--scales', 'document'), 1), /--scales/);
    const withCorpus = [
      'search',
      '--queries',
      file('q.npy'),
      '--corpus',
      file('none.msx'),
      '--dtype',
      'int8',
    ];
    assert.match(expectCleanError(maxsimCli(...withCorpus, '--scales', 'document'), 1), /--scales.*--corpus/);
  });

  test('defaults to 10 results (capped at B), an empty document last with a null score', () => {
    const r = maxsimCli(
      'search',
      '--queries',
      file('q1.npy'),
      '--docs',
      `${file('docs.safetensors')}:embeddings`,
      '--doc-offsets',
      `${file('docs.safetensors')}:offsets`,
    );
    expectSuccess(r);
    const parsed = JSON.parse(r.stdout);
    assert.equal(parsed.results.length, 6);
    assert.deepEqual(parsed.results[5], { index: 2, score: null });
  });
});

describe('malformed input: one clean line on stderr', () => {
  const bad = (name: string, bytes: string | Uint8Array) => {
    fs.writeFileSync(file(name), bytes);
    return file(name);
  };
  const docsArgs = [
    '--docs',
    `${file('docs.safetensors')}:embeddings`,
    '--doc-offsets',
    `${file('docs.safetensors')}:offsets`,
  ];

  test('missing file', () => {
    const line = expectCleanError(maxsimCli('score', '--queries', file('nope.npy'), ...docsArgs), 1);
    assert.match(line, /--queries/);
  });

  test('bad .npy bytes', () => {
    const path = bad('garbage.npy', '\x93NUMPY\x01\x00garbage');
    expectCleanError(maxsimCli('score', '--queries', path, ...docsArgs), 1);
  });

  test('not a .npy or .safetensors file', () => {
    expectCleanError(maxsimCli('score', '--queries', bad('text.bin', 'hello world'), ...docsArgs), 1);
  });

  test('unknown safetensors tensor name', () => {
    const r = maxsimCli('score', '--queries', file('q.npy'), '--docs', `${file('docs.safetensors')}:nope`);
    assert.match(expectCleanError(r, 1), /nope/);
  });

  test('dimension mismatch between queries and documents', () => {
    writeNpy(file('q8.npy'), float32([2, 8], randomUnitTokens(rng, 2, 8)));
    expectCleanError(maxsimCli('score', '--queries', file('q8.npy'), ...docsArgs), 1);
  });

  test('offsets not monotonic', () => {
    writeNpy(file('bad-offsets.npy'), {
      dtype: 'int64',
      shape: [4],
      data: BigInt64Array.from([0n, 5n, 3n, 24n]),
    });
    const r = maxsimCli(
      'score',
      '--queries',
      file('q.npy'),
      '--docs',
      `${file('docs.safetensors')}:embeddings`,
      '--doc-offsets',
      file('bad-offsets.npy'),
    );
    assert.match(expectCleanError(r, 1), /offsets/);
  });

  test('packed documents without offsets', () => {
    expectCleanError(
      maxsimCli('score', '--queries', file('q.npy'), '--docs', `${file('docs.safetensors')}:embeddings`),
      1,
    );
  });

  test('a 4-D array', () => {
    writeNpy(file('4d.npy'), float32([1, 2, 3, D], new Float32Array(6 * D)));
    expectCleanError(maxsimCli('score', '--queries', file('q.npy'), '--docs', file('4d.npy')), 1);
  });

  test('NaN in the input (and --no-check-finite skips the scan)', () => {
    const values = new Float32Array(2 * D).fill(0.25);
    values[3] = Number.NaN;
    writeNpy(file('nan.npy'), float32([2, D], values));
    const line = expectCleanError(
      maxsimCli('score', '--queries', file('nan.npy'), '--docs', file('dense.npy')),
      1,
    );
    assert.match(line, /finite/);
    expectSuccess(
      maxsimCli('score', '--queries', file('nan.npy'), '--docs', file('dense.npy'), '--no-check-finite'),
    );
  });

  test('an unwritable --out path', () => {
    const r = maxsimCli(
      'score',
      '--queries',
      file('q1.npy'),
      '--docs',
      file('dense.npy'),
      '--out',
      file('no/such/dir.npy'),
    );
    expectCleanError(r, 1);
  });

  test('usage errors exit 2: unknown backend, k = -1, missing option, unknown command or option, bad shape', () => {
    expectCleanError(maxsimCli('score', '--queries', file('q.npy'), ...docsArgs, '--backend', 'tpu'), 2);
    expectCleanError(maxsimCli('search', '--queries', file('q.npy'), ...docsArgs, '--top-k', '-1'), 2);
    expectCleanError(maxsimCli('search', '--queries', file('q.npy'), ...docsArgs, '--top-k', 'ten'), 2);
    expectCleanError(maxsimCli('score', '--queries', file('q.npy')), 2);
    expectCleanError(maxsimCli('scroe'), 2);
    expectCleanError(maxsimCli('info', '--jsn'), 2);
    expectCleanError(maxsimCli('bench', '--shape', '1,2,3'), 2);
    expectCleanError(maxsimCli('demo', '--dtype', 'f64'), 2);
    expectCleanError(maxsimCli('demo', '--docs', '0'), 2);
  });

  test('values commander accepts but the command cannot use exit 1', () => {
    assert.match(expectCleanError(maxsimCli('demo', '--docs', '5', '--queries', '4'), 1), /--docs/);
    assert.match(expectCleanError(maxsimCli('bench', '--isa', 'z80', '--shape', '1,4,8,16,10'), 1), /--isa/);
  });

  test('--debug adds the stack trace', () => {
    const r = maxsimCli('--debug', 'score', '--queries', file('nope.npy'), ...docsArgs);
    assert.equal(r.signal, null);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /^maxsim: /);
    assert.match(r.stderr, /^\s+at /m);
  });
});

describe('maxsim bench', () => {
  test('--json prints one object per shape with the required keys', () => {
    const r = maxsimCli(
      'bench',
      '--shape',
      '1,4,8,16,10',
      '--shape',
      '3,5,7,33,12',
      '--repeats',
      '2',
      '--warmup',
      '1',
      '--json',
    );
    expectSuccess(r);
    const rows = r.stdout
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line));
    assert.deepEqual(
      rows.map((row) => row.shape),
      ['1,4,8,16,10', '3,5,7,33,12'],
    );
    for (const row of rows) {
      for (const key of ['shape', 'dtype', 'backend', 'isa', 'threads', 'ms', 'gflops', 'gbps'])
        assert.ok(key in row, key);
      assert.equal(row.backend, 'cpu');
      assert.ok(row.ms > 0 && row.gflops > 0 && row.gbps > 0);
    }
  });

  test('ragged bf16 prints a table', () => {
    const r = maxsimCli(
      'bench',
      '--shape',
      '2,4,8,16,10',
      '--ragged',
      '--dtype',
      'bf16',
      '--repeats',
      '1',
      '--threads',
      '1',
    );
    expectSuccess(r);
    const lines = r.stdout.trimEnd().split('\n');
    assert.equal(lines.length, 2);
    assert.match(lines[1], /^2,4,8,16,10\s+bfloat16\s+ragged\s+cpu/);
  });

  test('--dtype int8 times the quantized inputs', () => {
    const r = maxsimCli('bench', '--shape', '2,5,9,64,10', '--dtype', 'int8', '--repeats', '1', '--json');
    expectSuccess(r);
    const row = JSON.parse(r.stdout.trim());
    assert.equal(row.dtype, 'int8');
    assert.ok(row.ms > 0 && row.gbps > 0);
  });

  test('--train times forward, backward and a contrastive step per shape, each in its own process', () => {
    const r = maxsimCli(
      'bench',
      '--train',
      '--shape',
      '3,6,9,16,3',
      '--shape',
      '2,4,5,8,2',
      '--repeats',
      '2',
      '--json',
    );
    expectSuccess(r);
    const rows = r.stdout
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line));
    assert.deepEqual(
      rows.map((row) => [row.kind, row.shape, row.inputs, row.backend]),
      [
        ['trainStep', '3,6,9,16,3', 'host', 'cpu'],
        ['trainStep', '2,4,5,8,2', 'host', 'cpu'],
      ],
    );
    for (const row of rows) {
      assert.ok(row.forwardMs > 0 && row.backwardMs > 0 && row.stepMs > 0);
      assert.ok(Number.isFinite(row.loss) && row.loss > 0);
      assert.equal(row.stepOverForward, row.stepMs / row.forwardMs);
    }
    assert.match(expectCleanError(maxsimCli('bench', '--train', '--shape', '3,6,9,16,4'), 1), /all pairs/);
    assert.match(expectCleanError(maxsimCli('bench', '--train', '--contention', '4:2'), 1), /--contention/);
    assert.match(expectCleanError(maxsimCli('bench', '--train', '--inputs', 'device'), 1), /--inputs/);
    assert.match(expectCleanError(maxsimCli('bench', '--train', '--dtype', 'int8'), 1), /--dtype/);
  });

  test('--backend cuda without CUDA exits 1 with the reason', {
    skip: cudaUnavailableReason() === undefined,
  }, () => {
    const line = expectCleanError(maxsimCli('bench', '--backend', 'cuda', '--shape', '1,4,8,16,10'), 1);
    assert.match(line, /CUDA/);
  });
});

describe('maxsim verify', () => {
  test('--backend cuda without CUDA exits 1 with the reason', {
    skip: cudaUnavailableReason() === undefined,
  }, () => {
    assert.match(expectCleanError(maxsimCli('verify', '--backend', 'cuda'), 1), /CUDA/);
  });

  test('every backend and kernel set passes', () => {
    const r = maxsimCli('verify', '--json');
    expectSuccess(r);
    const report = JSON.parse(r.stdout);
    assert.equal(report.ok, true, `seed ${report.seed}`);
    assert.ok(report.checks.length > 0);
    assert.ok(report.checks.every((check: { pass: boolean }) => check.pass));
  });
});

// ---- input options of score / search: --bf16, '-' for stdin, --query-lengths, progress ----

function maxsimCliWith(
  options: { input?: Uint8Array; env?: Record<string, string> },
  ...args: string[]
): SpawnSyncReturns<string> {
  return spawnSync(process.execPath, [CLI, ...args], {
    encoding: 'utf8',
    timeout: 120_000,
    input: options.input,
    env: { ...process.env, ...options.env },
  });
}

describe('CLI inputs: --bf16, stdin, --query-lengths, progress (issue 20)', () => {
  const offsetsNpy = file('in-offsets.npy');
  writeNpy(offsetsNpy, {
    dtype: 'int64',
    shape: [docOffsets.length],
    data: BigInt64Array.from(docOffsets.map(BigInt)),
  });

  test('--bf16 reads .npy uint16 bits as bfloat16; without it the error names --bf16', () => {
    const bits = encodeFloats(packedValues, 'bfloat16') as Uint16Array;
    const spec = file('docs-bf16.npy');
    writeNpy(spec, { dtype: 'bfloat16', shape: [bits.length / D, D], data: bits }); // written as '<u2'
    const args = [
      'score',
      '--queries',
      file('q.npy'),
      '--docs',
      spec,
      '--doc-offsets',
      offsetsNpy,
      '--backend',
      'cpu',
      '--json',
    ];
    assert.match(expectCleanError(maxsimCli(...args), 1), /pass --bf16/);
    const r = maxsimCli(...args, '--bf16');
    expectSuccess(r);
    const docs = raggedBatch(bits, docOffsets, { dim: D, dtype: 'bfloat16' });
    assertScoresMatch(JSON.parse(r.stdout).scores.flat(), referenceMaxsim(queries, docs), 'scores');
  });

  test("'-' reads standard input: a .npy, or tensors of one safetensors stream", () => {
    const q = maxsimCliWith(
      { input: fs.readFileSync(file('q.npy')) },
      'score',
      '--queries',
      '-',
      '--docs',
      `${file('docs.safetensors')}:embeddings`,
      '--doc-offsets',
      `${file('docs.safetensors')}:offsets`,
      '--backend',
      'cpu',
      '--json',
    );
    expectSuccess(q);
    assertScoresMatch(JSON.parse(q.stdout).scores.flat(), packedRef, 'scores (queries from stdin)');
    const d = maxsimCliWith(
      { input: fs.readFileSync(file('docs.safetensors')) },
      'search',
      '--queries',
      file('q.npy'),
      '--docs',
      '-:embeddings',
      '--doc-offsets',
      '-:offsets',
      '--backend',
      'cpu',
      '--top-k',
      '6',
    );
    expectSuccess(d);
    const lines = d.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    assert.equal(lines.length, 3);
    const hits = lines[0].results as { index: number; score: number | null }[];
    for (const h of hits) if (h.score !== null) assert.ok(Math.abs(h.score - packedRef[h.index]) <= 1e-5);
    const none = maxsimCliWith(
      { input: new Uint8Array(0) },
      'score',
      '--queries',
      '-',
      '--docs',
      file('dense.npy'),
    );
    assert.match(expectCleanError(none, 1), /standard input/);
  });

  test('--query-lengths masks the padding of [Nq, L, d] queries', () => {
    const lengths = [5, 2, 0];
    const spec = file('q-lengths.npy');
    writeNpy(spec, { dtype: 'int32', shape: [3], data: Int32Array.from(lengths) });
    const r = maxsimCli(
      'score',
      '--queries',
      file('q.npy'),
      '--query-lengths',
      spec,
      '--docs',
      `${file('docs.safetensors')}:embeddings`,
      '--doc-offsets',
      `${file('docs.safetensors')}:offsets`,
      '--backend',
      'cpu',
      '--json',
    );
    expectSuccess(r);
    const padded = denseBatch(queryValues, { count: 3, length: 5, dim: D, lengths });
    assertScoresMatch(JSON.parse(r.stdout).scores.flat(), referenceMaxsim(padded, packedDocs), 'scores');
    const bad = file('q-lengths-bad.npy');
    writeNpy(bad, { dtype: 'int32', shape: [3], data: Int32Array.from([5, 6, 0]) });
    const e = maxsimCli(
      'score',
      '--queries',
      file('q.npy'),
      '--query-lengths',
      bad,
      '--docs',
      file('dense.npy'),
    );
    assert.match(expectCleanError(e, 1), /--queries lengths\[1\]/);
  });

  test('off a terminal, progress is plain lines with rate and ETA; --quiet silences it', () => {
    const env = { MAXSIM_PROGRESS_SECONDS: '0', MAXSIM_SCORE_BLOCK_TOKENS: '5' };
    const args = [
      'score',
      '--queries',
      file('q.npy'),
      '--docs',
      `${file('docs.safetensors')}:embeddings`,
      '--doc-offsets',
      `${file('docs.safetensors')}:offsets`,
      '--backend',
      'cpu',
      '--json',
    ];
    const r = maxsimCliWith({ env }, ...args);
    expectSuccess(r);
    assertScoresMatch(JSON.parse(r.stdout).scores.flat(), packedRef, 'blocked scores');
    const lines = r.stderr.trim().split('\n');
    assert.ok(lines.length >= 2, r.stderr);
    for (const line of lines)
      assert.match(line, /^score: \d+\/6 \(\d+%\), (\d+\/s, )?(ETA \S+|done in \S+)$/);
    assert.ok(!r.stderr.includes('\u001b') && !r.stderr.includes('\r'), 'no terminal control codes');
    assert.match(lines[lines.length - 1], /^score: 6\/6 \(100%\)/);
    // search over --docs: the same blocks, the same ranking as unblocked
    const searchArgs = [
      'search',
      '--queries',
      file('q.npy'),
      '--docs',
      `${file('docs.safetensors')}:embeddings`,
      '--doc-offsets',
      `${file('docs.safetensors')}:offsets`,
      '--backend',
      'cpu',
      '--top-k',
      '4',
    ];
    const blocked = maxsimCliWith({ env }, ...searchArgs);
    expectSuccess(blocked);
    assert.match(blocked.stderr, /^search: \d+\/6 /m);
    const whole = maxsimCli(...searchArgs);
    expectSuccess(whole);
    assert.equal(blocked.stdout, whole.stdout);
    assert.equal(whole.stderr, '');
    const quiet = maxsimCliWith({ env }, ...args, '--quiet');
    expectSuccess(quiet);
    assert.equal(quiet.stderr, '');
    assert.deepEqual(JSON.parse(quiet.stdout), JSON.parse(r.stdout));
  });

  test('a 128-byte .npy declaring 2e9 empty items is refused at once, not allocated (issue 21)', () => {
    const spec = file('huge-shape.npy');
    const empty = encodeNpy({ dtype: 'float32', shape: [0, 0, D], data: new Float32Array(0) });
    const text = Buffer.from(empty)
      .toString('latin1')
      .replace(`(0, 0, ${D}), }${' '.repeat(9)}`, `(2000000000, 0, ${D}), }`);
    fs.writeFileSync(spec, Buffer.from(text, 'latin1'));
    assert.equal(fs.statSync(spec).size, 128);
    const started = Date.now();
    const r = maxsimCli('score', '--queries', file('q.npy'), '--docs', spec);
    assert.match(
      expectCleanError(r, 1),
      /documents whose metadata \(16 bytes each\) fits the budget of .* for --docs but received 2000000000 documents/,
    );
    assert.ok(Date.now() - started < 20_000);
  });

  test('a .npy of more than 4 GiB is scored (MAXSIM_BIG_TESTS=1: writes a 4.3 GB sparse file)', {
    skip: process.env.MAXSIM_BIG_TESTS !== '1' && 'set MAXSIM_BIG_TESTS=1',
  }, () => {
    const d = 128;
    const tokens = 2 ** 23 + 1024; // 4.3 GB of float32
    const big = file('big.npy');
    const header = encodeNpyHeader([tokens, d]);
    const fd = fs.openSync(big, 'w');
    fs.writeSync(fd, header);
    const last = new Float32Array(d).fill(0.5); // the last token: the only non-zero one
    fs.writeSync(fd, last, 0, last.byteLength, header.length + (tokens - 1) * d * 4);
    fs.closeSync(fd);
    const offsets = file('big-offsets.npy');
    writeNpy(offsets, {
      dtype: 'int64',
      shape: [3],
      data: BigInt64Array.of(0n, BigInt(tokens - 1), BigInt(tokens)),
    });
    const q = file('big-q.npy');
    writeNpy(q, { dtype: 'float32', shape: [1, d], data: new Float32Array(d).fill(1) });
    try {
      const r = maxsimCli(
        'score',
        '--queries',
        q,
        '--docs',
        big,
        '--doc-offsets',
        offsets,
        '--backend',
        'cpu',
        '--json',
        '--no-check-finite',
      );
      expectSuccess(r);
      assert.deepEqual(JSON.parse(r.stdout).scores, [0, 64]);
    } finally {
      fs.rmSync(big, { force: true });
    }
  });
});

function encodeNpyHeader(shape: number[]): Uint8Array {
  const full = encodeNpy({ dtype: 'float32', shape: [0, shape[1]], data: new Float32Array(0) });
  // the growth-axis padding after the dict takes the extra digits, so the header length stays
  const extra = ' '.repeat(String(shape[0]).length - 1);
  const text = Buffer.from(full)
    .toString('latin1')
    .replace(`(0, ${shape[1]}), }${extra}`, `(${shape[0]}, ${shape[1]}), }`);
  return Buffer.from(text, 'latin1');
}

describe('the input door and CLI contracts (issue 32 items 1, 6, 7)', () => {
  test('a 128-byte .npy or a safetensors header claiming 1e8 empty queries: a fast one-line error', () => {
    const shape = [100_000_000, 0, 16];
    writeNpy(file('killer.npy'), float32(shape, new Float32Array(0)));
    assert.ok(fs.statSync(file('killer.npy')).size <= 128);
    writeSafetensors(file('killer.safetensors'), { q: float32(shape, new Float32Array(0)) });
    for (const spec of [file('killer.npy'), file('killer.safetensors')]) {
      const t0 = performance.now();
      const line = expectCleanError(maxsimCli('score', '--queries', spec, '--docs', file('dense.npy')), 1);
      assert.match(line, /at most 65536 items.*for --queries/);
      assert.ok(performance.now() - t0 < 10_000, `${performance.now() - t0} ms`);
    }
  });

  test('--max-work refuses work above it, naming the flag; f32 spelt float32 / fp32 too', () => {
    const line = expectCleanError(
      maxsimCli('score', '--queries', file('q.npy'), '--docs', file('dense.npy'), '--max-work', '1000'),
      1,
    );
    assert.match(line, /--max-work/);
    for (const dtype of ['float32', 'fp32'])
      expectSuccess(
        maxsimCli(
          'score',
          '--queries',
          file('q.npy'),
          '--docs',
          file('dense.npy'),
          '--dtype',
          dtype,
          '--max-work',
          '1e9',
        ),
      );
  });

  test('errors name the flags (--no-check-finite), not the library options', () => {
    const values = new Float32Array(2 * D).fill(0.25);
    values[3] = Number.NaN;
    writeNpy(file('nan2.npy'), float32([2, D], values));
    const line = expectCleanError(
      maxsimCli('score', '--queries', file('nan2.npy'), '--docs', file('dense.npy')),
      1,
    );
    assert.match(line, /--no-check-finite/);
    assert.doesNotMatch(line, /checkFinite/);
  });

  test('a .npz archive is named as such', () => {
    // a zip's local file header: what np.savez writes
    fs.writeFileSync(file('arrays.npz'), Buffer.from([0x50, 0x4b, 0x03, 0x04, 20, 0, 0, 0, 0, 0, 0, 0]));
    fs.copyFileSync(file('arrays.npz'), file('arrays.bin'));
    for (const spec of [file('arrays.npz'), file('arrays.bin')]) {
      const line = expectCleanError(maxsimCli('score', '--queries', spec, '--docs', file('dense.npy')), 1);
      assert.match(line, /\.npz archive/);
      assert.doesNotMatch(line, /safetensors header/);
    }
  });

  test('usage errors of nested commands (corpus build) are one maxsim: line, exit 2', () => {
    const line = expectCleanError(maxsimCli('corpus', 'build', '--no-such-flag'), 2);
    assert.doesNotMatch(line, /error:/);
  });
});
