// Picks the CUDA kernel variant for a problem and computes its launch (grid, block, shared memory).
//
// The variant table is data: native/cuda/kernels/variants.json, written next to the kernels by their
// author, read at run time. Each entry names a kernel entry point, its element type, block shape,
// grid formula, dynamic shared memory and requirements; optional `when` / `priority` say in which
// regime it should win. When the file is missing or unreadable, the built-in table below (the same
// contract, transcribed from the launch contracts at the top of each .cu file) is used instead and
// `dispatchTable().warnings` says why.
//
// Selection: among variants of the problem's dtype whose requirements hold (dim multiple, dim range,
// compute capability, shared memory), take those whose `when` holds and pick the highest priority;
// when none does, the fallback variant of that dtype (the any-dim SIMT kernel). `{ variant: name }`
// forces one variant (benchmarks), still checked against its requirements.
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { InvalidArgumentError } from '../errors.js';
import type { FloatDType } from '../tensor.js';

/** A grid dimension, a shared-memory size or a query tile: a number or an integer formula. */
export type Formula = number | string;

export interface VariantRequirements {
  /** dim must be a multiple of this. */
  dimMultipleOf?: number;
  minDim?: number;
  maxDim?: number;
  /** Lowest compute capability [major, minor]. */
  minComputeCapability?: [number, number];
  /** Exact compute capabilities only (arch-specific cubins such as sm_90a). */
  computeCapabilities?: Array<[number, number]>;
}

export interface VariantWhen {
  /** Query slices = num_queries * ceil(max_query_length / 32). */
  minSlices?: number;
  maxSlices?: number;
  /** Total query tokens of the launch (num_queries * max_query_length). */
  minQueryTokens?: number;
  maxQueryTokens?: number;
}

export interface Variant {
  name: string;
  /** Entry point in the fatbins (defaults to name). */
  kernel: string;
  dtype: FloatDType;
  block: [number, number, number];
  grid: [Formula, Formula, Formula];
  smem: Formula;
  /** Queries per launch when the grid cannot cover all of them (e.g. grid.y <= 65535). */
  queryTile?: Formula;
  requires: VariantRequirements;
  when?: VariantWhen;
  priority: number;
  /** The any-dim variant used when no faster one applies. */
  fallback?: boolean;
}

export interface DispatchTable {
  variants: Variant[];
  /** Where the table came from: the path of variants.json, or 'built-in'. */
  source: string;
  warnings: string[];
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
  dtype: FloatDType;
}

/** What the dispatcher needs to know about the GPU. */
export interface DeviceCaps {
  computeCapability: [number, number];
  sms: number;
  smemOptin: number;
}

/** A launch as the native `score` / `bench` take it. */
export interface Launch {
  kernel: string;
  grid: [number, number, number];
  block: [number, number, number];
  smem: number;
  queryTile?: number;
  dtype: FloatDType;
}

// ---- formulas -------------------------------------------------------------------------------

type Vars = Record<string, number>;

function problemVars(p: Problem, caps: DeviceCaps): Vars {
  const slices = p.numQueries * Math.max(1, Math.ceil(p.maxQueryLength / 32));
  return {
    num_docs: p.numDocs,
    num_queries: p.numQueries,
    num_sms: caps.sms,
    dim: p.dim,
    max_query_length: p.maxQueryLength,
    max_doc_length: p.maxDocLength,
    slices,
    // shorthands of the repo's shape notation (Nq, Lq, Ld, d, B)
    B: p.numDocs,
    Nq: p.numQueries,
    Lq: p.maxQueryLength,
    Ld: p.maxDocLength,
    d: p.dim,
    sms: caps.sms,
  };
}

/**
 * Evaluates an integer formula: numbers, variables, + - * / (integer division, floor), parentheses,
 * min(a, b, ...), max(...), ceil_div(a, b). Throws on anything else.
 */
