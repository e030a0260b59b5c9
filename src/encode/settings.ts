// ColBERT's settings for a model directory, resolved as PyLate resolves them: the loadColbert option
// first, then config_sentence_transformers.json (PyLate's own file), then a Stanford checkpoint's
// artifact.metadata, then PyLate's defaults for Stanford checkpoints (the models that come without a
// config_sentence_transformers.json), listed in DEFAULT_SETTINGS.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { FormatError, InvalidArgumentError } from '../errors.js';

export interface ColbertSettings {
  /** Token inserted after the first token of every query ('' for none). */
  queryPrefix: string;
  /** Token inserted after the first token of every document ('' for none). */
  documentPrefix: string;
  /** Query tokens, prefix and specials included; queries are padded to it with the MASK token. */
  queryLength: number;
  /** Longest document, prefix and specials included (longer ones are truncated). */
  documentLength: number;
  /** Pad queries to queryLength with the MASK token and keep every position. */
  doQueryExpansion: boolean;
  /** Attention 1 on the expansion tokens (otherwise 0: they see the query but nobody sees them). */
  attendToExpansionTokens: boolean;
  /** Tokens removed from documents after encoding (by id; unknown words map to the UNK id). */
  skiplistWords: string[];
  /** sentence_bert_config.json's do_lower_case: lowercase before the tokenizer. */
  doLowerCase: boolean;
}

/** Python's string.punctuation, PyLate's default skiplist. */
export const PUNCTUATION: readonly string[] = [...'!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~'];

/** What a model without config_sentence_transformers.json gets (PyLate's Stanford defaults). */
export const DEFAULT_SETTINGS: Readonly<ColbertSettings> = Object.freeze({
  queryPrefix: '[unused0]',
  documentPrefix: '[unused1]',
  queryLength: 32,
  documentLength: 180,
  doQueryExpansion: true,
  attendToExpansionTokens: false,
  skiplistWords: [...PUNCTUATION],
  doLowerCase: false,
});

/** Reads a JSON file of the model, or undefined where it is absent; a broken one is a FormatError. */
export function readJson(dir: string, name: string): Record<string, unknown> | undefined {
  const file = path.join(dir, name);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value !== 'object' || value === null || Array.isArray(value))
      throw new Error('the top level is not an object');
    return value as Record<string, unknown>;
  } catch (error) {
    throw new FormatError(file, `not a JSON object (${(error as Error).message})`);
  }
}

type Source = Record<string, unknown> | undefined;

function pick<T>(
  file: string,
  sources: readonly [Source, string][],
  check: (v: unknown) => v is T,
  expected: string,
): T | undefined {
  for (const [source, name] of sources) {
    if (source === undefined || !(name in source) || source[name] === null) continue;
    const v = source[name];
    if (!check(v)) throw new FormatError(file, `${name} must be ${expected}, got ${JSON.stringify(v)}`);
    return v;
  }
  return undefined;
}

const isString = (v: unknown): v is string => typeof v === 'string';
const isBool = (v: unknown): v is boolean => typeof v === 'boolean';
const isLength = (v: unknown): v is number =>
  Number.isInteger(v) && (v as number) >= 1 && (v as number) <= 65536;
const isWords = (v: unknown): v is string[] => Array.isArray(v) && v.every(isString);

/** Checks the user's overrides (loadColbert options) and returns only the ones given. */
export function checkOverrides(options: Partial<ColbertSettings>): Partial<ColbertSettings> {
  const out: Partial<ColbertSettings> = {};
  const checks: [keyof ColbertSettings, (v: unknown) => boolean, string][] = [
    ['queryPrefix', isString, 'a string'],
    ['documentPrefix', isString, 'a string'],
    ['queryLength', isLength, 'an integer in [1, 65536]'],
    ['documentLength', isLength, 'an integer in [1, 65536]'],
    ['doQueryExpansion', isBool, 'a boolean'],
    ['attendToExpansionTokens', isBool, 'a boolean'],
    ['skiplistWords', isWords, 'an array of strings'],
    ['doLowerCase', isBool, 'a boolean'],
  ];
  for (const [key, check, expected] of checks) {
    const v = options[key];
    if (v === undefined) continue;
    if (!check(v)) throw new InvalidArgumentError(key, expected, JSON.stringify(v) ?? String(v));
    (out as Record<string, unknown>)[key] = v;
  }
  return out;
}

/** The settings of the model in `dir` with `overrides` on top; `source` says where they came from. */
export function resolveSettings(
  dir: string,
  overrides: Partial<ColbertSettings> = {},
): { settings: ColbertSettings; source: string } {
  const st = readJson(dir, 'config_sentence_transformers.json');
  const meta = st === undefined ? readJson(dir, 'artifact.metadata') : undefined;
  const sbert = readJson(dir, 'sentence_bert_config.json');
  const file = path.join(dir, st ? 'config_sentence_transformers.json' : 'artifact.metadata');
  const s = (pylate: string, stanford?: string): [Source, string][] => [
    [st, pylate],
    [meta, stanford ?? pylate],
  ];
  const given = checkOverrides(overrides);
  const settings: ColbertSettings = {
    queryPrefix:
      given.queryPrefix ??
      pick(file, s('query_prefix', 'query_token_id'), isString, 'a string') ??
      DEFAULT_SETTINGS.queryPrefix,
    documentPrefix:
      given.documentPrefix ??
      pick(file, s('document_prefix', 'doc_token_id'), isString, 'a string') ??
      DEFAULT_SETTINGS.documentPrefix,
    queryLength:
      given.queryLength ??
      pick(file, s('query_length', 'query_maxlen'), isLength, 'an integer in [1, 65536]') ??
      DEFAULT_SETTINGS.queryLength,
    documentLength:
      given.documentLength ??
      pick(file, s('document_length', 'doc_maxlen'), isLength, 'an integer in [1, 65536]') ??
      DEFAULT_SETTINGS.documentLength,
    doQueryExpansion:
      given.doQueryExpansion ??
      pick(file, [[st, 'do_query_expansion']], isBool, 'a boolean') ??
      DEFAULT_SETTINGS.doQueryExpansion,
    attendToExpansionTokens:
      given.attendToExpansionTokens ??
      pick(file, s('attend_to_expansion_tokens', 'attend_to_mask_tokens'), isBool, 'a boolean') ??
      DEFAULT_SETTINGS.attendToExpansionTokens,
    skiplistWords:
      given.skiplistWords ??
      pick(file, [[st, 'skiplist_words']], isWords, 'an array of strings') ??
      DEFAULT_SETTINGS.skiplistWords,
    doLowerCase:
      given.doLowerCase ??
      pick(path.join(dir, 'sentence_bert_config.json'), [[sbert, 'do_lower_case']], isBool, 'a boolean') ??
      DEFAULT_SETTINGS.doLowerCase,
  };
  // PyLate: without query expansion nothing attends to expansion tokens (there are none).
  if (!settings.doQueryExpansion) settings.attendToExpansionTokens = false;
  const source = st
    ? 'config_sentence_transformers.json'
    : meta
      ? 'artifact.metadata'
      : 'defaults (no config_sentence_transformers.json)';
  return { settings, source };
}
