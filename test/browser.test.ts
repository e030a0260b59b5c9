// maxsim/browser in a real headless Chromium (Debian's chromium, driven by playwright-core): the
// package root served over HTTP, the browser build imported as a page would (so a Node built-in
// anywhere in its graph fails the import), scores against the float64 reference and bitwise against
// the same module in Node (the relaxed SIMD build, which Chromium validates), a corpus from ArrayBuffers, and the demo page examples/browser ranking as
// the reference does, with a screenshot.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import type * as http from 'node:http';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { referenceMaxsim } from '../src/backends/reference.js';
import { wasmEngineFor } from '../src/backends/wasm.js';
import { packageRoot } from '../src/native.js';
import { type FloatDType, raggedBatch, type TokenBatch, tokenMatrix } from '../src/tensor.js';
import { supportedFlavor, type WasmFlavor } from '../src/wasm/features.js';
import { assertScoresClose, randomRagged, rng, runSeed, scoreErrorBounds } from './helpers.js';
import { serveStatic } from './static-server.js';

const chromiumPath = ['/usr/bin/chromium', '/usr/bin/chromium-browser', process.env.CHROMIUM_PATH].find(
  (p) => p && fs.existsSync(p),
);

// biome-ignore lint/suspicious/noExplicitAny: playwright-core is loaded dynamically (optional dev tool)
type Any = any;

const plain = (b: TokenBatch) => ({
  data: Array.from(b.data as Float32Array | Uint16Array),
  offsets: [0, ...Array.from(b.lengths).map((_, i) => b.starts[i] + b.lengths[i])],
  dim: b.dim,
  dtype: b.dtype,
});

