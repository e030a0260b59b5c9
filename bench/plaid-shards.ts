// The streamed synthetic corpus (src/plaid/synthetic.ts, streamedSynthetic) as float16 shard files on
// disk, and those shards memory-mapped as TokenBatch parts (the page cache holds them, not the JS
// heap). A shard is raw float16 bits, documents back to back, fixed length; a file of the right size
// is reused, so a second run skips the generation.
import fs from 'node:fs';
import path from 'node:path';
import { encodeFloats } from '../src/floats.js';
import { loadNative } from '../src/native.js';
import {
  PART_TYPES,
  type PartArray,
  type PartType,
  type PlaidHeader,
  type PlaidParts,
  partTypeOf,
} from '../src/plaid/parts.js';
import { type StreamedSynthetic, streamedDocuments } from '../src/plaid/synthetic.js';
import type { TokenBatch } from '../src/tensor.js';

export interface ShardSpec {
  dir: string;
  docs: number;
  perShard: number;
  length: number;
  dim: number;
  seed: number;
}

function shardPath(s: ShardSpec, i: number): string {
  return path.join(s.dir, `synthetic-s${s.seed}-${s.docs}x${s.length}x${s.dim}-${i}.f16`);
}

/** Writes the missing shards; returns the milliseconds spent generating. */
export function writeShards(s: ShardSpec, gen: StreamedSynthetic, log: (m: string) => void): number {
  fs.mkdirSync(s.dir, { recursive: true });
  const t0 = performance.now();
  const shards = Math.ceil(s.docs / s.perShard);
  for (let i = 0; i < shards; i++) {
    const b0 = i * s.perShard;
    const b1 = Math.min(s.docs, b0 + s.perShard);
    const file = shardPath(s, i);
    const bytes = (b1 - b0) * s.length * s.dim * 2;
    if (fs.existsSync(file) && fs.statSync(file).size === bytes) continue;
    const tmp = `${file}.tmp`;
    const fd = fs.openSync(tmp, 'w');
    try {
      for (let b = b0; b < b1; b += 4096) {
        const r = streamedDocuments(gen, b, Math.min(b1, b + 4096));
        if (r.lengths.some((l) => l !== s.length)) throw new Error('shards need a fixed document length');
        const bits = encodeFloats(r.data, 'float16');
        fs.writeSync(fd, new Uint8Array(bits.buffer, bits.byteOffset, bits.byteLength));
      }
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, file);
    log(`shard ${i + 1}/${shards} written (${((performance.now() - t0) / 1000).toFixed(0)} s)`);
  }
  return performance.now() - t0;
}

/** Every shard mapped read-only (copy-on-write) as a float16 batch of fixed-length documents. */
export function mapShards(s: ShardSpec): TokenBatch[] {
  const map = (loadNative() as unknown as { file: { mapFile(p: string, o: number, l: number): ArrayBuffer } })
    .file.mapFile;
  const out: TokenBatch[] = [];
  for (let i = 0; i * s.perShard < s.docs; i++) {
    const count = Math.min(s.perShard, s.docs - i * s.perShard);
    const data = new Uint16Array(map(shardPath(s, i), 0, count * s.length * s.dim * 2));
    const starts = new Float64Array(count);
    for (let b = 0; b < count; b++) starts[b] = b * s.length;
    out.push({
      kind: 'batch',
      layout: 'ragged',
      dtype: 'float16',
      data,
      dim: s.dim,
      count,
      maxLength: s.length,
      starts,
      lengths: new Int32Array(count).fill(s.length),
    });
  }
  return out;
}

/** Writes an index's parts (header JSON + one raw file per array) to dir: a later run maps them. */
export function saveIndexParts(dir: string, parts: PlaidParts): void {
  fs.mkdirSync(dir, { recursive: true });
  const types: Record<string, PartType> = {};
  for (const [name, a] of Object.entries(parts.arrays)) {
    types[name] = partTypeOf(a);
    fs.writeFileSync(path.join(dir, `${name}.bin`), new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
  }
  fs.writeFileSync(path.join(dir, 'header.json'), JSON.stringify({ header: parts.header, types }));
}

/** The parts saveIndexParts wrote, every array memory-mapped (undefined when dir holds none). */
export function loadIndexParts(dir: string): PlaidParts | undefined {
  const head = path.join(dir, 'header.json');
  if (!fs.existsSync(head)) return undefined;
  const map = (loadNative() as unknown as { file: { mapFile(p: string, o: number, l: number): ArrayBuffer } })
    .file.mapFile;
  const { header, types } = JSON.parse(fs.readFileSync(head, 'utf8')) as {
    header: PlaidHeader;
    types: Record<string, PartType>;
  };
  const arrays: Record<string, PartArray> = {};
  for (const [name, type] of Object.entries(types)) {
    const file = path.join(dir, `${name}.bin`);
    const bytes = fs.statSync(file).size;
    const buf = bytes === 0 ? new ArrayBuffer(0) : map(file, 0, bytes);
    arrays[name] = new PART_TYPES[type](buf);
  }
  return { header, arrays };
}