export function evaluateFormula(formula: Formula, vars: Vars): number {
  if (typeof formula === 'number') return formula;
  const tokens = formula.match(/\s*([A-Za-z_][A-Za-z0-9_]*|\d+|[-+*/(),])\s*/g)?.map((t) => t.trim()) ?? [];
  if (tokens.join('') !== formula.replace(/\s+/g, '')) throw new Error(`unsupported characters in formula '${formula}'`);
  let pos = 0;
  const peek = () => tokens[pos];
  const take = (want?: string) => {
    const t = tokens[pos++];
    if (t === undefined || (want !== undefined && t !== want)) throw new Error(`expected '${want ?? 'a term'}' in formula '${formula}'`);
    return t;
  };
  const expr = (): number => {
    let v = term();
    while (peek() === '+' || peek() === '-') v = take() === '+' ? v + term() : v - term();
    return v;
  };
  const term = (): number => {
    let v = factor();
    while (peek() === '*' || peek() === '/') {
      if (take() === '*') v *= factor();
      else {
        const div = factor();
        if (div === 0) throw new Error(`division by zero in formula '${formula}'`);
        v = Math.floor(v / div);
      }
    }
    return v;
  };
  const factor = (): number => {
    const t = take();
    if (t === '-') return -factor();
    if (t === '(') {
      const v = expr();
      take(')');
      return v;
    }
    if (/^\d+$/.test(t)) return Number(t);
    if (t === 'min' || t === 'max' || t === 'ceil_div') {
      take('(');
      const args = [expr()];
      while (peek() === ',') {
        take(',');
        args.push(expr());
      }
      take(')');
      if (t === 'ceil_div') {
        if (args.length !== 2 || args[1] === 0) throw new Error(`ceil_div takes two arguments, the second non-zero, in '${formula}'`);
        return Math.ceil(args[0] / args[1]);
      }
      return t === 'min' ? Math.min(...args) : Math.max(...args);
    }
    if (t in vars) return vars[t];
    throw new Error(`unknown name '${t}' in formula '${formula}' (known: ${Object.keys(vars).join(', ')})`);
  };
  const v = expr();
  if (pos !== tokens.length) throw new Error(`unexpected '${tokens[pos]}' in formula '${formula}'`);
  return v;
}

// ---- the table ------------------------------------------------------------------------------

const SM80: [number, number] = [8, 0];
const SM90A: Array<[number, number]> = [[9, 0]];
const DTYPES: FloatDType[] = ['float32', 'float16', 'bfloat16'];
const SUFFIX: Record<FloatDType, string> = { float32: 'f32', float16: 'f16', bfloat16: 'bf16' };

/** The launch contracts of native/cuda/kernels/*.cu, for when variants.json is absent. */
export function builtInVariants(): Variant[] {
  const v: Variant[] = [];
  for (const dtype of DTYPES) {
    v.push({
      name: `maxsim_simt_${SUFFIX[dtype]}`,
      kernel: `maxsim_simt_${SUFFIX[dtype]}`,
      dtype,
      block: [128, 1, 1],
      grid: ['num_docs', 'min(num_queries, 65535)', 1],
      smem: 0,
      queryTile: 65535,
      requires: {},
      priority: 0,
      fallback: true,
    });
  }
  for (const dtype of ['float16', 'bfloat16'] as const) {
    const s = SUFFIX[dtype];
    // mma.sync family: block 32*G*NGRP, persistent grid num_sms*CTAS, smem NGRP*(S*TN*(KD+8)*2+128).
    const mma = (tag: string, g: number, ngrp: number, tn: number, st: number, ctas: number, maxDim: number | undefined, when: VariantWhen, priority: number) =>
      v.push({
        name: `maxsim_mma_${tag}_${s}`,
        kernel: `maxsim_mma_${tag}_${s}`,
        dtype,
        block: [32 * g * ngrp, 1, 1],
        grid: [`num_sms * ${ctas}`, 1, 1],
        smem: ngrp * (st * tn * (128 + 8) * 2 + 128),
        requires: { dimMultipleOf: 8, minDim: 8, maxDim, minComputeCapability: SM80 },
        when,
        priority,
      });
    mma('g1', 1, 4, 16, 3, 4, 128, { maxSlices: 1 }, 20);
    mma('g4', 4, 2, 32, 4, 2, 128, { minSlices: 2, maxSlices: 4 }, 20);
    mma('g8', 8, 1, 64, 3, 2, 128, { minSlices: 5 }, 20);
    mma('ks', 4, 2, 16, 4, 2, undefined, {}, 10);
    // wgmma family (sm_90a only): block 128*(NCONS+1), grid num_sms, smem S*TN*256+1024.
    v.push({
      name: `maxsim_wgmma_n128_${s}`,
      kernel: `maxsim_wgmma_n128_${s}`,
      dtype,
      block: [384, 1, 1],
      grid: ['num_sms', 1, 1],
      smem: 4 * 128 * 256 + 1024,
      requires: { dimMultipleOf: 8, minDim: 8, maxDim: 128, computeCapabilities: SM90A },
      when: { minQueryTokens: 256 },
      priority: 30,
    });
    for (const [tag, ncons, tn, st] of [
      ['n128s6', 2, 128, 6],
      ['w3n128', 3, 128, 6],
      ['w4n64', 4, 64, 8],
    ] as const) {
      v.push({
        name: `maxsim_wgmma_${tag}_${s}`,
        kernel: `maxsim_wgmma_${tag}_${s}`,
        dtype,
        block: [128 * (ncons + 1), 1, 1],
        grid: ['num_sms', 1, 1],
        smem: st * tn * 256 + 1024,
        requires: { dimMultipleOf: 8, minDim: 8, maxDim: 128, computeCapabilities: SM90A },
        // selectable by name; the default regime choice above stays until benchmarks say otherwise
        when: { minQueryTokens: Number.MAX_SAFE_INTEGER },
        priority: 0,
      });
    }
  }
  return v;
}

