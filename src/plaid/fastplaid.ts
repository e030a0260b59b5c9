// A fast-plaid / PyLate PLAID index directory opened read-only as a PlaidIndex (our reader; no code
// of theirs). Its files: metadata.json {nbits, num_chunks, num_partitions, num_embeddings};
// centroids.npy [K, d] (float16 or float32); bucket_cutoffs.npy [2^b - 1] and bucket_weights.npy
// [2^b] (one set shared by every dimension); per chunk c: c.codes.npy (centroid id per token, int64),
// c.residuals.npy (uint8 [tokens, d b / 8]: dimension k's code in bits k b .. k b + b - 1 of the
// row, least significant bit first, each byte read from its high bit: numpy packbits order),
// doclens.c.json (tokens per passage); ivf.npy / ivf_lengths.npy (centroid -> passages, checked
// against the codes). A token decodes as centroid[code] + weight[bucket] per dimension (not
// normalized), which is our codec's decode with the shared buckets replicated per dimension, so the
// index maps onto PlaidParts' arrays: ids re-packed into our 16-token block layout, bags and lists
// rebuilt. Search scores are MaxSim of the decoded vectors (no tokens: `scores: 'residual'`).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { FormatError } from '../errors.js';
import { decodeToFloat32 } from '../floats.js';
import { parseNpy } from '../io/npy.js';
import { tablesOf, unorderedCutoff } from './codec.js';
import type { NativeIndex } from './native.js';
import { type BuildStats, buildLists, PlaidIndex } from './plaid.js';

function json(dir: string, name: string): Record<string, unknown> {
  const file = path.join(dir, name);
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    throw new FormatError(file, `not a readable fast-plaid JSON file (${(e as Error).message})`);
  }
}

/** A .npy file's elements as float32 (float16 / float32) or as safe integers (int32 / int64). */
function npy(
  dir: string,
  name: string,
  kind: 'float' | 'int',
): { data: Float32Array | Float64Array; shape: number[] } {
  const file = path.join(dir, name);
  const a = parseNpy(new Uint8Array(fs.readFileSync(file)), file);
  if (kind === 'float') {
    if (a.dtype === 'float32') return { data: a.data as Float32Array, shape: a.shape };
    if (a.dtype === 'float16')
      return { data: decodeToFloat32(a.data as Uint16Array, 'float16', a.data.length), shape: a.shape };
  } else if (a.dtype === 'int64' || a.dtype === 'int32') {
    const out = new Float64Array(a.data.length);
    for (let i = 0; i < out.length; i++) out[i] = Number(a.data[i]);
    return { data: out, shape: a.shape };
  }
  throw new FormatError(
    file,
    `expected ${kind === 'float' ? 'float16 or float32' : 'int32 or int64'} data, found ${a.dtype}`,
  );
}

/** A uint8 .npy file ([rows, cols]): the shared parser knows no uint8, so its header is read here. */
function bytesNpy(dir: string, name: string): { data: Uint8Array; rows: number; cols: number } {
  const file = path.join(dir, name);
  const bytes = new Uint8Array(fs.readFileSync(file));
  const head = Buffer.from(bytes.subarray(0, Math.min(bytes.length, 4096))).toString('latin1');
  const descr = /'descr':\s*'([<>|]u1)'/.exec(head);
  const shape = /'shape':\s*\((\d+),\s*(\d+),?\)/.exec(head);
  if (!descr || !shape || /'fortran_order':\s*True/.test(head))
    throw new FormatError(file, 'expected a C-order uint8 .npy array [tokens, bytes]');
  // .npy layout: magic, version (byte 6), header length (uint16 at 8 in 1.0, else uint32), header
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.length < 12 || head.slice(0, 6) !== '\x93NUMPY') throw new FormatError(file, 'not a .npy file');
  const dataStart = bytes[6] === 1 ? 10 + v.getUint16(8, true) : 12 + v.getUint32(8, true);
  const rows = Number(shape[1]);
  const cols = Number(shape[2]);
  if (bytes.length - dataStart !== rows * cols)
    throw new FormatError(
      file,
      `shape (${rows}, ${cols}) needs ${rows * cols} data bytes, the file has ${bytes.length - dataStart}`,
    );
  return { data: bytes.subarray(dataStart), rows, cols };
}

function setCode(codes: Uint8Array, bits: number, d: number, t: number, k: number, code: number) {
  const bit = (t % 16) * bits;
  codes[Math.floor(t / 16) * d * 2 * bits + k * 2 * bits + (bit >> 3)] |= code << (bit & 7);
}

