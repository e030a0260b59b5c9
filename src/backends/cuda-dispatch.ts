// Picks the CUDA kernel variant for a problem and computes its launch (grid, block, shared memory).
//
// The launch contracts are data: native/cuda/kernels/variants.json, one entry per kernel entry point
// (see VariantEntry), validated once when first read. The file is generated from the kernel registry
// (native/cuda/kernels/maxsim_registry.h, the rows the kernel sources instantiate) by variants_gen.cc. The selection rules are plain code, below in
// selectVariant: TypeScript decides, the native code launches what it is given.
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BackendUnavailableError, FormatError, InvalidArgumentError } from '../errors.js';
import type { DType, FloatDType } from '../tensor.js';

export type Family = 'simt' | 'mma' | 'wgmma';

/**
 * Element types of device token sets: the host dtypes, plus 'fp8' (e4m3 codes with one float32 scale
 * per token), which exists on the GPU only (made by DeviceCorpus.quantize('fp8')).
 */
export type DeviceDType = DType | 'fp8';

/**
 * perPair: one CTA per (document, query), grid [num_docs, num_queries, 1], launched per tile of at
 * most 65535 queries (grid.y limit). persistent: grid [num_sms * ctasPerSm, 1, 1].
 */
export type GridSpec = { kind: 'perPair' } | { kind: 'persistent'; ctasPerSm: number };

/** One entry of variants.json. */
export interface VariantEntry {
  /** Kernel entry point in the fatbin. */
  name: string;
  family: Family;
  /**
   * Element type of the tokens it reads (queries and documents alike; int8 / fp8 with per-token scales).
   * In the file a list stands for one variant per type, named with `{dt}` (expandVariantEntries).
   */
  dtype: DeviceDType;
  /** Fatbin file (build/kernels/) holding the kernel. */
  module: string;
  /** Compute capability [major, minor]: `min` (that or newer) or `exact` (arch-specific cubins, sm_90a). */
  arch: { min: [number, number] } | { exact: [number, number] };
  dim: { multipleOf?: number; min?: number; max?: number };
  block: [number, number, number];
  grid: GridSpec;
  /** Dynamic shared memory per CTA. */
  smemBytes: number;
  /** When it is the right choice (for people; the rules are in selectVariant). */
  regime: string;
  /** TMA variants: the box [elements of a token, tokens] of the documents' tensor map (its second parameter). */
  tmaBox?: [number, number];
  /** "document": 8-bit kernels that need one scale per document (DeviceCorpus.documentScales). */
  scales?: 'document';
}

export interface VariantRequirements {
  dimMultipleOf?: number;
  minDim?: number;
  maxDim?: number;
  /** Lowest compute capability [major, minor]. */
  minComputeCapability?: [number, number];
  /** Exact compute capabilities only (arch-specific cubins such as sm_90a). */
  computeCapabilities?: Array<[number, number]>;
  /** The documents' tokens share one scale per document. */
  documentScales?: boolean;
}

/** A validated variants.json entry. */
export interface Variant {
  name: string;
  /** Entry point in the fatbins (the name). */
  kernel: string;
  family: Family;
  dtype: DeviceDType;
  module: string;
  block: [number, number, number];
  grid: GridSpec;
  smem: number;
  requires: VariantRequirements;
  regime: string;
  /** TMA variants: the documents' tensor-map box [elements, tokens]. */
  tmaBox?: [number, number];
}

export interface DispatchTable {
  variants: Variant[];
  /** Where the table came from (the path of variants.json). */
  source: string;
}

/** The shape of one scoring call. */
export interface Problem {
  numQueries: number;
  /** Longest query (tokens). */
  maxQueryLength: number;
  /** Longest document (tokens). */
  maxDocLength: number;
  dim: number;
  numDocs: number;
  /** Tokens of all documents (their mean length picks the wgmma tile width); maxDocLength stands in when absent. */
  docTokens?: number;
  dtype: DeviceDType;
  /** 8-bit documents whose tokens share one scale per document (DeviceCorpus.documentScales). */
  documentScales?: boolean;
}

