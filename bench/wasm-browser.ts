// fp32 MaxSim in headless Chromium (Debian's chromium, driven by playwright-core): maxsim/browser and,
// when MAXSIM_WEB_DIR points at joe32140/maxsim-web's wasm-bindgen output (maxsim_web_wasm.js +
// maxsim_web_wasm_bg.wasm), its MaxSimWasm.maxsim_batch on the same inputs in the same page. Both
// copy the documents into wasm memory on every call (our maxsimSync; their maxsim_batch); ours is
// also timed on a resident corpus (corpusFromBuffers(...).score), as a page that keeps its documents
// would run it. Wall milliseconds per call in the page (performance.now, median of at least 5 calls
// filling ~1 s), single-threaded; scores of the two are compared (max relative difference).
//   MAXSIM_WEB_DIR=... node dist/bench/wasm-browser.js [Nq,Lq,Ld,d,B ...]
// maxsim-web's committed docs/wasm pair (bacd093) does not load in Chromium 156 as published: its
// glue fills `__wbindgen_export_0` as an externref table, but the binary's export 0 is its funcref
// table; with that one init function made a no-op in the copy (its API passes no JS objects) it runs.
import * as fs from 'node:fs';
import { packageRoot } from '../src/native.js';
import { serveStatic } from '../test/static-server.js';

const chromium = ['/usr/bin/chromium', '/usr/bin/chromium-browser', process.env.CHROMIUM_PATH].find(
  (p) => p && fs.existsSync(p),
);
if (!chromium) throw new Error('no chromium here (apt-get install chromium)');
const webDir = process.env.MAXSIM_WEB_DIR;

const shapes = (
  process.argv.slice(2).length
    ? process.argv.slice(2)
    : ['1,32,300,128,1000', '1,32,128,128,5000', '8,32,300,128,500']
).map((s) => s.split(',').map(Number));

// biome-ignore lint/suspicious/noExplicitAny: playwright-core is loaded dynamically (a dev tool)
type Any = any;
const { chromium: pw } = (await import('playwright-core')) as Any;
const { server, origin } = await serveStatic(
  { '/': packageRoot, ...(webDir ? { '/maxsim-web/': webDir } : {}) },
  'maxsim bench',
);
const browser = await pw.launch({ executablePath: chromium, args: ['--no-sandbox'] });
try {
  const page = await browser.newPage();
  page.on('pageerror', (e: Error) => console.error(`page error: ${e.message}`));
  await page.goto(`${origin}/`);
  console.log(`chromium: ${await browser.version()}; maxsim-web: ${webDir ?? 'not given (MAXSIM_WEB_DIR)'}`);
  for (const [nq, lq, ld, d, b] of shapes) {
    const r = await page.evaluate(
      async ({ nq, lq, ld, d, b, web }: Any) => {
        const entry = '/dist/src/browser/index.js';
        const m = await import(entry);
        await m.init();
        const fill = (n: number, seed: number) => {
          let s = seed >>> 0;
          const a = new Float32Array(n);
          for (let i = 0; i < n; i++) {
            s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
            a[i] = s / 2 ** 32 - 0.5;
          }
          return a;
        };
        const qd = fill(nq * lq * d, 1);
        const dd = fill(b * ld * d, 2);
        const offsets = (n: number, len: number) => Array.from({ length: n + 1 }, (_, i) => i * len);
        const queries = m.raggedBatch(qd, offsets(nq, lq), { dim: d });
        const docs = m.raggedBatch(dd, offsets(b, ld), { dim: d });
        const time = async (run: () => unknown) => {
          await run();
          const t: number[] = [];
          const t0 = performance.now();
          while (t.length < 5 || (performance.now() - t0 < 1000 && t.length < 50)) {
            const s = performance.now();
            await run();
            t.push(performance.now() - s);
          }
          t.sort((x, y) => x - y);
          return t[t.length >> 1];
        };
        const out: Record<string, unknown> = { flavor: m.wasmFlavor() };
        let ours: Float32Array | undefined;
        out.copy = await time(() => {
          ours = m.maxsimSync(queries, docs).data;
        });
        const corpus = m.corpusFromBuffers({ data: dd.buffer, offsets: offsets(b, ld), dim: d });
        out.resident = await time(async () => {
          for (let i = 0; i < nq; i++)
            await corpus.score(m.tokenMatrix(qd.subarray(i * lq * d, (i + 1) * lq * d), lq, d));
        });
        corpus.free();
        if (web) {
          const glueUrl = '/maxsim-web/maxsim_web_wasm.js';
          const glue = await import(glueUrl);
          await glue.default({ module_or_path: '/maxsim-web/maxsim_web_wasm_bg.wasm' });
          const w = new glue.MaxSimWasm();
          const lens = new Uint32Array(b).fill(ld);
          let theirs: Float32Array[] = [];
          out.web = await time(() => {
            theirs = [];
            for (let i = 0; i < nq; i++)
              theirs.push(w.maxsim_batch(qd.subarray(i * lq * d, (i + 1) * lq * d), lq, dd, lens, d));
          });
          let diff = 0;
          for (const [i, row] of theirs.entries())
            for (const [j, v] of row.entries()) {
              const o = (ours as Float32Array)[i * b + j];
              diff = Math.max(diff, Math.abs(v - o) / Math.max(1e-6, Math.abs(o)));
            }
          out.maxRelDiff = diff;
        }
        return out;
      },
      { nq, lq, ld, d, b, web: webDir !== undefined },
    );
    const gflop = (2 * nq * lq * ld * d * b) / 1e9;
    const rate = (ms: number) => `${ms.toFixed(1)} ms (${(gflop / (ms / 1e3)).toFixed(1)} GFLOP/s)`;
    console.log(`\n${nq},${lq},${ld},${d},${b} (${gflop.toFixed(2)} GFLOP), ours: ${r.flavor}`);
    console.log(`  ours, documents copied per call  ${rate(r.copy)}`);
    console.log(`  ours, resident corpus            ${rate(r.resident)}`);
    if (r.web !== undefined) {
      console.log(`  maxsim-web maxsim_batch          ${rate(r.web)}`);
      console.log(
        `  ours faster: ${(r.web / r.copy).toFixed(2)}x copied, ${(r.web / r.resident).toFixed(2)}x resident; max relative score difference ${r.maxRelDiff.toExponential(1)}`,
      );
    }
  }
} finally {
  await browser.close();
  server.close();
}
