// Soak of the corpus store (issue 21, not CI): W appender processes and S searcher processes on one
// corpus for a while; appenders wait for the lock, record every acknowledged append, and searchers
// open and search (CPU, CRCs checked) in loops. At the end every acknowledged append must be present
// exactly once and the corpus must verify. Failures other than a lock timeout are counted as errors.
// Run: node dist/bench/corpus-soak.js [seconds=600] [appenders=8] [searchers=8]
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { CorpusFile, CorpusWriter } from '../src/io/corpus/index.js';
import { raggedBatch } from '../src/tensor.js';

const seconds = Number(process.argv[2] ?? 600);
const appenders = Number(process.argv[3] ?? 8);
const searchers = Number(process.argv[4] ?? 8);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-soak-'));
const corpusDir = path.join(dir, 'soak.msx');
const corpusModule = fileURLToPath(new URL('../src/io/corpus/index.js', import.meta.url));
const searchModule = fileURLToPath(new URL('../src/ops/corpus-search.js', import.meta.url));
const tensorModule = fileURLToPath(new URL('../src/tensor.js', import.meta.url));
const DIM = 32;

const w = CorpusWriter.create(corpusDir, { dim: DIM, ids: true });
w.add(raggedBatch(new Float32Array(4 * DIM).fill(0.1), [0, 4], { dim: DIM }), ['seed']);
w.commit();

const appendScript = path.join(dir, 'append.mjs');
fs.writeFileSync(
  appendScript,
  `import { CorpusWriter } from ${JSON.stringify(corpusModule)};
import { raggedBatch } from ${JSON.stringify(tensorModule)};
const [dir, child, ms] = process.argv.slice(2);
const until = Date.now() + Number(ms);
for (let round = 0; Date.now() < until; round++) {
  const docs = 1 + (round % 5);
  const data = new Float32Array(docs * 8 * ${DIM}).map((_, i) => Math.sin(i * (round + 1) + Number(child)));
  const offsets = Array.from({ length: docs + 1 }, (_, i) => i * 8);
  const ids = Array.from({ length: docs }, (_, i) => 'a' + child + '-' + round + '-' + i);
  try {
    const w = CorpusWriter.append(dir, { waitMs: 5000 });
    try { w.add(raggedBatch(data, offsets, { dim: ${DIM} }), ids); w.commit(); } catch (e) { w.abort(); throw e; }
    process.stdout.write('OK ' + ids.join(' ') + '\\n');
  } catch (e) {
    process.stdout.write((e.name === 'CorpusLockedError' ? 'LOCKED ' : 'ERR ') + String(e.message).replace(/\\n/g, ' ') + '\\n');
  }
}
`,
);
const searchScript = path.join(dir, 'search.mjs');
fs.writeFileSync(
  searchScript,
  `import { openCorpus } from ${JSON.stringify(searchModule)};
import { raggedBatch } from ${JSON.stringify(tensorModule)};
const [dir, ms] = process.argv.slice(2);
const until = Date.now() + Number(ms);
const q = raggedBatch(new Float32Array(4 * ${DIM}).map((_, i) => Math.cos(i)), [0, 4], { dim: ${DIM} });
let n = 0;
while (Date.now() < until) {
  try {
    const c = openCorpus(dir);
    await c.search(q, { topK: 5, backend: 'cpu', threads: 1 });
    n++;
  } catch (e) {
    process.stdout.write('ERR ' + String(e.message).replace(/\\n/g, ' ') + '\\n');
  }
}
process.stdout.write('SEARCHES ' + n + '\\n');
`,
);

function runChild(script: string, args: string[]): Promise<string> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.on('exit', (code) => resolve(code === 0 ? out : `${out}ERR exit ${code}\n`));
  });
}

const ms = String(seconds * 1000);
const outputs = await Promise.all([
  ...Array.from({ length: appenders }, (_, c) => runChild(appendScript, [corpusDir, String(c), ms])),
  ...Array.from({ length: searchers }, () => runChild(searchScript, [corpusDir, ms])),
]);
const acknowledged: string[] = [];
let locked = 0;
let searches = 0;
const errors: string[] = [];
for (const line of outputs.join('').split('\n').filter(Boolean)) {
  if (line.startsWith('OK ')) acknowledged.push(...line.slice(3).split(' '));
  else if (line.startsWith('LOCKED ')) locked++;
  else if (line.startsWith('SEARCHES ')) searches += Number(line.slice(9));
  else errors.push(line);
}
const c = CorpusFile.open(corpusDir);
c.verify();
const ids = Array.from({ length: c.info.documents }, (_, i) => c.id(i)).slice(1);
const present = new Set(ids);
const missing = acknowledged.filter((id) => !present.has(id));
console.log(
  `${seconds} s, ${appenders} appenders, ${searchers} searchers: ${acknowledged.length} documents acknowledged, ` +
    `${ids.length} present (${present.size} distinct), ${missing.length} missing, ${c.info.segments} segments, ` +
    `${locked} lock timeouts, ${searches} searches, ${errors.length} errors; corpus verifies`,
);
for (const e of errors.slice(0, 10)) console.log(e);
fs.rmSync(dir, { recursive: true, force: true });
if (
  missing.length > 0 ||
  present.size !== ids.length ||
  ids.length !== acknowledged.length ||
  errors.length > 0
)
  process.exitCode = 1;
