// The ColBERT projection (PyLate's Dense modules: linear.weight [out, in], optional linear.bias, an
// identity activation) and the final L2 normalization, x / max(||x||, 1e-12) as
// torch.nn.functional.normalize does it. Found, in order, from modules.json's Dense entries, a
// 1_Dense/ folder, or a Stanford checkpoint's linear.weight in the root model.safetensors.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { FormatError } from '../errors.js';
import { decodeToFloat32 } from '../floats.js';
import type { NpyArray } from '../io/array.js';
import { readSafetensors } from '../io/safetensors.js';
import { readJson } from './settings.js';

export interface DenseLayer {
  /** Where it was read from (for messages and /v1/info). */
  readonly file: string;
  readonly inFeatures: number;
  readonly outFeatures: number;
  /** Row-major [outFeatures, inFeatures]. */
  readonly weight: Float32Array;
  readonly bias?: Float32Array;
}

const IDENTITY = new Set(['torch.nn.modules.linear.Identity', 'torch.nn.Identity', 'Identity']);

function asFloat32(t: NpyArray, file: string, name: string): Float32Array {
  if (t.dtype !== 'float32' && t.dtype !== 'float16' && t.dtype !== 'bfloat16')
    throw new FormatError(file, `${name} must be float32, float16 or bfloat16, not ${t.dtype}`);
  return Float32Array.from(decodeToFloat32(t.data as Float32Array | Uint16Array, t.dtype, 1));
}

function readLayer(file: string, config: Record<string, unknown> | undefined): DenseLayer {
  const tensors = readSafetensors(file).tensors;
  const w = tensors.get('linear.weight');
  if (w?.shape.length !== 2)
    throw new FormatError(file, 'no linear.weight of shape [out_features, in_features] (a Dense projection)');
  const [outFeatures, inFeatures] = w.shape;
  const activation = config?.activation_function;
  if (activation !== undefined && activation !== null && !IDENTITY.has(String(activation)))
    throw new FormatError(file, `activation ${JSON.stringify(activation)} is not supported (only Identity)`);
  if (config?.use_residual === true)
    throw new FormatError(file, 'use_residual Dense layers are not supported');
  const b = tensors.get('linear.bias');
  if (b && (b.shape.length !== 1 || b.shape[0] !== outFeatures))
    throw new FormatError(file, `linear.bias must have shape [${outFeatures}], got [${b.shape.join(', ')}]`);
  return {
    file,
    inFeatures,
    outFeatures,
    weight: asFloat32(w, file, 'linear.weight'),
    bias: b ? asFloat32(b, file, 'linear.bias') : undefined,
  };
}

/** The projection layers of the model in `dir`, in order; [] when it has none. */
export function findDense(dir: string): DenseLayer[] {
  const modulesFile = path.join(dir, 'modules.json');
  let folders: string[] = [];
  if (fs.existsSync(modulesFile)) {
    let modules: unknown;
    try {
      modules = JSON.parse(fs.readFileSync(modulesFile, 'utf8'));
    } catch (error) {
      throw new FormatError(modulesFile, `not JSON (${(error as Error).message})`);
    }
    if (!Array.isArray(modules)) throw new FormatError(modulesFile, 'not a list of modules');
    folders = modules
      .filter((m) => typeof m?.type === 'string' && /(^|\.)Dense$/.test(m.type))
      .sort((a, b) => (a.idx ?? 0) - (b.idx ?? 0))
      .map((m) => String(m.path ?? ''));
  } else if (fs.existsSync(path.join(dir, '1_Dense'))) {
    folders = ['1_Dense'];
  }
  const layers = folders.map((folder) => {
    const file = path.join(dir, folder, 'model.safetensors');
    if (!fs.existsSync(file))
      throw new FormatError(path.join(dir, folder), 'a Dense module without model.safetensors');
    return readLayer(file, readJson(path.join(dir, folder), 'config.json'));
  });
  if (layers.length === 0) {
    // Stanford checkpoints keep the projection beside the encoder weights
    const root = path.join(dir, 'model.safetensors');
    if (fs.existsSync(root)) {
      const reader = readSafetensors(root);
      if (reader.tensors.has('linear.weight')) layers.push(readLayer(root, undefined));
    }
  }
  for (let i = 1; i < layers.length; i++) {
    if (layers[i].inFeatures !== layers[i - 1].outFeatures)
      throw new FormatError(
        layers[i].file,
        `in_features ${layers[i].inFeatures} does not match the previous layer's out_features ${layers[i - 1].outFeatures}`,
      );
  }
  return layers;
}

/**
 * Projects the rows `rows` of `hidden` (row-major, `width` values a row, starting at `base`) through
 * `layers` and L2-normalizes them into `out` from row `outRow` on. The projection is a small share of
 * an encoder's work (hidden x out per token against ~2 x the encoder's parameters), so it runs here.
 */
export function projectRows(
  layers: readonly DenseLayer[],
  hidden: Float32Array,
  base: number,
  width: number,
  rows: Int32Array,
  out: Float32Array,
  outRow: number,
  normalize: boolean,
): void {
  const dim = layers.length > 0 ? layers[layers.length - 1].outFeatures : width;
  // one scratch row per layer, reused for every token
  const scratch = layers.map((l) => new Float32Array(l.outFeatures));
  for (let r = 0; r < rows.length; r++) {
    let x = hidden;
    let xAt = base + rows[r] * width;
    for (let li = 0; li < layers.length; li++) {
      const { weight, bias, inFeatures, outFeatures } = layers[li];
      const y = scratch[li];
      for (let o = 0; o < outFeatures; o++) {
        let acc = 0;
        const w = o * inFeatures;
        for (let k = 0; k < inFeatures; k++) acc += weight[w + k] * x[xAt + k];
        y[o] = bias === undefined ? acc : acc + bias[o];
      }
      x = y;
      xAt = 0;
    }
    let norm = 0;
    for (let k = 0; k < dim; k++) norm += x[xAt + k] * x[xAt + k];
    const scale = normalize ? 1 / Math.max(Math.sqrt(norm), 1e-12) : 1;
    const at = (outRow + r) * dim;
    for (let k = 0; k < dim; k++) out[at + k] = x[xAt + k] * scale;
  }
}
