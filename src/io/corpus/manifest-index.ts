// The MANIFEST's `index` field (version 3): the codec file and one index file per indexed token
// segment, each named with its size and description CRC, and what the build fitted (bits, K, the
// drift threshold). Token segments it does not list (appended since) are unindexed: search scans them.
import { FormatError } from '../../errors.js';
import { INDEX_NAME, indexName } from './index-segments.js';

export interface ManifestIndexSegment {
  /** The index file (ix-NNNNNN.msxi). */
  file: string;
  /** The token segment it indexes (seg-NNNNNN.msxs). */
  segment: string;
  bytes: number;
  crc: number;
  /** Share of the segment's (sampled) tokens farther from every centroid than `threshold`. */
  drift: number;
}

export interface ManifestIndex {
  /** The codec file: the index of the build's sample (centroids and buckets). */
  file: string;
  bytes: number;
  crc: number;
  bits: 2 | 4;
  centroids: number;
  /** Tokens the codec was fitted on. */
  sample: number;
  /** Squared distance to the nearest centroid that 99% of the sample's tokens stay within. */
  threshold: number;
  /**
   * true: the token segments keep no tokens (`corpus index --drop-tokens`): the index is all that
   * is stored, and searches score on the decoded residuals. Absent: tokens kept.
   */
  dropped?: true;
  segments: ManifestIndexSegment[];
}

/** Checks the index field of a MANIFEST (`segments`: its token segment names, in order). */
export function validateIndex(
  file: string,
  raw: unknown,
  generation: number,
  segments: readonly string[],
  bad: (field: string, rule: string, value: unknown) => never,
): ManifestIndex {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) bad('index', 'an object', raw);
  const o = raw as Record<string, unknown>;
  const count = (field: string, x: unknown, max = Number.MAX_SAFE_INTEGER): number => {
    if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0 || x > max)
      bad(field, `an integer in [0, ${max}]`, x);
    return x as number;
  };
  const name = (field: string, x: unknown): string => {
    const m = typeof x === 'string' ? INDEX_NAME.exec(x) : null;
    if (!m || Number(m[1]) < 1 || Number(m[1]) > generation || x !== indexName(Number(m[1]), Number(m[2])))
      bad(field, `an index file name ix-GGGGGG-NNNN.msxi of a generation 1..${generation}`, x);
    return x as string;
  };
  const share = (field: string, x: unknown): number => {
    if (typeof x !== 'number' || !(x >= 0 && x <= 1)) bad(field, 'a number in [0, 1]', x);
    return x as number;
  };
  if (o.bits !== 2 && o.bits !== 4) bad('index.bits', '2 or 4', o.bits);
  if (typeof o.threshold !== 'number' || !(o.threshold >= 0) || !Number.isFinite(o.threshold))
    bad('index.threshold', 'a finite number >= 0', o.threshold);
  if (!Array.isArray(o.segments)) bad('index.segments', 'an array', o.segments);
  const out: ManifestIndex = {
    file: name('index.file', o.file),
    bytes: count('index.bytes', o.bytes),
    crc: count('index.crc', o.crc, 0xffffffff),
    bits: o.bits as 2 | 4,
    centroids: count('index.centroids', o.centroids, 1 << 24),
    sample: count('index.sample', o.sample),
    threshold: o.threshold as number,
    ...(o.dropped === undefined ? {} : { dropped: o.dropped as true }),
    segments: [],
  };
  if (o.dropped !== undefined && o.dropped !== true) bad('index.dropped', 'true or absent', o.dropped);
  if (out.centroids < 1) bad('index.centroids', 'at least 1', out.centroids);
  const files = new Set([out.file]);
  let last = -1;
  (o.segments as unknown[]).forEach((x, i) => {
    const at = `index.segments[${i}]`;
    if (x === null || typeof x !== 'object' || Array.isArray(x)) bad(at, 'an object', x);
    const s = x as Record<string, unknown>;
    const seg = segments.indexOf(s.segment as string);
    if (typeof s.segment !== 'string' || seg < 0)
      bad(`${at}.segment`, 'a token segment this MANIFEST names', s.segment);
    if (seg <= last) bad(`${at}.segment`, "after the previous entry's segment (each once)", s.segment);
    last = seg;
    const f = name(`${at}.file`, s.file);
    if (files.has(f)) bad(`${at}.file`, 'an index file named once', f);
    files.add(f);
    out.segments.push({
      file: f,
      segment: s.segment as string,
      bytes: count(`${at}.bytes`, s.bytes),
      crc: count(`${at}.crc`, s.crc, 0xffffffff),
      drift: share(`${at}.drift`, s.drift),
    });
  });
  if (out.bytes < 64) throw new FormatError(file, 'MANIFEST field index.bytes is smaller than a header');
  return out;
}
