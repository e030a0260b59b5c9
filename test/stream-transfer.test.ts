// How a CUDA corpus search brings blocks to the GPU (issue 25): the chooser between corpus.pin()'s pin,
// pinning ahead within a host-memory budget, O_DIRECT reads and copies; the default budget read from
// /proc/meminfo; the options' validation (library and CLI). CPU-side: the GPU runs of every mode are
// in test/gpu/corpus.test.ts.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import {
  checkTransferOptions,
  chooseTransfer,
  defaultHostMemoryBudget,
  HOST_MEMORY_FRACTION,
  parseMemAvailable,
  TRANSFER_OPTIONS,
  type TransferOption,
} from '../src/backends/cuda-transfer.js';
import { InvalidArgumentError } from '../src/errors.js';
import { CorpusWriter } from '../src/io/corpus/index.js';
import { writeNpy } from '../src/io/npy.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { randomRagged, rng, runSeed } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-transfer-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

const MEMINFO = `MemTotal:       131072000 kB
MemFree:         2048000 kB
MemAvailable:   100000000 kB
Buffers:          123456 kB
`;

describe('chooseTransfer', () => {
  const GB = 1e9;
  test('auto: the corpus.pin() pin, else pinned ahead when the files fit the budget, else O_DIRECT', () => {
    const rand = rng(runSeed + 401);
    for (let i = 0; i < 200; i++) {
      const corpusBytes = Math.floor(rand() * 100 * GB);
      const budget = rand() < 0.1 ? corpusBytes : Math.floor(rand() * 100 * GB);
      const explicitPin = rand() < 0.3;
      const c = chooseTransfer({ requested: 'auto', explicitPin, corpusBytes, budget });
      const want = explicitPin ? 'pinned' : corpusBytes <= budget ? 'pinned-ahead' : 'direct';
      assert.equal(c.mode, want, `${corpusBytes} bytes, budget ${budget}, pin ${explicitPin}`);
      assert.ok(c.reason.length > 0);
      if (!explicitPin)
        assert.match(c.reason, corpusBytes <= budget ? /fit the host-memory budget/ : /exceed/);
    }
    // the boundary: equal fits, one byte over does not; a zero budget pins nothing
    assert.equal(
      chooseTransfer({ requested: 'auto', explicitPin: false, corpusBytes: 5, budget: 5 }).mode,
      'pinned-ahead',
    );
    assert.equal(
      chooseTransfer({ requested: 'auto', explicitPin: false, corpusBytes: 6, budget: 5 }).mode,
      'direct',
    );
    assert.equal(
      chooseTransfer({ requested: 'auto', explicitPin: false, corpusBytes: 1, budget: 0 }).mode,
      'direct',
    );
    // the reason names both sizes
    const r = chooseTransfer({ requested: 'auto', explicitPin: false, corpusBytes: 26e9, budget: 60e9 });
    assert.match(r.reason, /26\.00 GB.*60\.00 GB/);
  });

  test('an explicit choice is obeyed whatever the budget; copy and register even over a pin', () => {
    for (const explicitPin of [false, true])
      for (const budget of [0, 1e15]) {
        const at = (requested: TransferOption) =>
          chooseTransfer({ requested, explicitPin, corpusBytes: 1e9, budget });
        assert.equal(at('copy').mode, 'copy');
        assert.equal(at('register').mode, 'register');
        assert.equal(at('direct').mode, 'direct');
        assert.equal(at('pin').mode, explicitPin ? 'pinned' : 'pinned-ahead');
        if (explicitPin) assert.match(at('copy').reason, /pin\(\) pin is not used/);
        else assert.doesNotMatch(at('copy').reason, /pin\(\)/);
      }
  });
});

describe('host-memory budget', () => {
  test('MemAvailable is read from /proc/meminfo text', () => {
    assert.equal(parseMemAvailable(MEMINFO), 100000000 * 1024);
    assert.equal(parseMemAvailable('MemTotal: 5 kB\n'), undefined);
    assert.equal(parseMemAvailable(''), undefined);
  });

  test('default: half of MemAvailable less what is pinned elsewhere, never negative', () => {
    const half = Math.floor(100000000 * 1024 * HOST_MEMORY_FRACTION);
    assert.equal(HOST_MEMORY_FRACTION, 0.5);
    assert.equal(defaultHostMemoryBudget(0, MEMINFO), half);
    assert.equal(defaultHostMemoryBudget(1e9, MEMINFO), half - 1e9);
    assert.equal(defaultHostMemoryBudget(half * 3, MEMINFO), 0);
    // without MemAvailable: half of the free memory the OS reports
    const fallback = defaultHostMemoryBudget(0, 'nothing here');
    assert.ok(fallback > 0 && fallback <= os.freemem(), String(fallback));
    // this machine's own /proc/meminfo, where there is one
    if (fs.existsSync('/proc/meminfo')) {
      const own = parseMemAvailable(fs.readFileSync('/proc/meminfo', 'utf8'));
      assert.ok(own !== undefined && own > 0);
      assert.ok(defaultHostMemoryBudget(0) > 0);
    }
  });
});

