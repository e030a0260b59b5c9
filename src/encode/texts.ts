// Texts from a file for the CLI and the corpus builder: .jsonl (one JSON object a line, the text
// under `field`, an optional `id`; or one JSON string a line) or plain text (one text a line).

import { FormatError, InvalidArgumentError } from '../errors.js';
import { readTextFile } from '../io/text-file.js';

export interface TextRecords {
  texts: string[];
  /** The `id` of each JSONL record where every record has one (strings or numbers), else undefined. */
  ids: (string | number)[] | undefined;
}

/** Reads `file` (named `argument` in errors): JSONL when it ends in .jsonl / .ndjson, else lines. */
export function readTexts(file: string, argument: string, field = 'text'): TextRecords {
  const text = readTextFile(file, argument, 'a .txt (one text a line) or .jsonl file');
  const lines = text.split('\n').map((l) => (l.endsWith('\r') ? l.slice(0, -1) : l));
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  const jsonl = /\.(jsonl|ndjson)$/i.test(file);
  const texts: string[] = [];
  const ids: (string | number)[] = [];
  let allIds = true;
  lines.forEach((line, n) => {
    if (!jsonl) {
      texts.push(line);
      return;
    }
    if (line.trim() === '') return;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (error) {
      throw new FormatError(file, `line ${n + 1} is not JSON (${(error as Error).message})`);
    }
    if (typeof value === 'string') {
      texts.push(value);
      allIds = false;
      return;
    }
    const record = value as Record<string, unknown>;
    if (typeof value !== 'object' || value === null || typeof record[field] !== 'string')
      throw new FormatError(file, `line ${n + 1} has no string field ${JSON.stringify(field)}`);
    texts.push(record[field] as string);
    const id = record.id;
    if (typeof id === 'string' || typeof id === 'number') ids.push(id);
    else allIds = false;
  });
  if (texts.length === 0)
    throw new InvalidArgumentError(argument, 'a file with at least one text', `${file} (no texts)`);
  return { texts, ids: jsonl && allIds ? ids : undefined };
}