/** Opens the fast-plaid index in `dir` read-only for search (every file checked; FormatError naming it). */
export function openFastPlaid(dir: string): PlaidIndex {
  const meta = json(dir, 'metadata.json');
  const bits = meta.nbits;
  if (bits !== 2 && bits !== 4)
    throw new FormatError(
      path.join(dir, 'metadata.json'),
      `nbits ${JSON.stringify(bits)}: this reader takes 2 or 4`,
    );
  const chunks = meta.num_chunks;
  if (!Number.isSafeInteger(chunks) || (chunks as number) < 1)
    throw new FormatError(path.join(dir, 'metadata.json'), `num_chunks ${JSON.stringify(chunks)}`);
  const cent = npy(dir, 'centroids.npy', 'float');
  if (cent.shape.length !== 2) throw new FormatError(path.join(dir, 'centroids.npy'), 'expected [K, d]');
  const [k, d] = cent.shape;
  const levels = 1 << bits;
  const cut = npy(dir, 'bucket_cutoffs.npy', 'float').data;
  const wts = npy(dir, 'bucket_weights.npy', 'float').data;
  if (cut.length !== levels - 1 || wts.length !== levels)
    throw new FormatError(
      dir,
      `bucket_cutoffs / bucket_weights hold ${cut.length} / ${wts.length} values, not ${levels - 1} / ${levels}`,
    );
  const unordered = unorderedCutoff(Float32Array.from(cut), levels);
  if (unordered >= 0)
    throw new FormatError(
      path.join(dir, 'bucket_cutoffs.npy'),
      `the cutoffs must ascend and be finite; element ${unordered} is ${cut[unordered]}`,
    );
  const cids: number[] = [];
  const rows: Uint8Array[] = [];
  const lengths: number[] = [];
  for (let c = 0; c < (chunks as number); c++) {
    const ids = npy(dir, `${c}.codes.npy`, 'int').data;
    const res = bytesNpy(dir, `${c}.residuals.npy`);
    const doclens = json(dir, `doclens.${c}.json`) as unknown as number[];
    if (res.rows !== ids.length || res.cols !== (d * bits) / 8)
      throw new FormatError(
        path.join(dir, `${c}.residuals.npy`),
        `expected [${ids.length}, ${(d * bits) / 8}]`,
      );
    if (!Array.isArray(doclens) || doclens.reduce((a, n) => a + n, 0) !== ids.length)
      throw new FormatError(
        path.join(dir, `doclens.${c}.json`),
        `passage lengths do not sum to the chunk's ${ids.length} tokens`,
      );
    for (let t = 0; t < ids.length; t++) {
      if (!(Number.isInteger(ids[t]) && ids[t] >= 0 && ids[t] < k))
        throw new FormatError(
          path.join(dir, `${c}.codes.npy`),
          `token ${t}: centroid ${ids[t]} outside [0, ${k})`,
        );
      cids.push(ids[t]);
      rows.push(res.data.subarray(t * res.cols, (t + 1) * res.cols));
    }
    lengths.push(...doclens);
  }
  const tokens = cids.length;
  const padded = Math.ceil(tokens / 16) * 16;
  const native = {
    k,
    d,
    docs: lengths.length,
    bits,
    centroids: Float32Array.from(cent.data),
    cids: new Int32Array(padded),
    codes: new Uint8Array((padded / 16) * d * 2 * bits),
  } as NativeIndex;
  native.cids.set(cids);
  rows.forEach((row, t) => {
    for (let j = 0; j < d; j++) {
      let code = 0;
      for (let b = 0; b < bits; b++) {
        const p = j * bits + b;
        code |= ((row[p >> 3] >> (7 - (p & 7))) & 1) << b;
      }
      setCode(native.codes, bits, d, t, j, code);
    }
  });
  const cutoffs = new Float32Array(d * (levels - 1));
  const weights = new Float32Array(d * levels);
  for (let j = 0; j < d; j++) {
    cutoffs.set(cut, j * (levels - 1));
    weights.set(wts, j * levels);
  }
  const tables = tablesOf(weights, d, bits);
  Object.assign(native, { tables, ...buildLists(Int32Array.from(lengths), native.cids, k) });
  checkIvf(dir, native);
  const stats: BuildStats = {
    tokens,
    sample: 0,
    centroids: k,
    bits,
    assignment: 'exact',
    groups: 0,
    probe: 0,
    bytesPerToken: (native.codes.length + 4 * padded) / Math.max(1, tokens),
    meanSquaredError: 0,
    meanSquaredNorm: 0,
    msKmeans: 0,
    msEncode: 0,
    msLists: 0,
  };
  return new PlaidIndex(native, { bits, d, cutoffs, weights, tables }, undefined, stats);
}

// The index's own inverted lists, where present, must be what its codes say (passages per centroid).
function checkIvf(dir: string, n: NativeIndex) {
  if (!fs.existsSync(path.join(dir, 'ivf.npy'))) return;
  const ivf = npy(dir, 'ivf.npy', 'int').data;
  const lens = npy(dir, 'ivf_lengths.npy', 'int').data;
  let at = 0;
  for (let c = 0; c < n.k; c++) {
    const ours = n.ivf.subarray(n.ivfOffsets[c], n.ivfOffsets[c + 1]);
    const theirs = Array.from(ivf.subarray(at, at + lens[c])).sort((a, b) => a - b);
    at += lens[c];
    if (theirs.length !== ours.length || theirs.some((x, i) => x !== ours[i]))
      throw new FormatError(path.join(dir, 'ivf.npy'), `the list of centroid ${c} does not match the codes`);
  }
}
