// The document blocks of the training backward's deterministic dD (the CSR of argmax sources per
// document row, built one block at a time), decided here and passed down as plan.blocks; the engine
// (native/cuda/train_csr.cc, ExpandBlocks) derives each block's rows from the lengths, checks the
// blocks and runs them.
//
// Documents are taken in order into a block until the next one would push its sources past
// sourceCap, its rows past cellCap or its documents past docBlock (a block holds at least one
// document, which may exceed the caps alone). Each block's count and placement walk is block-wide
// (one CTA of TRAIN_WALK_WARPS warps per (document, query block)) where allowed and its documents fit
// the CTA's shared memory, else one warp per unit; its cells split the queries into query blocks so
// that about walkWarps warps have work (or queryBlock queries each), at most cellCap cells.

import { TRAIN_WALK_MAX_LENGTH, TRAIN_WALK_WARPS } from './constants.js';

/** The budgets a plan's blocks keep to (see CSR budget in cuda-train-plan.ts). */
export interface CsrBlockLimits {
  /** Documents per block at most (0: no bound beyond the caps). */
  docBlock: number;
  /** Queries per query block (0: from walkWarps and cellCap). */
  queryBlock: number;
  /** Warps the count / place kernels should have per block (queryBlock 0). */
  walkWarps: number;
  /** Allow the block-wide walk (false: one warp per unit everywhere, for A/B measurements). */
  blockWalk: boolean;
  /** Sources (argmax slots) per block. */
  sourceCap: number;
  /** Cells (rows x query blocks) per block; also its rows. */
  cellCap: number;
}

export interface CsrDocBlock {
  docBegin: number;
  docEnd: number;
  /** Packed document rows [rowBegin, rowEnd). */
  rowBegin: number;
  rowEnd: number;
  /** The most sources the block can have. */
  bound: number;
  /** Its longest document, tokens. */
  longest: number;
  byBlock: boolean;
  qblocks: number;
  qblockSize: number;
}

const ceilDiv = (a: number, b: number) => Math.floor((a + b - 1) / b);

/** The blocks for documents of docLengths against queries of queryLengths. */
export function planDocBlocks(
  queryLengths: ArrayLike<number>,
  docLengths: ArrayLike<number>,
  pairs: 'all' | 'diagonal',
  limits: CsrBlockLimits,
): CsrDocBlock[] {
  const all = pairs === 'all';
  const queries = queryLengths.length;
  let tq = 0; // sources of one document at most: every query token (all pairs)
  for (let i = 0; i < queries; i++) tq += queryLengths[i];
  const blocks: CsrDocBlock[] = [];
  let row = 0;
  let cur = { docBegin: 0, rowBegin: 0, bound: 0, longest: 0 };
  const close = (docEnd: number) => {
    const docs = docEnd - cur.docBegin;
    const rows = Math.max(row - cur.rowBegin, 1);
    const byBlock = limits.blockWalk && cur.longest <= TRAIN_WALK_MAX_LENGTH;
    let qblocks = 1;
    let qblockSize = 1;
    if (all && queries > 0) {
      let qb =
        limits.queryBlock > 0
          ? ceilDiv(queries, limits.queryBlock)
          : Math.min(
              queries,
              ceilDiv(ceilDiv(limits.walkWarps, byBlock ? TRAIN_WALK_WARPS : 1), Math.max(docs, 1)),
            );
      if (limits.queryBlock === 0) qb = Math.min(qb, Math.max(1, Math.floor(limits.cellCap / rows)));
      qb = Math.max(qb, 1);
      qblockSize = ceilDiv(queries, qb);
      qblocks = ceilDiv(queries, qblockSize);
    }
    blocks.push({ ...cur, docEnd, rowEnd: row, byBlock, qblocks, qblockSize });
  };
  for (let j = 0; j < docLengths.length; j++) {
    const ld = Math.max(docLengths[j], 0);
    const bound = ld === 0 ? 0 : all ? tq : queryLengths[j];
    const docs = j - cur.docBegin;
    const full =
      docs > 0 &&
      (cur.bound + bound > limits.sourceCap ||
        row - cur.rowBegin + ld > limits.cellCap ||
        (limits.docBlock > 0 && docs >= limits.docBlock));
    if (full) {
      close(j);
      cur = { docBegin: j, rowBegin: row, bound: 0, longest: 0 };
    }
    cur.bound += bound;
    cur.longest = Math.max(cur.longest, ld);
    row += ld;
  }
  close(docLengths.length);
  return blocks;
}

/** plan.blocks as the engine reads it: [blocks, 4] docEnd, byBlock (0 / 1), qblocks, qblockSize. */
export function packDocBlocks(blocks: readonly CsrDocBlock[]): Int32Array {
  const out = new Int32Array(blocks.length * 4);
  for (const [k, b] of blocks.entries())
    out.set([b.docEnd, b.byBlock ? 1 : 0, b.qblocks, b.qblockSize], 4 * k);
  return out;
}
