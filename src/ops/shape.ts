// One query or a batch: the scoring entry points take a TokenMatrix (one query) or a TokenBatch
// (several) and answer in the same shape, scores [B] or hits for one query, a ScoreMatrix or a list
// of hits per query for a batch. Shared by the Node entry points and maxsim/browser.
import { describe } from '../describe.js';
import { InvalidArgumentError } from '../errors.js';
import {
  type Hit,
  isTokenBatch,
  isTokenMatrix,
  type ScoreMatrix,
  type TokenBatch,
  type TokenMatrix,
} from '../tensor.js';
import { checkK, topKOfRow } from './topk.js';

/** The queries argument's name in errors: 'query' for one, 'queries' for a batch. */
export function queriesName(queries: unknown): 'query' | 'queries' {
  if (isTokenMatrix(queries)) return 'query';
  if (isTokenBatch(queries)) return 'queries';
  throw new InvalidArgumentError(
    'queries',
    'a TokenMatrix (one query) or a TokenBatch (a batch of queries)',
    describe(queries),
  );
}

/** All-pairs scores (queries x documents, row-major) in the queries' shape. */
export function shapeScores(
  queries: TokenMatrix | TokenBatch,
  data: Float32Array,
  cols: number,
): Float32Array | ScoreMatrix {
  return isTokenMatrix(queries) ? data : { data, rows: queries.count, cols };
}

/** Top-k of every row of a score matrix. */
export function rankRows(scores: ScoreMatrix, k: number): Hit[][] {
  checkK(k);
  const out: Hit[][] = [];
  for (let r = 0; r < scores.rows; r++) out.push(topKOfRow(scores.data, k, r * scores.cols, scores.cols));
  return out;
}

/** The k best of shapeScores' result: hits for one query, a list of hits per query for a batch. */
export function rankShaped(scores: Float32Array | ScoreMatrix, k: number): Hit[] | Hit[][] {
  return scores instanceof Float32Array ? topKOfRow(scores, k) : rankRows(scores, k);
}
