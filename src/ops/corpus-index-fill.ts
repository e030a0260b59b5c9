// The completion of a search through the index where it returned fewer hits than the full scan
// would: the stages reach only documents with a token in a probed list, so a k near the corpus size,
// an empty query or short lists leave a query with fewer than min(k, live documents) hits. The
// missing ones come from the documents the query did not return: scored exactly on the stored
// tokens, or, where the corpus keeps only its index, by the stages again with every centroid probed
// (documents with no token score -Infinity, and every document 0 for an empty query, as in the scan).
import type { CorpusFile } from '../io/corpus/index.js';
import type { Hit, TokenMatrix } from '../tensor.js';
import { mergeHits } from './corpus-hits.js';

/**
 * Completes each row of `hits` (best first, global indices) that is short of min(k, live) hits in
 * place, as the scan of every live document would rank them, and returns the documents added. `exact(qi, subset, n)`: the n best of a sorted list of live
 * documents for query qi on the stored tokens; absent where the corpus keeps only its index.
 */
export async function fillShortRows(
  file: CorpusFile,
  hits: Hit[][],
  queries: readonly TokenMatrix[],
  k: number,
  exact: ((qi: number, subset: number[], n: number) => Promise<Hit[]>) | undefined,
  signal?: AbortSignal,
): Promise<number> {
  const want = Math.min(k, file.info.live);
  let added = 0;
  for (let qi = 0; qi < hits.length; qi++) {
    if (hits[qi].length >= want) continue;
    signal?.throwIfAborted();
    const have = new Set(hits[qi].map((h) => h.index));
    const rest: number[] = [];
    for (let i = 0; i < file.info.documents; i++) if (!file.isDeleted(i) && !have.has(i)) rest.push(i);
    // the best `want` of the rest, not just the missing count: every live document is then scored,
    // so the row is the full scan's (or the residual scan's) own answer
    const more = exact ? await exact(qi, rest, want) : await residualRest(file, queries[qi], rest, want);
    const before = hits[qi].length;
    hits[qi] = mergeHits(hits[qi], more, want);
    added += hits[qi].length - before;
  }
  return added;
}

/** The n best of `rest` on the decoded residuals: every indexed segment's stages at full probe. */
async function residualRest(file: CorpusFile, query: TokenMatrix, rest: number[], n: number): Promise<Hit[]> {
  const fixed = query.length === 0 ? 0 : Number.NEGATIVE_INFINITY;
  const wanted = new Set(rest);
  let found: Hit[] = [];
  const index = file.index!;
  for (let si = 0; si < file.segments.length && query.length > 0; si++) {
    const plaid = index.segment(si);
    if (!plaid || plaid.count === 0) continue;
    const r = await plaid.search(query, {
      k: plaid.count,
      nprobe: plaid.centroids,
      candidates: plaid.count,
      rescore: plaid.count,
      interaction: 'lists',
    });
    const first = file.segments[si].firstDocument;
    const row = r.hits
      .map((h) => ({ index: first + h.index, score: h.score }))
      .filter((h) => wanted.has(h.index));
    found = mergeHits(found, row, n);
  }
  // documents no list reaches (no tokens; every one for an empty query), in index order
  const reached = new Set(found.map((h) => h.index));
  const unreached: Hit[] = [];
  for (const i of rest) {
    if (unreached.length + found.length >= n) break;
    if (!reached.has(i)) unreached.push({ index: i, score: fixed });
  }
  return mergeHits(found, unreached, n);
}