function normalizeDtype(x: unknown): FloatDType | undefined {
  const s = String(x).toLowerCase();
  if (s === 'float32' || s === 'f32' || s === 'fp32') return 'float32';
  if (s === 'float16' || s === 'f16' || s === 'fp16' || s === 'half') return 'float16';
  if (s === 'bfloat16' || s === 'bf16') return 'bfloat16';
  return undefined;
}

function formulaOf(x: unknown): Formula | undefined {
  return typeof x === 'number' || typeof x === 'string' ? x : undefined;
}

/** Splits "(a, b, c)" at its top-level commas. */
function splitTriple(s: string): string[] {
  const inner = s.trim().replace(/^\(/, '').replace(/\)$/, '');
  const parts: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of inner) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (ch === ',' && depth === 0) {
      parts.push(cur.trim());
      cur = '';
    } else cur += ch;
  }
  parts.push(cur.trim());
  return parts;
}

function tripleOf(x: unknown): [Formula, Formula, Formula] | undefined {
  let parts: unknown[] | undefined;
  if (Array.isArray(x)) parts = x;
  else if (typeof x === 'number') parts = [x, 1, 1];
  else if (typeof x === 'string') parts = splitTriple(x);
  else if (x && typeof x === 'object') {
    const o = x as Record<string, unknown>;
    parts = [o.x ?? 1, o.y ?? 1, o.z ?? 1];
  }
  if (!parts || parts.length < 1 || parts.length > 3) return undefined;
  const f = parts.map((p) => (typeof p === 'string' && /^\d+$/.test(p.trim()) ? Number(p) : formulaOf(p)));
  while (f.length < 3) f.push(1);
  return f.every((p) => p !== undefined) ? (f as [Formula, Formula, Formula]) : undefined;
}

function ccOf(x: unknown): [number, number] | undefined {
  if (Array.isArray(x) && x.length === 2 && x.every((n) => Number.isInteger(n))) return [x[0], x[1]];
  if (typeof x === 'number') return [Math.floor(x / 10), x % 10];
  if (typeof x === 'string') {
    const m = /^(?:sm_?|compute_?)?(\d)(\d)a?$/.exec(x.trim());
    if (m) return [Number(m[1]), Number(m[2])];
    const d = /^(\d+)\.(\d+)$/.exec(x.trim());
    if (d) return [Number(d[1]), Number(d[2])];
  }
  return undefined;
}

function num(o: Record<string, unknown>, ...keys: string[]): number | undefined {
  for (const k of keys) if (typeof o[k] === 'number') return o[k] as number;
  return undefined;
}