/** What the dispatcher needs to know about the GPU. */
export interface DeviceCaps {
  computeCapability: [number, number];
  sms: number;
  smemOptin: number;
  /** The driver encodes TMA tensor maps (cuTensorMapEncodeTiled); absent means it does not. */
  tensorMaps?: boolean;
}

/** The dispatcher's view of a device (its `info`, or any object with these fields). */
export function deviceCaps(info: DeviceCaps): DeviceCaps {
  return {
    computeCapability: info.computeCapability,
    sms: info.sms,
    smemOptin: info.smemOptin,
    tensorMaps: info.tensorMaps,
  };
}

/** A launch as the native `score` / `bench` take it. */
export interface Launch {
  kernel: string;
  grid: [number, number, number];
  block: [number, number, number];
  smem: number;
  queryTile?: number;
  dtype: DeviceDType;
  /** TMA variants: the runtime encodes the documents' tensor map with this box. */
  tmaBox?: [number, number];
  /** wgmma kernels: 1 takes the work units pass-inner (unitOrderFor), 0 pass-outer. */
  unitOrder?: 0 | 1;
}

const MAX_GRID_Y = 65535;
const SUFFIX: Record<FloatDType, string> = { float32: 'f32', float16: 'f16', bfloat16: 'bf16' };
const FIELDS = [
  'name',
  'family',
  'dtype',
  'module',
  'arch',
  'dim',
  'block',
  'grid',
  'smemBytes',
  'regime',
  'tmaBox',
  'scales',
];

// ---- the table ------------------------------------------------------------------------------

const isInt = (x: unknown, min: number): x is number => Number.isInteger(x) && (x as number) >= min;
const isObject = (x: unknown): x is Record<string, unknown> =>
  typeof x === 'object' && x !== null && !Array.isArray(x);
const isCC = (x: unknown): x is [number, number] =>
  Array.isArray(x) && x.length === 2 && x.every((n) => isInt(n, 0));

/** The suffix of each element type in kernel and module names (the `{dt}` of a variants.json entry). */
export const DTYPE_SUFFIX: Record<DeviceDType, string> = {
  float32: 'f32',
  float16: 'f16',
  bfloat16: 'bf16',
  int8: 'int8',
  fp8: 'fp8',
};

/**
 * variants.json states a kernel family once for all the element types it is built for: an entry whose
 * `dtype` is a list stands for one variant per element type, `{dt}` in its name and module replaced by
 * the type's suffix (DTYPE_SUFFIX), every other field shared. This returns the table with one entry per
 * kernel entry point (entries with one dtype unchanged), in the order of the file.
 */
export function expandVariantEntries(json: unknown, source = 'variants.json'): unknown {
  if (!Array.isArray(json)) return json;
  return json.flatMap((e: unknown) => {
    if (!isObject(e) || !Array.isArray(e.dtype)) return [e];
    const name = typeof e.name === 'string' ? e.name : '';
    const dtypes = e.dtype as unknown[];
    const known = Object.keys(DTYPE_SUFFIX);
    if (dtypes.length === 0 || !dtypes.every((d) => typeof d === 'string' && known.includes(d)))
      throw new FormatError(
        source,
        `variant ${name}: dtype must be one of ${known.join(', ')} or a non-empty list of them (got ${JSON.stringify(e.dtype)})`,
      );
    if (!name.includes('{dt}'))
      throw new FormatError(source, `variant ${name}: a name with {dt} when dtype is a list`);
    return dtypes.map((d) => {
      const sfx = DTYPE_SUFFIX[d as DeviceDType];
      return {
        ...e,
        name: name.replaceAll('{dt}', sfx),
        dtype: d,
        ...(typeof e.module === 'string' && { module: e.module.replaceAll('{dt}', sfx) }),
      };
    });
  });
}

