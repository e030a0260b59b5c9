// The index inside a corpus under damage: crafted MANIFEST index fields, a flipped byte in an index
// array, and a failure injected at every write step of a build, an append's encode and a rebuild.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import { crc32 } from 'node:zlib';
import { FormatError } from '../src/errors.js';
import { CorpusFile, CorpusWriter } from '../src/io/corpus/index.js';
import { indexCorpus } from '../src/io/corpus/index-build.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { failEveryStep } from './helpers.js';
import { build, compare, docsOf, fresh, queriesOf } from './plaid-corpus-helpers.js';

describe('corpus index: damage and crashes', () => {
  test('crafted MANIFEST index fields and damaged index files are refused naming the problem', async () => {
    const dir = fresh();
    build(dir, 40, 1);
    await indexCorpus(dir, { centroids: 8 });
    const text = fs.readFileSync(path.join(dir, 'MANIFEST'), 'utf8');
    const body = JSON.parse(text.split('\n')[0]);
    const write = (b: unknown, to: string) => {
      const s = JSON.stringify(b);
      fs.writeFileSync(path.join(to, 'MANIFEST'), `${s}\ncrc32 ${crc32(s).toString(16).padStart(8, '0')}\n`);
    };
    const cases: [(b: Record<string, any>) => void, RegExp][] = [
      [
        (b) => {
          b.index.bits = 3;
        },
        /index\.bits/,
      ],
      [
        (b) => {
          b.index.file = '../x.msxi';
        },
        /index\.file/,
      ],
      [
        (b) => {
          b.index.segments[0].segment = 'seg-000009.msxs';
        },
        /index\.segments\[0\]\.segment/,
      ],
      [
        (b) => {
          b.index.segments[0].drift = 2;
        },
        /drift/,
      ],
      [
        (b) => {
          b.index.threshold = -1;
        },
        /threshold/,
      ],
      [
        (b) => {
          b.index.segments.push({ ...b.index.segments[0] });
        },
        /segments\[1\]/,
      ],
      [
        (b) => {
          b.version = 1;
        },
        /absent in a version 1/,
      ],
      [
        (b) => {
          b.index.segments[0].crc = (b.index.segments[0].crc ^ 1) >>> 0;
        },
        /does not match the MANIFEST/,
      ],
    ];
    for (const [change, why] of cases) {
      const copy = fresh();
      fs.cpSync(dir, copy, { recursive: true });
      const b = structuredClone(body);
      change(b);
      write(b, copy);
      assert.throws(
        () => CorpusFile.open(copy),
        (e: unknown) => e instanceof FormatError && why.test(e.message),
        String(why),
      );
    }
    // a flipped byte in an index array: the first search through it names the file and array
    const copy = fresh();
    fs.cpSync(dir, copy, { recursive: true });
    const f = path.join(copy, 'ix-000002-0001.msxi');
    const bytes = fs.readFileSync(f);
    bytes[bytes.readUInt32LE(20) + 5] ^= 0xff; // inside the first array (bytes [20, 24): where the data starts)
    fs.writeFileSync(f, bytes);
    const c = openCorpus(copy);
    await assert.rejects(
      c.search(queriesOf(1, 1), { topK: 3 }),
      (e: unknown) => e instanceof FormatError && /ix-000002-0001/.test(e.message),
    );
    c.close();
  });

  // A failure at every write step of `act`: the corpus stays as it was (before the publish) or is
  // the new one (after), always opens and searches, and the next writer leaves no temporaries.
  async function everyStep(prepare: (dir: string) => Promise<void>, act: (dir: string) => Promise<unknown>) {
    const proto = fresh();
    await prepare(proto);
    const generation = (d: string) => CorpusFile.open(d).info.generation;
    const g0 = generation(proto);
    await failEveryStep({
      proto,
      fresh,
      act,
      check: async (dir, { index: at, step, published }) => {
        assert.equal(generation(dir), published ? g0 + 1 : g0, `failure at step ${at} (${step})`);
        const r = await compare(dir, 5, { nprobe: 8, candidates: 200, rescore: 200 }, 2);
        assert.equal(r.recall, 1, `failure at step ${at}`);
        // the next writer removes what the failure left
        const w = CorpusWriter.append(dir);
        w.add(docsOf(1, 900), [`after-${at}`]);
        w.commit();
        assert.deepEqual(
          fs.readdirSync(dir).filter((x) => x.endsWith('.tmp')),
          [],
          `temporaries after step ${at}`,
        );
        const ix = CorpusFile.open(dir).index?.manifest;
        const named = new Set([ix?.file, ...(ix?.segments.map((s) => s.file) ?? [])]);
        const stray = fs.readdirSync(dir).filter((n) => n.startsWith('ix-') && !named.has(n));
        assert.deepEqual(stray, [], `unnamed index files after step ${at}`);
      },
    });
  }

  test('a failure at every step of an index build', async () => {
    await everyStep(
      async (dir) => build(dir, 40, 2),
      (dir) => indexCorpus(dir, { centroids: 8 }),
    );
  });

  test('a failure at every step of encoding an append, and of a rebuild', async () => {
    await everyStep(
      async (dir) => {
        build(dir, 40, 1);
        await indexCorpus(dir, { centroids: 8 });
        const w = CorpusWriter.append(dir);
        w.add(
          docsOf(20, 600),
          Array.from({ length: 20 }, (_, i) => `a${i}`),
        );
        w.commit();
      },
      (dir) => indexCorpus(dir),
    );
    await everyStep(
      async (dir) => {
        build(dir, 40, 1);
        await indexCorpus(dir, { centroids: 8 });
      },
      (dir) => indexCorpus(dir, { rebuild: true, centroids: 8, seed: 3 }),
    );
  });
});