/** One entry of variants.json; throws with the reason when it cannot be understood. */
function parseVariant(name: string, raw: Record<string, unknown>): Variant {
  const dtype = normalizeDtype(raw.dtype);
  if (!dtype) throw new Error(`variant ${name}: dtype ${JSON.stringify(raw.dtype)} is not float32/float16/bfloat16`);
  const blockF = tripleOf(raw.block);
  const block = blockF?.map((b) => (typeof b === 'number' ? b : Number.NaN)) as [number, number, number] | undefined;
  if (!block || block.some((b) => !Number.isInteger(b) || b < 1)) throw new Error(`variant ${name}: block ${JSON.stringify(raw.block)} is not 1-3 positive integers`);
  const grid = tripleOf(raw.grid);
  if (!grid) throw new Error(`variant ${name}: grid ${JSON.stringify(raw.grid)} is not 1-3 numbers or formulas`);
  const smem = formulaOf(raw.smem ?? raw.dynamicSmem ?? raw.dynamic_smem ?? raw.smem_bytes ?? 0);
  if (smem === undefined) throw new Error(`variant ${name}: smem ${JSON.stringify(raw.smem)} is not a number or formula`);
  const req = (raw.requires ?? raw.requirements ?? {}) as Record<string, unknown>;
  const requires: VariantRequirements = {};
  const mult = num(req, 'dimMultipleOf', 'dim_multiple_of', 'dimMultiple');
  if (mult !== undefined) requires.dimMultipleOf = mult;
  const minDim = num(req, 'minDim', 'min_dim');
  if (minDim !== undefined) requires.minDim = minDim;
  const maxDim = num(req, 'maxDim', 'max_dim');
  if (maxDim !== undefined) requires.maxDim = maxDim;
  const arch = req.arch ?? req.sm ?? raw.arch;
  if (typeof arch === 'string' && /a$/.test(arch.trim())) {
    const cc = ccOf(arch);
    if (cc) requires.computeCapabilities = [cc];
  } else {
    const cc = ccOf(req.minComputeCapability ?? req.min_cc ?? req.minCC ?? arch);
    if (cc) requires.minComputeCapability = cc;
  }
  if (Array.isArray(req.computeCapabilities)) {
    requires.computeCapabilities = req.computeCapabilities.map(ccOf).filter((c): c is [number, number] => c !== undefined);
  }
  const when = (raw.when ?? undefined) as VariantWhen | undefined;
  const queryTile = formulaOf(raw.queryTile ?? raw.query_tile);
  return {
    name,
    kernel: typeof raw.kernel === 'string' ? raw.kernel : name,
    dtype,
    block,
    grid,
    smem,
    queryTile,
    requires,
    when,
    priority: typeof raw.priority === 'number' ? raw.priority : 0,
    fallback: raw.fallback === true,
  };
}

/** Reads variants.json: { variants: [ {name, ...} ] }, [ {name, ...} ] or { name: {...} }. */
export function parseVariantsJson(text: string): { variants: Variant[]; warnings: string[] } {
  const json = JSON.parse(text) as unknown;
  const list: Array<[string, Record<string, unknown>]> = [];
  const root = json && typeof json === 'object' && !Array.isArray(json) && 'variants' in json ? (json as { variants: unknown }).variants : json;
  if (Array.isArray(root)) {
    for (const e of root) if (e && typeof e === 'object') list.push([String((e as { name?: unknown }).name ?? (e as { kernel?: unknown }).kernel), e as Record<string, unknown>]);
  } else if (root && typeof root === 'object') {
    for (const [k, e] of Object.entries(root)) if (e && typeof e === 'object' && !k.startsWith('$') && !k.startsWith('_')) list.push([k, e as Record<string, unknown>]);
  }
  const variants: Variant[] = [];
  const warnings: string[] = [];
  for (const [name, raw] of list) {
    try {
      variants.push(parseVariant(name, raw));
    } catch (e) {
      warnings.push((e as Error).message);
    }
  }
  // Every dtype needs a fallback: the dim-unrestricted variant with the lowest priority.
  for (const dtype of DTYPES) {
    const mine = variants.filter((v) => v.dtype === dtype);
    if (mine.length > 0 && !mine.some((v) => v.fallback)) {
      const open = mine.filter((v) => v.requires.dimMultipleOf === undefined && v.requires.maxDim === undefined && v.requires.minDim === undefined);
      if (open.length > 0) open.sort((a, b) => a.priority - b.priority)[0].fallback = true;
    }
  }
  return { variants, warnings };
}

/** native/cuda/kernels/variants.json, found from this module (dist/src/backends/ -> package root). */
export const variantsPath = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'native', 'cuda', 'kernels', 'variants.json');

let table: DispatchTable | undefined;

/** The variant table (read once). */
export function dispatchTable(): DispatchTable {
  if (table) return table;
  let text: string | undefined;
  try {
    text = readFileSync(variantsPath, 'utf8');
  } catch {
    table = { variants: builtInVariants(), source: 'built-in', warnings: [`${variantsPath} not found; using the built-in variant table`] };
    return table;
  }
  try {
    const parsed = parseVariantsJson(text);
    if (parsed.variants.length === 0) throw new Error('no usable variant in it');
    table = { variants: parsed.variants, source: variantsPath, warnings: parsed.warnings };
  } catch (e) {
    table = { variants: builtInVariants(), source: 'built-in', warnings: [`${variantsPath}: ${(e as Error).message}; using the built-in variant table`] };
  }
  return table;
}