/**
 * Validates the parsed variants.json (entries with a dtype list are expanded first:
 * expandVariantEntries); throws a FormatError naming the variant and field.
 */
export function parseVariants(raw: unknown, source = 'variants.json'): Variant[] {
  const json = expandVariantEntries(raw, source);
  if (!Array.isArray(json) || json.length === 0)
    throw new FormatError(source, 'expected a non-empty array of variants');
  const variants = json.map((e: unknown, i): Variant => {
    const named = isObject(e) && typeof e.name === 'string' && e.name !== '';
    const name = named ? (e.name as string) : `#${i}`;
    const bad = (field: string, expected: string, value?: unknown): never => {
      throw new FormatError(
        source,
        `variant ${name}: ${field} must be ${expected} (got ${JSON.stringify(value) ?? 'nothing'})`,
      );
    };
    if (!isObject(e)) return bad('the entry', 'an object', e);
    if (!named) bad('name', 'a non-empty string', e.name);
    for (const k of Object.keys(e))
      if (!FIELDS.includes(k)) bad(k, `absent (fields: ${FIELDS.join(', ')})`, e[k]);
    const { family, dtype, module, arch, dim, block, grid, smemBytes, regime, tmaBox, scales } = e;
    if (family !== 'simt' && family !== 'mma' && family !== 'wgmma')
      bad('family', 'simt, mma or wgmma', family);
    if (
      dtype !== 'float32' &&
      dtype !== 'float16' &&
      dtype !== 'bfloat16' &&
      dtype !== 'int8' &&
      dtype !== 'fp8'
    )
      bad('dtype', 'float32, float16, bfloat16, int8 or fp8', dtype);
    if (typeof module !== 'string' || !module.endsWith('.fatbin'))
      bad('module', 'a .fatbin file name', module);
    const archKeys = isObject(arch) ? Object.keys(arch) : [];
    if (
      !isObject(arch) ||
      archKeys.length !== 1 ||
      !['min', 'exact'].includes(archKeys[0]) ||
      !isCC(arch[archKeys[0]])
    )
      bad('arch', '{ "min": [major, minor] } or { "exact": [major, minor] }', arch);
    if (
      !isObject(dim) ||
      Object.entries(dim).some(([k, n]) => !['multipleOf', 'min', 'max'].includes(k) || !isInt(n, 1)) ||
      (dim.min as number) > (dim.max as number)
    )
      bad('dim', '{ "multipleOf"?, "min"?, "max"? } of positive integers with min <= max', dim);
    if (!Array.isArray(block) || block.length !== 3 || !block.every((b) => isInt(b, 1)))
      bad('block', '[x, y, z] of positive integers', block);
    const gridOk =
      isObject(grid) &&
      ((grid.kind === 'perPair' && Object.keys(grid).length === 1) ||
        (grid.kind === 'persistent' && isInt(grid.ctasPerSm, 1) && Object.keys(grid).length === 2));
    if (!gridOk) bad('grid', '{ "kind": "perPair" } or { "kind": "persistent", "ctasPerSm": k >= 1 }', grid);
    if (!isInt(smemBytes, 0)) bad('smemBytes', 'a non-negative integer', smemBytes);
    if (typeof regime !== 'string') bad('regime', 'a string', regime);
    if (
      tmaBox !== undefined &&
      (!Array.isArray(tmaBox) || tmaBox.length !== 2 || !tmaBox.every((n) => isInt(n, 1) && n <= 256))
    )
      bad('tmaBox', '[elements, tokens], each 1-256', tmaBox);
    if (scales !== undefined && (scales !== 'document' || (dtype !== 'int8' && dtype !== 'fp8')))
      bad('scales', '"document", on an int8 or fp8 variant', scales);
    const d = dim as VariantEntry['dim'];
    const a = arch as VariantEntry['arch'];
    return {
      name,
      kernel: name,
      family: family as Family,
      dtype: dtype as DeviceDType,
      module: module as string,
      block: [...(block as number[])] as [number, number, number],
      grid: { ...(grid as GridSpec) },
      smem: smemBytes as number,
      requires: {
        ...(d.multipleOf !== undefined && { dimMultipleOf: d.multipleOf }),
        ...(d.min !== undefined && { minDim: d.min }),
        ...(d.max !== undefined && { maxDim: d.max }),
        ...('min' in a ? { minComputeCapability: [...a.min] } : { computeCapabilities: [[...a.exact]] }),
        ...(scales === 'document' && { documentScales: true }),
      } as VariantRequirements,
      regime: regime as string,
      ...(tmaBox !== undefined && { tmaBox: [...(tmaBox as number[])] as [number, number] }),
    };
  });
  const seen = new Set<string>();
  for (const v of variants) {
    if (seen.has(v.name)) throw new FormatError(source, `variant ${v.name}: name appears twice`);
    seen.add(v.name);
  }
  for (const dtype of new Set(variants.map((v) => v.dtype)))
    if (!variants.some((v) => v.dtype === dtype && v.family === 'simt'))
      throw new FormatError(source, `no simt (any-dim fallback) variant for ${dtype}`);
  return variants;
}

