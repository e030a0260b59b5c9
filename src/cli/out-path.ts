// Output paths of the commands that write files: never inside a corpus directory.

import { InvalidArgumentError } from '../errors.js';
import { corpusHolding } from '../io/corpus/directory.js';

/**
 * Refuses an output path inside a corpus directory (or a corpus directory itself): a file written
 * there could replace a segment or the MANIFEST. For every command that writes files (`flag` names
 * its option in the error).
 */
export function refuseInsideCorpus(file: string, flag: string): void {
  const corpus = corpusHolding(file);
  if (corpus !== undefined)
    throw new InvalidArgumentError(
      flag,
      'a path outside every corpus directory',
      `${file} (inside the corpus ${corpus}; nothing was written)`,
    );
}