/** Replaces the table (tests). */
export function setDispatchTable(t: DispatchTable | undefined): void {
  table = t;
}

// ---- selection ------------------------------------------------------------------------------

function ccAtLeast(cc: [number, number], min: [number, number]): boolean {
  return cc[0] > min[0] || (cc[0] === min[0] && cc[1] >= min[1]);
}

/** Why `v` cannot run this problem on this device, or undefined when it can. */
export function unmetRequirement(v: Variant, p: Problem, caps: DeviceCaps): string | undefined {
  const r = v.requires;
  if (v.dtype !== p.dtype) return `it reads ${v.dtype} tokens, not ${p.dtype}`;
  if (r.dimMultipleOf !== undefined && p.dim % r.dimMultipleOf !== 0) return `it needs dim % ${r.dimMultipleOf} == 0 (dim is ${p.dim})`;
  if (r.minDim !== undefined && p.dim < r.minDim) return `it needs dim >= ${r.minDim} (dim is ${p.dim})`;
  if (r.maxDim !== undefined && p.dim > r.maxDim) return `it needs dim <= ${r.maxDim} (dim is ${p.dim})`;
  const cc = caps.computeCapability;
  if (r.minComputeCapability && !ccAtLeast(cc, r.minComputeCapability)) return `it needs compute capability >= ${r.minComputeCapability.join('.')} (the GPU has ${cc.join('.')})`;
  if (r.computeCapabilities && !r.computeCapabilities.some((c) => c[0] === cc[0] && c[1] === cc[1])) {
    return `it runs only on compute capability ${r.computeCapabilities.map((c) => c.join('.')).join(' or ')} (the GPU has ${cc.join('.')})`;
  }
  try {
    const smem = evaluateFormula(v.smem, problemVars(p, caps));
    if (smem > caps.smemOptin) return `it needs ${smem} bytes of shared memory (the GPU allows ${caps.smemOptin})`;
  } catch (e) {
    return (e as Error).message;
  }
  return undefined;
}

function whenHolds(w: VariantWhen | undefined, p: Problem): boolean {
  if (!w) return true;
  const slices = p.numQueries * Math.max(1, Math.ceil(p.maxQueryLength / 32));
  const qTokens = p.numQueries * p.maxQueryLength;
  if (w.minSlices !== undefined && slices < w.minSlices) return false;
  if (w.maxSlices !== undefined && slices > w.maxSlices) return false;
  if (w.minQueryTokens !== undefined && qTokens < w.minQueryTokens) return false;
  if (w.maxQueryTokens !== undefined && qTokens > w.maxQueryTokens) return false;
  return true;
}

/** The variant for a problem: `variant` forces one by name, otherwise the best that applies. */
export function selectVariant(p: Problem, caps: DeviceCaps, variant?: string, t: DispatchTable = dispatchTable()): Variant {
  if (variant !== undefined) {
    const v = t.variants.find((x) => x.name === variant);
    if (!v) throw new InvalidArgumentError('variant', `one of ${t.variants.map((x) => x.name).join(', ')}`, JSON.stringify(variant));
    const why = unmetRequirement(v, p, caps);
    if (why) throw new InvalidArgumentError('variant', `a variant that can run this problem (${v.name} cannot: ${why})`, JSON.stringify(variant));
    return v;
  }
  const usable = t.variants.filter((v) => unmetRequirement(v, p, caps) === undefined);
  const preferred = usable.filter((v) => whenHolds(v.when, p)).sort((a, b) => b.priority - a.priority);
  const pick = preferred[0] ?? usable.find((v) => v.fallback) ?? usable[0];
  if (!pick) {
    throw new InvalidArgumentError('queries/docs', `a problem some CUDA kernel variant supports (table: ${t.source})`, `dtype ${p.dtype}, dim ${p.dim}`);
  }
  return pick;
}

/** Grid, block and shared memory of `v` for problem `p`. Every grid dimension is at least 1. */
export function launchFor(v: Variant, p: Problem, caps: DeviceCaps): Launch {
  const vars = problemVars(p, caps);
  const grid = v.grid.map((g) => Math.max(1, evaluateFormula(g, vars))) as [number, number, number];
  const launch: Launch = { kernel: v.kernel, grid, block: [...v.block], smem: evaluateFormula(v.smem, vars), dtype: v.dtype };
  if (v.queryTile !== undefined) {
    const tile = evaluateFormula(v.queryTile, vars);
    if (tile < p.numQueries) launch.queryTile = Math.max(1, tile);
  }
  return launch;
}