/** native/cuda/kernels/variants.json, found from this module (dist/src/backends/ -> package root). */
export const variantsPath = resolve(
  dirname(fileURLToPath(import.meta.url)),
  '..',
  '..',
  '..',
  'native',
  'cuda',
  'kernels',
  'variants.json',
);

/** Reads and validates a variant table; a missing file is a broken install. */
export function readDispatchTable(path: string = variantsPath): DispatchTable {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new BackendUnavailableError(
      `CUDA kernel table ${path} cannot be read (${(e as Error).message}): the maxsim install is broken; reinstall maxsim or rebuild it: \`node node_modules/maxsim/scripts/build-native.mjs\``,
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new FormatError(path, `not valid JSON (${(e as Error).message})`);
  }
  return { variants: parseVariants(json, path), source: path };
}

let table: DispatchTable | undefined;

/** The table of variants.json (read and validated once). */
export function dispatchTable(): DispatchTable {
  table ??= readDispatchTable();
  return table;
}

// ---- selection ------------------------------------------------------------------------------

/**
 * Why `v` cannot run this problem on this device, or undefined when it can. `kernels` (the entry points
 * the loaded fatbins hold, when the driver can list them) excludes variants whose kernel is missing.
 */
export function unmetRequirement(
  v: Variant,
  p: Problem,
  caps: DeviceCaps,
  kernels?: ReadonlySet<string>,
): string | undefined {
  const r = v.requires;
  const [major, minor] = caps.computeCapability;
  const cc = `${major}.${minor}`;
  if (v.dtype !== p.dtype) return `it reads ${v.dtype} tokens, not ${p.dtype}`;
  if (r.documentScales && !p.documentScales)
    return "it needs one scale per document (quantize with { scales: 'document' })";
  if (r.dimMultipleOf !== undefined && p.dim % r.dimMultipleOf !== 0)
    return `it needs dim % ${r.dimMultipleOf} == 0 (dim is ${p.dim})`;
  if (r.minDim !== undefined && p.dim < r.minDim) return `it needs dim >= ${r.minDim} (dim is ${p.dim})`;
  if (r.maxDim !== undefined && p.dim > r.maxDim) return `it needs dim <= ${r.maxDim} (dim is ${p.dim})`;
  const min = r.minComputeCapability;
  if (min && (major < min[0] || (major === min[0] && minor < min[1])))
    return `it needs compute capability >= ${min.join('.')} (the GPU has ${cc})`;
  const exact = r.computeCapabilities;
  if (exact && !exact.some((c) => c[0] === major && c[1] === minor))
    return `it runs only on compute capability ${exact.map((c) => c.join('.')).join(' or ')} (the GPU has ${cc})`;
  if (kernels && kernels.size > 0 && !kernels.has(v.kernel))
    return `its kernel ${v.kernel} is not in the loaded fatbins`;
  if (v.smem > caps.smemOptin)
    return `it needs ${v.smem} bytes of shared memory (the GPU allows ${caps.smemOptin})`;
  if (v.tmaBox && !caps.tensorMaps)
    return 'it reads the documents through a TMA tensor map, and the driver lacks cuTensorMapEncodeTiled';
  return undefined;
}

