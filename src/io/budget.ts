// Limits on what a file header may make us allocate: a few header bytes can claim billions of
// documents, so per-document metadata is sized before anything is allocated.

import * as os from 'node:os';
import { InvalidArgumentError } from '../errors.js';

/** Documents of one batch or corpus: a document index must fit an int32 (native spans, Int32Array lengths). */
export const MAX_DOCUMENTS = 0x7fffffff;

/**
 * Bytes of per-document metadata (offsets, lengths, spans) allowed at once: a quarter of physical
 * memory, or MAXSIM_METADATA_BUDGET (bytes) when set.
 */
export function metadataBudget(): number {
  const env = Number(process.env.MAXSIM_METADATA_BUDGET);
  if (process.env.MAXSIM_METADATA_BUDGET && Number.isSafeInteger(env) && env > 0) return env;
  return Math.floor(os.totalmem() / 4);
}

function budgetSource(): string {
  return process.env.MAXSIM_METADATA_BUDGET ? 'MAXSIM_METADATA_BUDGET' : "a quarter of this machine's memory";
}

function gb(bytes: number): string {
  return `${(bytes / 1e9).toFixed(bytes < 1e10 ? 2 : 1)} GB`;
}

/**
 * Refuses `documents` (from a file header) when there are more than MAX_DOCUMENTS or when their
 * metadata, `bytesPerDocument` each, would exceed metadataBudget(). `argument` names the input.
 */
export function checkDocumentCount(documents: number, bytesPerDocument: number, argument: string): void {
  if (!(Number.isSafeInteger(documents) && documents >= 0))
    throw new InvalidArgumentError(argument, 'a whole number of documents', String(documents));
  if (documents > MAX_DOCUMENTS)
    throw new InvalidArgumentError(
      argument,
      `at most ${MAX_DOCUMENTS} documents (2^31 - 1)`,
      `${documents} documents`,
    );
  const need = documents * bytesPerDocument;
  const budget = metadataBudget();
  if (need > budget)
    throw new InvalidArgumentError(
      argument,
      `documents whose metadata (${bytesPerDocument} bytes each) fits the budget of ${gb(budget)} (${budgetSource()})`,
      `${documents} documents, which need ${gb(need)}`,
    );
}
