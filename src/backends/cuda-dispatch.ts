// Picks the CUDA kernel variant for a problem and computes its launch (grid, block, shared memory).
//
// The variant table is data: native/cuda/kernels/variants.json, written next to the kernels by their
// author and read at run time. Each entry names a kernel entry point, its element type, block shape,
// grid formula ("[num_sms * 4, 1, 1]"), dynamic shared memory, requirements ("dim % 8 == 0 &&
// 8 <= dim <= 128", arch "sm_90a") and a dispatch condition ("sm_90a: nq*ceil(Lq/16) > 8"). When the
// file is missing or unreadable, the built-in table below (the same contract, transcribed from
// variants.json) is used instead and `dispatchTable().warnings` says why.
//
// Selection: among variants of the problem's dtype whose requirements hold (dim multiple, dim range,
// compute capability, shared memory, kernel present in the loaded fatbins), the first whose dispatch
// condition holds (highest priority first, then table order); when none does, the fallback variant of
// that dtype (the any-dim SIMT kernel). `{ variant: name }` forces one variant (benchmarks), still
// checked against its requirements.
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
  /**
   * When the dispatcher picks it: a condition over the problem (see problemVars), e.g.
   * "wgmma == 1 && nq*ceil(Lq/16) > 8". Absent: never picked automatically (name it to use it).
   */
  when?: string;
  /** Higher wins when several conditions hold (default 0; then table order). */
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

/** The names a formula or condition may use. */
export function problemVars(p: Problem, caps: DeviceCaps): Vars {
  const [major, minor] = caps.computeCapability;
  return {
    num_docs: p.numDocs,
    num_queries: p.numQueries,
    query_tile_offset: 0,
    num_sms: caps.sms,
    dim: p.dim,
    max_query_length: p.maxQueryLength,
    max_doc_length: p.maxDocLength,
    cc_major: major,
    cc_minor: minor,
    // the sm_90a cubins (wgmma) run on compute capability 9.0 only
    wgmma: major === 9 && minor === 0 ? 1 : 0,
    // the repo's shape notation (Nq, Lq, Ld, d, B) and short forms
    B: p.numDocs,
    Nq: p.numQueries,
    nq: p.numQueries,
    Lq: p.maxQueryLength,
    Ld: p.maxDocLength,
    d: p.dim,
    sms: caps.sms,
  };
}

/**
 * Evaluates a formula or condition: numbers, names, + - * / (real division), parentheses, comparisons
 * (< <= > >= == !=, chained as in "1 < x <= 4"), && and ||, and the functions min, max, ceil, floor,
 * ceil_div(a, b). Conditions evaluate to 1 or 0. Throws on anything else.
 */
export function evaluateFormula(formula: Formula, vars: Vars): number {
  if (typeof formula === 'number') return formula;
  const tokens =
    formula
      .match(/\s*([A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?|<=|>=|==|!=|&&|\|\||[-+*/(),<>])\s*/g)
      ?.map((t) => t.trim()) ?? [];
  if (tokens.join('') !== formula.replace(/\s+/g, ''))
    throw new Error(`unsupported characters in formula '${formula}'`);
  let pos = 0;
  const peek = () => tokens[pos];
  const take = (want?: string) => {
    const t = tokens[pos++];
    if (t === undefined || (want !== undefined && t !== want))
      throw new Error(`expected '${want ?? 'a term'}' in formula '${formula}'`);
    return t;
  };
  const or = (): number => {
    let v = and();
    while (peek() === '||') {
      take();
      const r = and();
      v = v || r ? 1 : 0;
    }
    return v;
  };
  const and = (): number => {
    let v = compare();
    while (peek() === '&&') {
      take();
      const r = compare();
      v = v && r ? 1 : 0;
    }
    return v;
  };
  const compare = (): number => {
    let left = sum();
    let result: number | undefined;
    while (['<', '<=', '>', '>=', '==', '!='].includes(peek())) {
      const op = take();
      const right = sum();
      const holds =
        op === '<'
          ? left < right
          : op === '<='
            ? left <= right
            : op === '>'
              ? left > right
              : op === '>='
                ? left >= right
                : op === '=='
                  ? left === right
                  : left !== right;
      result = (result ?? 1) && holds ? 1 : 0;
      left = right;
    }
    return result ?? left;
  };
  const sum = (): number => {
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
        v /= div;
      }
    }
    return v;
  };
  const factor = (): number => {
    const t = take();
    if (t === '-') return -factor();
    if (t === '(') {
      const v = or();
      take(')');
      return v;
    }
    if (/^\d/.test(t)) return Number(t);
    if (['min', 'max', 'ceil', 'floor', 'ceil_div'].includes(t)) {
      take('(');
      const args = [or()];
      while (peek() === ',') {
        take(',');
        args.push(or());
      }
      take(')');
      if (t === 'ceil' || t === 'floor') {
        if (args.length !== 1) throw new Error(`${t} takes one argument in '${formula}'`);
        return t === 'ceil' ? Math.ceil(args[0]) : Math.floor(args[0]);
      }
      if (t === 'ceil_div') {
        if (args.length !== 2 || args[1] === 0)
          throw new Error(`ceil_div takes two arguments, the second non-zero, in '${formula}'`);
        return Math.ceil(args[0] / args[1]);
      }
      return t === 'min' ? Math.min(...args) : Math.max(...args);
    }
    if (t in vars) return vars[t];
    throw new Error(`unknown name '${t}' in formula '${formula}' (known: ${Object.keys(vars).join(', ')})`);
  };
  const v = or();
  if (pos !== tokens.length) throw new Error(`unexpected '${tokens[pos]}' in formula '${formula}'`);
  return v;
}