/**
 * A wgmma kind preceded by its TMA twin: the same kernel with the documents read through a tensor map
 * by one producer lane instead of cp.async by the whole producer warpgroup (the 8-bit twins copy the
 * documents' scales with the lanes of one producer warp). H200: 1,128,300,128,100000
 * 2.04-2.06 vs 2.28-2.32 ms on one machine, 2.20 vs 2.22 on another; 1,1024,1024,128,10000 4.13-4.17
 * vs 4.25-4.26 (bench/NOTES.md, 'TMA document stream'). The plain kernel serves where the driver cannot encode
 * tensor maps.
 */
const withTma = (kind: string) => [kind.replace(/^wgmma_/, 'wgmma_tma_'), kind];

/**
 * int8 x int8 (maxsim_int8.cu) and fp8 e4m3 x e4m3 (maxsim_fp8.cu), as variant kinds best first:
 * mma.sync m16n8k32 reads 16-byte rows, so dim % 16 == 0. The mma.sync rules apply on every GPU (the
 * fp8 mma variants run on compute capability 9.0 only: elsewhere the SIMT fallback takes over). Many
 * query rows on compute capability 9.0 take the sm_90a wgmma variants, through TMA where the driver
 * encodes tensor maps.
 */
function preferred8BitKinds(p: Problem, caps: DeviceCaps): string[] {
  const rows32 = p.numQueries * Math.ceil(p.maxQueryLength / 32);
  if (p.dim % 16 !== 0 || rows32 === 0) return ['simt'];
  if (p.dim > 128) return ['mma_ks'];
  if (rows32 === 1) return ['mma_g1'];
  if (rows32 <= 4) return ['mma_g4'];
  // Many query rows (long queries, all pairs) on compute capability 9.0: wgmma, measured on the H200
  // at 1,1024,1024,128,10000 as int8 4.34 ms vs mma g8 5.26, fp8 3.74 vs 11.1 (bench/NOTES.md, 'mma.sync or wgmma').
  if (caps.computeCapability[0] === 9 && caps.computeCapability[1] === 0) {
    // The TMA twins first (H200, three rounds at 1,1024,1024,128,10000: int8 2.78-2.95 vs 2.94-2.96 ms,
    // fp8 2.56-2.74 vs 2.64-2.87; 32,32,300,128,10000 int8 1.089 vs 1.114 for w3m2n64, fp8 1.057 vs
    // 1.071; 1,256,256,128,10000 int8 0.241 vs 0.261 for w2m2n64; bench/NOTES.md, '8-bit through TMA').
    // Documents with one scale each: first the document-scale twins, which multiply once per row and
    // document instead of once per value (bench/NOTES.md, 'Document scales').
    const ds = (kinds: string[]) =>
      p.documentScales ? [kinds[0].replace(/^wgmma_tma_/, 'wgmma_tma_ds_'), ...kinds] : kinds;
    if (longDocuments(p)) return ds(withTma('wgmma_w2m2n128'));
    // Without tensor maps, shorter documents take three consumer warpgroups (384 query rows per pass
    // instead of 256) when the extra padding of the query rows stays within 15%. H200,
    // 32,32,300,128,10000: fp8 1.071 vs 1.168 ms and 1.101 vs 1.172 in two runs; int8, since
    // it converts with I2FP, 1.113 vs 1.149. At ColPali the 128-token tiles win (fp8 3.35 vs
    // 3.08). bench/NOTES.md, 'Consumer warpgroups and tile width' and 'Format and exact conversion'.
    const slices = p.numQueries * Math.ceil(p.maxQueryLength / 16);
    const padded = (perPass: number) => Math.ceil(slices / perPass) * perPass;
    const plain = padded(24) <= 1.15 * padded(16) ? 'wgmma_w3m2n64' : 'wgmma_w2m2n64';
    return ds(['wgmma_tma_w2m2n64', plain]);
  }
  return ['mma_g8'];
}