describe('maxsim/browser in headless Chromium', {
  skip: chromiumPath ? false : 'no chromium here (apt-get install chromium)',
}, () => {
  let browser: Any;
  let page: Any;
  let origin = '';
  let server: http.Server;
  before(async () => {
    const { chromium } = (await import('playwright-core')) as Any;
    ({ server, origin } = await serveStatic({ '/': packageRoot }, 'maxsim test'));
    browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
    page = await browser.newPage();
    page.on('pageerror', (e: Error) => console.error(`page error: ${e.message}`));
    await page.goto(`${origin}/`);
  });
  after(async () => {
    await browser?.close();
    server?.close();
  });

  test('scores match the float64 reference and the same module in Node, bitwise', async () => {
    const rand = rng(runSeed);
    const cases: { q: TokenBatch; d: TokenBatch }[] = [];
    for (const dtype of ['float32', 'float16', 'bfloat16'] as FloatDType[]) {
      for (const dim of [1, 5, 64, 130]) {
        const ql = Array.from({ length: 3 }, () => Math.floor(rand() * 20));
        const dl = Array.from({ length: 7 }, () => (rand() < 0.2 ? 0 : 1 + Math.floor(rand() * 40)));
        cases.push({ q: randomRagged(ql, dim, dtype, rand), d: randomRagged(dl, dim, dtype, rand) });
      }
    }
    const got: number[][] = await page.evaluate(
      async ({ cases }: Any) => {
        const entry = '/dist/src/browser/index.js';
        const m = await import(entry);
        await m.init();
        const batch = (x: Any) => {
          const data = x.dtype === 'float32' ? Float32Array.from(x.data) : Uint16Array.from(x.data);
          return m.raggedBatch(data, x.offsets, { dim: x.dim, dtype: x.dtype });
        };
        const out: unknown[] = [m.wasmFlavor()];
        for (const c of cases) {
          const s = (await m.maxsim(batch(c.q), batch(c.d))).data;
          out.push(Array.from(s, (v: number) => (v === Number.NEGATIVE_INFINITY ? 'ninf' : v)));
        }
        return out;
      },
      { cases: cases.map((c) => ({ q: plain(c.q), d: plain(c.d) })) },
    );
    // Chromium validates relaxed SIMD (V8 11.4+); Node 20 only behind a flag, set here for the comparison
    const flavor = got.shift() as unknown as WasmFlavor;
    assert.equal(flavor, 'relaxed-simd', 'Chromium loads the relaxed SIMD build');
    if (supportedFlavor() !== flavor) setFlagsFromString('--experimental-wasm-relaxed-simd');
    const same = wasmEngineFor(flavor);
    cases.forEach((c, i) => {
      const scores = Float32Array.from(got[i], (v) =>
        v === ('ninf' as never) ? Number.NEGATIVE_INFINITY : v,
      );
      assertScoresClose(
        scores,
        referenceMaxsim(c.q, c.d),
        scoreErrorBounds(c.q, c.d),
        `case ${i} (${c.q.dtype}, d=${c.q.dim})`,
      );
      const node = same.scoreSync(c.q, c.d);
      assert.deepEqual(Array.from(scores), Array.from(node), `case ${i}: Chromium vs Node (${flavor})`);
    });
  });

  test('a corpus from ArrayBuffers: search ranks as the reference, with ids; bad input is named', async () => {
    const rand = rng(runSeed + 1);
    const dim = 32;
    const d = randomRagged(
      Array.from({ length: 50 }, () => 1 + Math.floor(rand() * 30)),
      dim,
      'float32',
      rand,
    );
    const q = randomRagged([9], dim, 'float32', rand);
    const res = await page.evaluate(
      async ({ d, q }: Any) => {
        const entry = '/dist/src/browser/index.js';
        const m = await import(entry);
        await m.init();
        const buf = Float32Array.from(d.data).buffer;
        const corpus = m.corpusFromBuffers({
          data: buf,
          offsets: d.offsets,
          dim: d.dim,
          ids: d.offsets.slice(1).map((_: number, i: number) => `d${i}`),
        });
        const hits = await corpus.search(
          m.tokenMatrix(Float32Array.from(q.data), q.data.length / q.dim, q.dim),
          5,
        );
        let error = '';
        try {
          m.corpusFromBuffers({ data: new ArrayBuffer(6), offsets: [0, 1], dim: 2 });
        } catch (e) {
          error = `${(e as Error).name}: ${(e as Error).message}`;
        }
        corpus.free();
        return { hits, error };
      },
      { d: plain(d), q: plain(q) },
    );
    const ref = referenceMaxsim(q, d);
    const order = Array.from(ref, (s, i) => [s, i]).sort((a, b) => b[0] - a[0] || a[1] - b[1]);
    assert.deepEqual(
      res.hits.map((h: Any) => h.index),
      order.slice(0, 5).map((x) => x[1]),
    );
    assert.deepEqual(
      res.hits.map((h: Any) => h.id),
      order.slice(0, 5).map((x) => `d${x[1]}`),
    );
    assert.match(res.error, /InvalidArgumentError: Expected a multiple of 4 bytes for float32 for data/);
  });

  test('the demo page reranks as the reference does (screenshot taken)', async () => {
    const demo = await browser.newPage();
    const errors: string[] = [];
    demo.on('pageerror', (e: Error) => errors.push(e.message));
    await demo.goto(`${origin}/examples/browser/index.html`);
    await demo.waitForSelector('body[data-ranked="1"]', { timeout: 30_000 });
    const embedder = await import(
      pathToFileURL(path.join(packageRoot, 'examples', 'browser', 'embed.js')).href
    );
    const expected = (query: string) => {
      const vs: Float32Array[] = embedder.DOCUMENTS.map(embedder.embed);
      const offsets = [0];
      for (const v of vs) offsets.push(offsets[offsets.length - 1] + v.length / embedder.DIM);
      const data = new Float32Array(offsets[offsets.length - 1] * embedder.DIM);
      vs.forEach((v, i) => {
        data.set(v, offsets[i] * embedder.DIM);
      });
      const docs = raggedBatch(data, offsets, { dim: embedder.DIM });
      const qv = embedder.embed(query);
      const ref = referenceMaxsim(tokenMatrix(qv, qv.length / embedder.DIM, embedder.DIM), docs);
      return Array.from(ref, (s, i) => [s, i])
        .sort((a, b) => b[0] - a[0] || a[1] - b[1])
        .map((x) => `doc${x[1]}`);
    };
    const ids = () => demo.$$eval('#results li', (lis: Any[]) => lis.map((li) => li.dataset.id));
    assert.deepEqual(await ids(), expected('how long do cats sleep'));
    assert.equal((await ids())[0], 'doc0');
    await demo.fill('#query', 'rerank documents in the browser with WebAssembly');
    await demo.click('button');
    await demo.waitForSelector('body[data-ranked="2"]');
    assert.deepEqual(await ids(), expected('rerank documents in the browser with WebAssembly'));
    const shot = path.join(os.tmpdir(), `maxsim-browser-demo-${process.pid}.png`);
    await demo.screenshot({ path: shot, fullPage: true });
    const png = fs.readFileSync(shot);
    assert.equal(png.subarray(1, 4).toString(), 'PNG');
    assert.ok(png.length > 10_000, `screenshot ${png.length} bytes`);
    fs.rmSync(shot);
    assert.deepEqual(errors, []);
    await demo.close();
  });
});
