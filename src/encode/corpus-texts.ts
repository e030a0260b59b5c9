// Texts to a corpus: documents encoded in chunks and appended to a new corpus, with the model that
// encoded them recorded beside the corpus's files (encoder.json in the corpus folder: the corpus
// format itself is untouched), so a later text query can find the same model.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { InvalidArgumentError } from '../errors.js';
import { type CorpusDType, CorpusWriter } from '../io/corpus/index.js';
import { type ColbertEncoder, type LoadColbertOptions, loadColbert } from './colbert.js';
import type { ColbertSettings } from './settings.js';

export const ENCODER_FILE = 'encoder.json';

export interface CorpusEncoderRecord {
  /** The model directory, absolute. */
  model: string;
  onnx: string;
  dim: number;
  settings: ColbertSettings;
  recordedAt: string;
}

export interface BuildFromTextsOptions {
  /** The corpus folder to create. */
  out: string;
  /** A model directory (opened and closed here) or an open encoder. */
  model: string | ColbertEncoder;
  modelOptions?: LoadColbertOptions;
  texts: readonly string[];
  /** One id per text (the corpus then has ids). */
  ids?: readonly string[];
  /** Corpus storage dtype (default 'float16'). */
  dtype?: CorpusDType;
  /** Texts encoded per chunk (default 1024): memory stays bounded by one chunk. */
  chunk?: number;
  signal?: AbortSignal;
  onProgress?: (done: number, total: number) => void;
}

export interface BuildFromTextsResult {
  documents: number;
  tokens: number;
  dim: number;
  seconds: number;
}

/** Encodes `texts` and writes them as a new corpus at `out`, recording the model. */
export async function buildCorpusFromTexts(options: BuildFromTextsOptions): Promise<BuildFromTextsResult> {
  const { texts, ids } = options;
  if (ids !== undefined && ids.length !== texts.length)
    throw new InvalidArgumentError('ids', `${texts.length} ids (one per text)`, `${ids.length}`);
  const chunk = options.chunk ?? 1024;
  const started = performance.now();
  const encoder =
    typeof options.model === 'string'
      ? await loadColbert(options.model, options.modelOptions)
      : options.model;
  let writer: CorpusWriter | undefined;
  let tokens = 0;
  try {
    for (let start = 0; start < texts.length || writer === undefined; start += chunk) {
      const part = texts.slice(start, start + chunk);
      const batch = await encoder.encodeDocuments(part, {
        signal: options.signal,
        onProgress: (done) => options.onProgress?.(start + done, texts.length),
      });
      writer ??= CorpusWriter.create(options.out, {
        dim: batch.dim,
        dtype: options.dtype ?? 'float16',
        ids: ids !== undefined,
      });
      if (part.length > 0) writer.add(batch, ids?.slice(start, start + chunk));
      tokens += batch.lengths.reduce((a, b) => a + b, 0);
      if (texts.length === 0) break;
    }
    writer.commit();
  } catch (error) {
    writer?.abort();
    throw error;
  } finally {
    if (typeof options.model === 'string') await encoder.close();
  }
  const info = encoder.info;
  const record: CorpusEncoderRecord = {
    model: path.resolve(info.dir),
    onnx: path.resolve(info.onnx),
    dim: encoder.dim!,
    settings: info.settings,
    recordedAt: new Date().toISOString(),
  };
  fs.writeFileSync(path.join(options.out, ENCODER_FILE), `${JSON.stringify(record, null, 2)}\n`);
  return {
    documents: texts.length,
    tokens,
    dim: encoder.dim!,
    seconds: (performance.now() - started) / 1000,
  };
}

/** The model recorded in corpus `dir`, or undefined (a corpus built from embeddings has none). */
export function corpusEncoder(dir: string): CorpusEncoderRecord | undefined {
  const file = path.join(dir, ENCODER_FILE);
  if (!fs.existsSync(file)) return undefined;
  return JSON.parse(fs.readFileSync(file, 'utf8')) as CorpusEncoderRecord;
}
