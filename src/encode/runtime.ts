// The encoder's optional dependencies, loaded on first use only (maxsim installs and runs without
// them): onnxruntime-node runs the ONNX encoder on its own threads, @huggingface/tokenizers is the
// pure-JavaScript tokenizer. A missing one is a BackendUnavailableError that names the package.

import { BackendUnavailableError } from '../errors.js';
import type { HfTokenizerClass } from './tokenize.js';

/** The part of onnxruntime-node's API the encoder uses. */
export interface OrtTensor {
  readonly dims: readonly number[];
  readonly data: unknown;
  readonly type: string;
}
export interface OrtSession {
  readonly inputNames: readonly string[];
  readonly outputNames: readonly string[];
  run(feeds: Record<string, OrtTensor>): Promise<Record<string, OrtTensor>>;
  release(): Promise<void>;
}
export interface Ort {
  InferenceSession: {
    create(pathOrBytes: string | Uint8Array, options?: Record<string, unknown>): Promise<OrtSession>;
  };
  Tensor: new (type: 'int64', data: BigInt64Array, dims: readonly number[]) => OrtTensor;
}

function missing(pkg: string, why: string, error: unknown): BackendUnavailableError {
  const detail = error instanceof Error ? error.message.split('\n')[0] : String(error);
  // onnxruntime-node's postinstall fetches CUDA binaries from outside the npm registry unless told not to
  const install =
    pkg === 'onnxruntime-node' ? `ONNXRUNTIME_NODE_INSTALL=skip npm install ${pkg}` : `npm install ${pkg}`;
  return new BackendUnavailableError(
    `the encoder needs the optional package ${pkg} (${why}); install it with '${install}' (${detail})`,
  );
}

// Through a variable, so TypeScript does not resolve (or require) the optional packages' types.
const dynamicImport = (name: string): Promise<unknown> => import(name);

let ort: Promise<Ort> | undefined;
export function loadOrt(): Promise<Ort> {
  ort ??= dynamicImport('onnxruntime-node').then(
    (m) => ((m as { default?: Ort }).default ?? m) as Ort,
    (error) => {
      ort = undefined;
      throw missing('onnxruntime-node', 'it runs the ONNX encoder', error);
    },
  );
  return ort;
}

let tokenizers: Promise<HfTokenizerClass> | undefined;
export function loadTokenizerClass(): Promise<HfTokenizerClass> {
  tokenizers ??= dynamicImport('@huggingface/tokenizers').then(
    (m) => (m as { Tokenizer: HfTokenizerClass }).Tokenizer,
    (error) => {
      tokenizers = undefined;
      throw missing('@huggingface/tokenizers', 'it reads tokenizer.json', error);
    },
  );
  return tokenizers;
}