describe('transfer options: validation', () => {
  test('checkTransferOptions names the option, the expected and the received value', () => {
    for (const transfer of [undefined, ...TRANSFER_OPTIONS]) checkTransferOptions({ transfer });
    for (const hostMemoryBudget of [undefined, 0, 1, 2 ** 40]) checkTransferOptions({ hostMemoryBudget });
    for (const transfer of ['pinned', 'COPY', '', 3, null]) {
      assert.throws(
        () => checkTransferOptions({ transfer }),
        (e: unknown) =>
          e instanceof InvalidArgumentError &&
          e.argument === 'transfer' &&
          /'auto', 'pin', 'direct', 'copy', 'register'/.test(e.expected) &&
          e.received === JSON.stringify(transfer),
        String(transfer),
      );
    }
    for (const hostMemoryBudget of [-1, 1.5, Number.NaN, Infinity, '100', 2 ** 60]) {
      assert.throws(
        () => checkTransferOptions({ hostMemoryBudget }),
        (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'hostMemoryBudget',
        String(hostMemoryBudget),
      );
    }
  });

  const rand = rng(runSeed + 402);
  const dim = 16;
  const dir = path.join(tmp, 'c.msx');
  const w = CorpusWriter.create(dir, { dim, dtype: 'float32' });
  w.add(randomRagged([3, 7, 1, 5], dim, 'float32', rand));
  w.commit();
  const queries = randomRagged([4, 2], dim, 'float32', rand);

  test('a search refuses bad transfer options on every backend, before scanning', async () => {
    const corpus = openCorpus(dir);
    await assert.rejects(
      corpus.search(queries, { backend: 'cpu', transfer: 'fast' as never }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'transfer',
    );
    await assert.rejects(
      corpus.search(queries, { backend: 'cpu', hostMemoryBudget: -5 }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'hostMemoryBudget',
    );
    // valid ones are accepted (and mean nothing to the CPU scan)
    const a = await corpus.search(queries, { backend: 'cpu', transfer: 'direct', hostMemoryBudget: 0 });
    const b = await corpus.search(queries, { backend: 'cpu' });
    assert.deepEqual(a, b);
  });

  test('CLI: --transfer / --no-pin / --host-memory-budget / --stats', () => {
    const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
    const run = (...args: string[]) =>
      spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 120_000 });
    const qf = path.join(tmp, 'q.npy');
    writeNpy(qf, {
      dtype: 'float32',
      shape: [2, 4, dim],
      data: randomRagged([4, 4], dim, 'float32', rand).data as Float32Array,
    });
    const base = ['search', '--queries', qf, '--corpus', dir, '--top-k', '2'];
    // 1: a refused combination; 2: a usage error (commander: a value outside the choices)
    const refused = (args: string[], pattern: RegExp, code = 1) => {
      const r = run(...args);
      assert.equal(r.status, code, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, pattern, args.join(' '));
      assert.doesNotMatch(r.stderr, /^\s+at /m);
    };
    refused([...base, '--no-pin', '--transfer', 'direct'], /--no-pin.*--transfer direct/);
    refused([...base, '--pin', '--transfer', 'copy'], /--pin.*--transfer copy/);
    refused([...base, '--transfer', 'fast'], /--transfer/, 2);
    refused([...base, '--transfer', 'pin', '--backend', 'cpu'], /--transfer.*--backend cpu/);
    refused(
      [...base, '--host-memory-budget', '100', '--backend', 'cpu'],
      /--host-memory-budget.*--backend cpu/,
    );
    refused([...base, '--host-memory-budget', '-1'], /--host-memory-budget/, 2);
    const docs = path.join(tmp, 'docs.npy');
    writeNpy(docs, { dtype: 'float32', shape: [2, 3, dim], data: new Float32Array(6 * dim) });
    refused(['search', '--queries', qf, '--docs', docs, '--stats'], /--corpus.*--stats/);
    refused(['search', '--queries', qf, '--docs', docs, '--transfer', 'copy'], /--corpus.*--transfer/);
    // --stats on the CPU: the results on stdout unchanged, one stats line on stderr
    const plain = run(...base, '--backend', 'cpu');
    const withStats = run(...base, '--backend', 'cpu', '--stats');
    assert.equal(withStats.status, 0, withStats.stderr);
    assert.equal(withStats.stdout, plain.stdout);
    const line = withStats.stderr.split('\n').find((l) => l.startsWith('stats: '));
    assert.ok(line, withStats.stderr);
    const stats = JSON.parse(line.slice('stats: '.length));
    assert.equal(stats.backend, 'cpu');
    assert.equal(stats.documents, 4);
    assert.equal(stats.transfer, undefined);
  });
});