/** Integer value of a grid / shared-memory formula. */
function evaluateInteger(formula: Formula, vars: Vars): number {
  return Math.floor(evaluateFormula(formula, vars));
}

// ---- the table ------------------------------------------------------------------------------

const SM80: [number, number] = [8, 0];
const SM90A: Array<[number, number]> = [[9, 0]];
const DTYPES: FloatDType[] = ['float32', 'float16', 'bfloat16'];
const SUFFIX: Record<FloatDType, string> = { float32: 'f32', float16: 'f16', bfloat16: 'bf16' };
const MAX_GRID_YZ = 65535;

/** The table of native/cuda/kernels/variants.json, for when that file is absent. */
export function builtInVariants(): Variant[] {
  const v: Variant[] = [];
  for (const dtype of DTYPES) {
    v.push({
      name: `maxsim_simt_${SUFFIX[dtype]}`,
      kernel: `maxsim_simt_${SUFFIX[dtype]}`,
      dtype,
      block: [128, 1, 1],
      grid: ['num_docs', 'num_queries - query_tile_offset', 1],
      smem: 0,
      requires: { minComputeCapability: SM80 },
      priority: 0,
      fallback: true,
    });
  }
  const tc = { dimMultipleOf: 8, minDim: 8, maxDim: 128 };
  for (const dtype of ['float16', 'bfloat16'] as const) {
    const add = (
      tag: string,
      block: number,
      grid: Formula,
      smem: number,
      requires: VariantRequirements,
      when?: string,
    ) =>
      v.push({
        name: `maxsim_${tag}_${SUFFIX[dtype]}`,
        kernel: `maxsim_${tag}_${SUFFIX[dtype]}`,
        dtype,
        block: [block, 1, 1],
        grid: [grid, 1, 1],
        smem,
        requires,
        when,
        priority: 0,
      });
    const sm80 = { ...tc, minComputeCapability: SM80 };
    const sm90a = { ...tc, computeCapabilities: SM90A };
    add('mma_g1', 128, 'num_sms * 4', 52736, sm80, 'nq*ceil(max_query_length/32) == 1');
    add('mma_g4', 256, 'num_sms * 2', 69888, sm80, 'wgmma == 0 && 1 < nq*ceil(Lq/32) <= 4');
    add('mma_g8', 256, 'num_sms * 2', 52352, sm80, 'wgmma == 0 && nq*ceil(Lq/32) > 4');
    add(
      'mma_ks',
      256,
      'num_sms * 2',
      35072,
      { dimMultipleOf: 8, minDim: 8, minComputeCapability: SM80 },
      'dim > 128',
    );
    add(
      'wgmma_n128',
      384,
      'num_sms',
      132096,
      sm90a,
      'wgmma == 1 && nq*ceil(Lq/32) > 1 && nq*ceil(Lq/16) <= 8',
    );
    add('wgmma_w2m2n64', 384, 'num_sms', 132096, sm90a, 'wgmma == 1 && nq*ceil(Lq/16) > 8');
    add('wgmma_w2n64', 384, 'num_sms', 132096, sm90a);
    add('wgmma_w4n64', 640, 'num_sms', 132096, sm90a);
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

/** Splits "[a, b, c]  (a note)" or "(a, b, c)" at its top-level commas; the trailing note is dropped. */
function splitTriple(s: string): string[] {
  const t = s.trim();
  const open = t[0] === '[' || t[0] === '(' ? t[0] : undefined;
  let inner = t;
  if (open) {
    const close = open === '[' ? ']' : ')';
    let depth = 0;
    for (let i = 0; i < t.length; i++) {
      if (t[i] === open) depth++;
      if (t[i] === close && --depth === 0) {
        inner = t.slice(1, i);
        break;
      }
    }
  }
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
  return f.every((p) => p !== undefined && p !== '') ? (f as [Formula, Formula, Formula]) : undefined;
}

function ccOf(x: unknown): [number, number] | undefined {
  if (Array.isArray(x) && x.length === 2 && x.every((n) => Number.isInteger(n))) return [x[0], x[1]];
  if (typeof x === 'number') return [Math.floor(x / 10), x % 10];
  if (typeof x === 'string') {
    const m = /^(?:sm_?|compute_?)?(\d)(\d)a?\+?$/.exec(x.trim());
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

/** Requirements written as prose: "dim % 8 == 0 && 8 <= dim <= 128", "compute capability 9.0", "dim >= 8". */
function requirementsFromText(text: string, into: VariantRequirements) {
  const mult = /dim\s*%\s*(\d+)\s*==\s*0/.exec(text);
  if (mult) into.dimMultipleOf = Number(mult[1]);
  const range = /(\d+)\s*<=\s*dim\s*<=\s*(\d+)/.exec(text);
  if (range) {
    into.minDim = Number(range[1]);
    into.maxDim = Number(range[2]);
  }
  const min = /dim\s*>=\s*(\d+)/.exec(text);
  if (min && into.minDim === undefined && Number(min[1]) > 1) into.minDim = Number(min[1]);
  const max = /dim\s*<=\s*(\d+)/.exec(text);
  if (max && into.maxDim === undefined) into.maxDim = Number(max[1]);
  const cc = /compute capability (\d+)\.(\d+)/.exec(text);
  if (cc) into.computeCapabilities = [[Number(cc[1]), Number(cc[2])]];
}

/**
 * A dispatch condition as written in variants.json: "pick when X", "sm_80 only: X" (only where the
 * sm_90a kernels cannot run), "sm_90a: X", "not selected" (undefined: never picked automatically).
 */
function conditionFromText(text: string): string | undefined {
  let t = text.trim();
  if (/^not selected/i.test(t)) return undefined;
  let arch = '';
  const prefix = /^(sm_?\d+a?)(\s+only)?\s*:\s*/i.exec(t);
  if (prefix) {
    arch = /a$/i.test(prefix[1]) ? 'wgmma == 1 && ' : 'wgmma == 0 && ';
    t = t.slice(prefix[0].length);
  }
  t = t.replace(/^pick when\s+/i, '');
  return `${arch}(${t})`;
}

/** One entry of variants.json; throws with the reason when it cannot be understood. */
function parseVariant(name: string, raw: Record<string, unknown>): Variant {
  const dtype = normalizeDtype(raw.dtype);
  if (!dtype)
    throw new Error(`variant ${name}: dtype ${JSON.stringify(raw.dtype)} is not float32/float16/bfloat16`);
  const blockF = tripleOf(raw.block);
  const block = blockF?.map((b) => (typeof b === 'number' ? b : Number.NaN)) as
    | [number, number, number]
    | undefined;
  if (!block || block.some((b) => !Number.isInteger(b) || b < 1))
    throw new Error(`variant ${name}: block ${JSON.stringify(raw.block)} is not 1-3 positive integers`);
  const grid = tripleOf(raw.grid);
  if (!grid)
    throw new Error(`variant ${name}: grid ${JSON.stringify(raw.grid)} is not 1-3 numbers or formulas`);
  const smem = formulaOf(raw.smem ?? raw.smem_bytes ?? raw.dynamicSmem ?? raw.dynamic_smem ?? 0);
  if (smem === undefined)
    throw new Error(
      `variant ${name}: smem ${JSON.stringify(raw.smem ?? raw.smem_bytes)} is not a number or formula`,
    );
  const requires: VariantRequirements = {};
  if (typeof raw.requires === 'string') requirementsFromText(raw.requires, requires);
  else if (raw.requires && typeof raw.requires === 'object') {
    const req = raw.requires as Record<string, unknown>;
    const mult = num(req, 'dimMultipleOf', 'dim_multiple_of');
    if (mult !== undefined) requires.dimMultipleOf = mult;
    const minDim = num(req, 'minDim', 'min_dim');
    if (minDim !== undefined) requires.minDim = minDim;
    const maxDim = num(req, 'maxDim', 'max_dim');
    if (maxDim !== undefined) requires.maxDim = maxDim;
    const cc = ccOf(req.minComputeCapability ?? req.min_cc);
    if (cc) requires.minComputeCapability = cc;
    if (Array.isArray(req.computeCapabilities)) {
      requires.computeCapabilities = req.computeCapabilities
        .map(ccOf)
        .filter((c): c is [number, number] => c !== undefined);
    }
    if (typeof req.arch === 'string') raw = { ...raw, arch: req.arch };
  }
  // arch: "sm_90a" is that exact architecture; "sm_80+" (or "sm_80") that one or newer.
  if (typeof raw.arch === 'string') {
    const cc = ccOf(raw.arch);
    if (cc && /a$/.test(raw.arch.trim())) requires.computeCapabilities = [cc];
    else if (cc && !requires.computeCapabilities) requires.minComputeCapability = cc;
  }
  const rawWhen = raw.when ?? raw.dispatch;
  const when = typeof rawWhen === 'string' ? conditionFromText(rawWhen) : undefined;
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

/** Reads variants.json: [ {name, ...} ], { variants: [ {name, ...} ] } or { name: {...} }. */
export function parseVariantsJson(text: string): { variants: Variant[]; warnings: string[] } {
  const json = JSON.parse(text) as unknown;
  const list: Array<[string, Record<string, unknown>]> = [];
  const root =
    json && typeof json === 'object' && !Array.isArray(json) && 'variants' in json
      ? (json as { variants: unknown }).variants
      : json;
  if (Array.isArray(root)) {
    for (const e of root)
      if (e && typeof e === 'object')
        list.push([
          String((e as { name?: unknown }).name ?? (e as { kernel?: unknown }).kernel),
          e as Record<string, unknown>,
        ]);
  } else if (root && typeof root === 'object') {
    for (const [k, e] of Object.entries(root))
      if (e && typeof e === 'object' && !k.startsWith('$') && !k.startsWith('_'))
        list.push([k, e as Record<string, unknown>]);
  }
  const variants: Variant[] = [];
  const warnings: string[] = [];
  const probe = problemVars(
    { numQueries: 1, maxQueryLength: 32, maxDocLength: 32, dim: 128, numDocs: 1, dtype: 'float16' },
    { computeCapability: [9, 0], sms: 1, smemOptin: 1 },
  );
  for (const [name, raw] of list) {
    try {
      const v = parseVariant(name, raw);
      // A formula or condition the evaluator cannot read would only fail later, at a launch.
      for (const f of [
        ...v.grid,
        v.smem,
        ...(v.queryTile !== undefined ? [v.queryTile] : []),
        ...(v.when ? [v.when] : []),
      ]) {
        try {
          evaluateFormula(f, probe);
        } catch (e) {
          throw new Error(`variant ${name}: ${(e as Error).message}`);
        }
      }
      variants.push(v);
    } catch (e) {
      warnings.push((e as Error).message);
    }
  }
  // Every dtype needs a fallback: a variant without dim restrictions (the lowest priority one).
  for (const dtype of DTYPES) {
    const mine = variants.filter((v) => v.dtype === dtype);
    if (mine.length > 0 && !mine.some((v) => v.fallback)) {
      const open = mine.filter(
        (v) =>
          v.requires.dimMultipleOf === undefined &&
          v.requires.maxDim === undefined &&
          (v.requires.minDim ?? 1) <= 1,
      );
      if (open.length > 0) open.sort((a, b) => a.priority - b.priority)[0].fallback = true;
      else warnings.push(`no any-dim fallback variant for ${dtype}`);
    }
  }
  return { variants, warnings };
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

let table: DispatchTable | undefined;

/** The variant table (read once). */
export function dispatchTable(): DispatchTable {
  if (table) return table;
  let text: string | undefined;
  try {
    text = readFileSync(variantsPath, 'utf8');
  } catch {
    table = {
      variants: builtInVariants(),
      source: 'built-in',
      warnings: [`${variantsPath} not found; using the built-in variant table`],
    };
    return table;
  }
  try {
    const parsed = parseVariantsJson(text);
    if (parsed.variants.length === 0) throw new Error('no usable variant in it');
    table = { variants: parsed.variants, source: variantsPath, warnings: parsed.warnings };
  } catch (e) {
    table = {
      variants: builtInVariants(),
      source: 'built-in',
      warnings: [`${variantsPath}: ${(e as Error).message}; using the built-in variant table`],
    };
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
  if (v.dtype !== p.dtype) return `it reads ${v.dtype} tokens, not ${p.dtype}`;
  if (r.dimMultipleOf !== undefined && p.dim % r.dimMultipleOf !== 0)
    return `it needs dim % ${r.dimMultipleOf} == 0 (dim is ${p.dim})`;
  if (r.minDim !== undefined && p.dim < r.minDim) return `it needs dim >= ${r.minDim} (dim is ${p.dim})`;
  if (r.maxDim !== undefined && p.dim > r.maxDim) return `it needs dim <= ${r.maxDim} (dim is ${p.dim})`;
  const cc = caps.computeCapability;
  if (r.minComputeCapability && !ccAtLeast(cc, r.minComputeCapability))
    return `it needs compute capability >= ${r.minComputeCapability.join('.')} (the GPU has ${cc.join('.')})`;
  if (r.computeCapabilities && !r.computeCapabilities.some((c) => c[0] === cc[0] && c[1] === cc[1])) {
    return `it runs only on compute capability ${r.computeCapabilities.map((c) => c.join('.')).join(' or ')} (the GPU has ${cc.join('.')})`;
  }
  if (kernels && kernels.size > 0 && !kernels.has(v.kernel))
    return `its kernel ${v.kernel} is not in the loaded fatbins`;
  try {
    const smem = evaluateInteger(v.smem, problemVars(p, caps));
    if (smem > caps.smemOptin)
      return `it needs ${smem} bytes of shared memory (the GPU allows ${caps.smemOptin})`;
  } catch (e) {
    return (e as Error).message;
  }
  return undefined;
}

function conditionHolds(v: Variant, p: Problem, caps: DeviceCaps): boolean {
  if (v.when === undefined) return false;
  try {
    return evaluateFormula(v.when, problemVars(p, caps)) !== 0;
  } catch {
    return false;
  }
}

/** The variant for a problem: `variant` forces one by name, otherwise the best that applies. */
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
  const usable = t.variants.filter((v) => unmetRequirement(v, p, caps, kernels) === undefined);
  // stable sort: equal priorities keep table order
  const preferred = usable.filter((v) => conditionHolds(v, p, caps)).sort((a, b) => b.priority - a.priority);
  const pick = preferred[0] ?? usable.find((v) => v.fallback);
  if (!pick) {
    throw new InvalidArgumentError(
      'queries/docs',
      `a problem some CUDA kernel variant supports (table: ${t.source})`,
      `dtype ${p.dtype}, dim ${p.dim}`,
    );
  }
  return pick;
}

/**
 * Grid, block and shared memory of `v` for problem `p`. Every grid dimension is at least 1; a grid.y
 * or grid.z beyond the hardware limit (65535) that counts queries becomes a launch per tile of 65535
 * queries (the runtime sets query_tile_offset for each).
 */
export function launchFor(v: Variant, p: Problem, caps: DeviceCaps): Launch {
  const vars = problemVars(p, caps);
  const grid = v.grid.map((g) => Math.max(1, evaluateInteger(g, vars))) as [number, number, number];
  const launch: Launch = {
    kernel: v.kernel,
    grid,
    block: [...v.block],
    smem: evaluateInteger(v.smem, vars),
    dtype: v.dtype,
  };
  let tile = v.queryTile !== undefined ? evaluateInteger(v.queryTile, vars) : p.numQueries;
  for (const axis of [1, 2]) {
    if (grid[axis] > MAX_GRID_YZ) {
      if (typeof v.grid[axis] !== 'string' || !/num_queries|Nq|nq/.test(v.grid[axis] as string)) {
        throw new InvalidArgumentError(
          'queries/docs',
          `a problem whose grid.${'xyz'[axis]} fits ${MAX_GRID_YZ} for ${v.name}`,
          String(grid[axis]),
        );
      }
      grid[axis] = MAX_GRID_YZ;
      tile = Math.min(tile, MAX_GRID_YZ);
    }
  }
  if (tile < p.numQueries) launch.queryTile = Math.max(1, tile);
  return launch;
}