/**
 * Whether the many-rows wgmma kernels take 128-token document tiles (w2m2n128) rather than 64: for
 * long documents the wider tile halves the per-tile work of the consumers (H200, 1,1024,1024,128,10000:
 * float16 4.79 vs 5.02 ms, int8 3.21 vs 3.82, fp8 2.87 vs 3.44), while at 300 tokens its padding
 * (384 of 300 against 320) loses (32,32,300,128,10000: float16 1.63 vs 1.44, int8 1.46 vs 1.31).
 * Rule: a mean length of at least 512 tokens, and the longest document padded to 128 within 5% of its
 * padding to 64.
 */
function longDocuments(p: Problem): boolean {
  const mean = p.docTokens !== undefined && p.numDocs > 0 ? p.docTokens / p.numDocs : p.maxDocLength;
  const L = p.maxDocLength;
  return mean >= 512 && Math.ceil(L / 128) * 128 <= 1.05 * Math.ceil(L / 64) * 64;
}

/**
 * The variant names the rules pick, best first (the first that can run is taken):
 * maxsim_<kind>_<dtype suffix>, or maxsim_{int8,fp8}_<kind>.
 */
export function preferredVariantNames(p: Problem, caps: DeviceCaps): string[] {
  if (p.dtype === 'int8' || p.dtype === 'fp8')
    return preferred8BitKinds(p, caps).map((kind) => `maxsim_${p.dtype}_${kind}`);
  const suffix = SUFFIX[p.dtype];
  return preferredKinds(p, caps).map((kind) => `maxsim_${kind}_${suffix}`);
}

/** The rules for the float dtypes, as variant kinds (names without the prefix and dtype suffix). */
function preferredKinds(p: Problem, caps: DeviceCaps): string[] {
  if (p.dtype === 'float32' || p.dim % 8 !== 0) return ['simt'];
  if (p.dim > 128) return ['mma_ks'];
  // query rows in 32-token (mma) and 16-token (wgmma) tiles
  const rows32 = p.numQueries * Math.ceil(p.maxQueryLength / 32);
  const rows16 = p.numQueries * Math.ceil(p.maxQueryLength / 16);
  if (rows32 === 0) return ['simt']; // no query tokens at all
  // One 32-token query slice (memory-bound): 32-token document tiles at 2 CTAs per SM where two of
  // their 105 KB fit on an SM (compute capability 9.x: 228 KB; H200 1,32,128,128,100000 0.760 vs
  // 0.790 ms for the 16-token tiles at 4 CTAs/SM, bench/NOTES.md, '32-token g1 tiles'), else 16-token tiles.
  if (rows32 === 1) return caps.computeCapability[0] === 9 ? ['mma_g1t32', 'mma_g1'] : ['mma_g1'];
  // the sm_90a (wgmma) cubins run on compute capability 9.0 only
  if (caps.computeCapability[0] === 9 && caps.computeCapability[1] === 0) {
    if (rows16 > 8) return withTma(longDocuments(p) ? 'wgmma_w2m2n128' : 'wgmma_w2m2n64');
    // Up to 128 query rows: the ping-pong variants, whose two consumer warpgroups take alternate
    // documents (H200, 100000 documents of 300 tokens: Lq 64 2.14 vs 2.81 ms with n128, Lq 128 2.60
    // vs 2.90; bench/NOTES.md, 'Ping-pong'). They need a few documents per CTA to keep both groups busy.
    if (p.numDocs < 4 * caps.sms) return withTma('wgmma_n128');
    return withTma(rows16 <= 4 ? 'wgmma_pp_m1n64' : 'wgmma_pp_m2n64');
  }
  return [rows32 <= 4 ? 'mma_g4' : 'mma_g8'];
}

