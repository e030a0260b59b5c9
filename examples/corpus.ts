// An on-disk corpus: build it from a batch, append a segment, search it (streamed block by block,
// memory-mapped on the CPU, through pinned buffers on a GPU), look documents up by id, delete one
// and compact. Every write is published atomically; a crash at any step leaves the previous corpus.
//
// Run: npm run build && node dist/examples/corpus.js [DIR]   (default: a temporary directory)
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { CorpusWriter, openCorpus, raggedBatch } from 'maxsim';
import { demoCorpus } from 'maxsim/internal';

const dir =
  process.argv[2] ?? path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-example-')), 'docs.msx');
const { docs, queries, relevant } = demoCorpus({ docs: 1000, queries: 2 });
const ids = Array.from({ length: docs.count }, (_, b) => `doc-${b}`);

// the first 800 documents in the first segment, float16 on disk
const w = CorpusWriter.create(dir, { dim: docs.dim, dtype: 'float16', ids: true });
const head = 800;
// documents from..to-1 of the packed batch, as a view (no copy): their token offsets, then the end
const split = (from: number, to: number) =>
  raggedBatch(docs.data, [...docs.starts.subarray(from, to), docs.starts[to - 1] + docs.lengths[to - 1]], {
    dim: docs.dim,
    view: true,
  });
w.add(split(0, head), ids.slice(0, head));
w.commit();
// the rest as a second segment
const a = CorpusWriter.append(dir);
a.add(split(head, docs.count), ids.slice(head));
a.commit();

let corpus = openCorpus(dir);
console.log(`${dir}: ${corpus.info.documents} documents in ${corpus.info.segments} segments`);
const hits = await corpus.search(queries, { topK: 5 });
for (const [q, list] of hits.entries())
  console.log(
    `query ${q}: ${list.map((h) => h.id).join(' ')} (planted: ${relevant[q].map((b) => ids[b]).join(' ')})`,
  );
const got = corpus.get([hits[0][0].id]);
console.log(`${hits[0][0].id} has ${got.lengths[0]} tokens`);
corpus.close();

// delete the best hit of query 0, then rewrite the live documents into one segment
CorpusWriter.delete(dir, [hits[0][0].id]);
CorpusWriter.compact(dir);
corpus = openCorpus(dir);
const after = await corpus.search(queries, { topK: 5 });
console.log(
  `after delete + compact: ${corpus.info.documents} documents in ${corpus.info.segments} segment; ` +
    `query 0 now finds ${after[0][0].id} first`,
);
corpus.close();