/**
 * The variant for a problem: `variant` forces one by name (it must exist and fit); otherwise the rule's
 * choice, or the SIMT variant of the dtype when that one cannot run here (missing kernel, arch, smem).
 */
export function selectVariant(
  p: Problem,
  caps: DeviceCaps,
  variant?: string,
  t: DispatchTable = dispatchTable(),
  kernels?: ReadonlySet<string>,
): Variant {
  if (variant !== undefined) {
    const v = t.variants.find((x) => x.name === variant);
    if (!v)
      throw new InvalidArgumentError(
        'variant',
        `one of ${t.variants.map((x) => x.name).join(', ')}`,
        JSON.stringify(variant),
      );
    const why = unmetRequirement(v, p, caps, kernels);
    if (why)
      throw new InvalidArgumentError(
        'variant',
        `a variant that can run this problem (${v.name} cannot: ${why})`,
        JSON.stringify(variant),
      );
    return v;
  }
  const fits = (v: Variant) => unmetRequirement(v, p, caps, kernels) === undefined;
  const byName = (name: string) => t.variants.find((v) => v.name === name && fits(v));
  const pick =
    preferredVariantNames(p, caps)
      .map(byName)
      .find((v) => v !== undefined) ??
    t.variants.find((v) => v.family === 'simt' && v.dtype === p.dtype && fits(v));
  if (!pick)
    throw new InvalidArgumentError(
      'queries/docs',
      `a problem some CUDA kernel variant supports (table: ${t.source})`,
      `dtype ${p.dtype}, dim ${p.dim}`,
    );
  return pick;
}

/** Grid, block and shared memory of `v` for `p`; every grid dimension is at least 1. */
export function launchFor(v: Variant, p: Problem, caps: DeviceCaps): Launch {
  const perPair = v.grid.kind === 'perPair';
  const launch: Launch = {
    kernel: v.kernel,
    grid:
      v.grid.kind === 'persistent'
        ? [Math.max(1, caps.sms * v.grid.ctasPerSm), 1, 1]
        : [Math.max(1, p.numDocs), Math.max(1, Math.min(p.numQueries, MAX_GRID_Y)), 1],
    block: [...v.block],
    smem: v.smem,
    dtype: v.dtype,
  };
  // perPair: one launch per tile of 65535 queries (the runtime sets query_tile_offset for each)
  if (perPair && p.numQueries > MAX_GRID_Y) launch.queryTile = MAX_GRID_Y;
  if (v.tmaBox) launch.tmaBox = [...v.tmaBox];
  if (v.family === 'wgmma') launch.unitOrder = unitOrderFor();
  return launch;
}

/**
 * The wgmma scoring kernels' work-unit order: 1, pass-inner (unit = document group x pass, the pass
 * fastest), so the CTAs of a wave stream the same documents in different passes of the queries and
 * all but the first read them from L2; each CTA otherwise re-read the corpus from DRAM once per pass
 * (ncu at 128,32,128,128,100000: L2 hit rate 25.6%, 2.0 TB/s of DRAM). The kernel takes it only where
 * no query's slices span passes (and not under ping-pong); elsewhere it keeps the pass-outer order.
 * MAXSIM_UNIT_ORDER=0 restores the old order for benchmarks (bench/NOTES.md, 'TMA document stream').
 */
export function unitOrderFor(): 0 | 1 {
  return process.env.MAXSIM_UNIT_ORDER === '0' ? 0 : 1;
}
