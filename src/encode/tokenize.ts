// ColBERT's pre-processing around a Hugging Face tokenizer, as PyLate's ColBERT.tokenize applies it
// (through sentence-transformers' Transformer.tokenize):
//   1. the text is str.strip()ped (Python's whitespace set), lowercased where do_lower_case says so;
//   2. it is tokenized with the model's specials and truncated to (length - 1) tokens, the specials
//      included (the tokenizer's truncation: content tokens are dropped from the right);
//   3. queries (with query expansion) are padded to (length - 1) with the MASK token, attention 0;
//   4. the prefix token is inserted at position 1 with attention 1;
//   5. with attend_to_expansion_tokens every query position gets attention 1.
// Which positions survive encoding (the skiplist) is decided by keptPositions.

import * as path from 'node:path';
import { FormatError, InvalidArgumentError } from '../errors.js';
import type { ColbertSettings } from './settings.js';
import { readJson } from './settings.js';

/** The part of @huggingface/tokenizers' Tokenizer this module uses. */
export interface HfTokenizer {
  encode(text: string, options?: { add_special_tokens?: boolean }): { ids: number[] };
  token_to_id(token: string): number | undefined;
}
export type HfTokenizerClass = new (tokenizerJson: object, tokenizerConfig: object) => HfTokenizer;

export interface Tokenized {
  /** Token ids, prefix and specials included. */
  ids: Int32Array;
  /** The attention mask the model gets (1 = attended). */
  mask: Uint8Array;
  /** Content tokens the truncation dropped (0 when the text fitted). */
  dropped: number;
}

// Python's str.isspace() set (str.strip() with no argument), which differs from JavaScript's trim().
const PY_SPACE =
  '\\t\\n\\v\\f\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
const PY_STRIP = new RegExp(`^[${PY_SPACE}]+|[${PY_SPACE}]+$`, 'g');

export function pythonStrip(text: string): string {
  return text.replace(PY_STRIP, '');
}

/** The ids the tokenizer's post-processor puts before and after a single sequence. */
function specialsTemplate(post: unknown, file: string): { before: number[]; after: number[] } {
  if (post === null || post === undefined) return { before: [], after: [] };
  const p = post as Record<string, unknown>;
  if (p.type === 'Sequence') {
    for (const inner of (p.processors as unknown[]) ?? []) {
      const t = (inner as Record<string, unknown>).type;
      if (t === 'TemplateProcessing' || t === 'BertProcessing' || t === 'RobertaProcessing')
        return specialsTemplate(inner, file);
    }
    return { before: [], after: [] };
  }
  if (p.type === 'BertProcessing' || p.type === 'RobertaProcessing') {
    const cls = p.cls as [string, number];
    const sep = p.sep as [string, number];
    return { before: [cls[1]], after: [sep[1]] };
  }
  if (p.type === 'TemplateProcessing') {
    const specials = (p.special_tokens ?? {}) as Record<string, { ids: number[] }>;
    const before: number[] = [];
    const after: number[] = [];
    let seen = false;
    for (const piece of p.single as Record<string, { id: string }>[]) {
      if (piece.Sequence) {
        seen = true;
        continue;
      }
      const id = piece.SpecialToken?.id;
      const ids = id === undefined ? undefined : specials[id]?.ids;
      if (!ids)
        throw new FormatError(file, `post_processor names an unknown special token ${JSON.stringify(id)}`);
      (seen ? after : before).push(...ids);
    }
    return { before, after };
  }
  if (p.type === 'ByteLevel') return { before: [], after: [] };
  throw new FormatError(file, `post_processor type ${JSON.stringify(p.type)} is not supported`);
}

function tokenName(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { content?: unknown }).content === 'string'
  )
    return (value as { content: string }).content;
  return undefined;
}

export class ColbertTokenizer {
  readonly queryPrefixId: number | undefined;
  readonly documentPrefixId: number | undefined;
  /** The id queries are padded with (PyLate: MASK, else EOS, else the tokenizer's pad token). */
  readonly padId: number | undefined;
  /** Document token ids removed after encoding. */
  readonly skipIds: ReadonlySet<number>;
  private readonly before: number[];
  private readonly after: number[];

  constructor(
    private readonly tokenizer: HfTokenizer,
    readonly settings: ColbertSettings,
    tokenizerJson: Record<string, unknown>,
    tokenizerConfig: Record<string, unknown>,
    file = 'tokenizer.json',
  ) {
    ({ before: this.before, after: this.after } = specialsTemplate(tokenizerJson.post_processor, file));
    const model = (tokenizerJson.model ?? {}) as Record<string, unknown>;
    const unk = typeof model.unk_token === 'string' ? tokenizer.token_to_id(model.unk_token) : undefined;
    const prefix = (name: string, token: string): number | undefined => {
      if (token === '') return undefined;
      const id = tokenizer.token_to_id(token);
      if (id === undefined)
        throw new FormatError(file, `the ${name} ${JSON.stringify(token)} is not a token of the vocabulary`);
      return id;
    };
    this.queryPrefixId = prefix('query prefix', settings.queryPrefix);
    this.documentPrefixId = prefix('document prefix', settings.documentPrefix);
    const special = (key: string): number | undefined => {
      const name = tokenName(tokenizerConfig[key]);
      return name === undefined ? undefined : tokenizer.token_to_id(name);
    };
    this.padId = special('mask_token') ?? special('eos_token') ?? special('pad_token');
    if (settings.doQueryExpansion && this.padId === undefined)
      throw new FormatError(
        file,
        'query expansion needs a MASK, EOS or pad token and the tokenizer has none',
      );
    // transformers' convert_tokens_to_ids: a word outside the vocabulary maps to the UNK id
    const skip = new Set<number>();
    for (const word of settings.skiplistWords) {
      const id = tokenizer.token_to_id(word) ?? unk;
      if (id !== undefined) skip.add(id);
    }
    this.skipIds = skip;
    for (const [name, length, prefixId] of [
      ['queryLength', settings.queryLength, this.queryPrefixId],
      ['documentLength', settings.documentLength, this.documentPrefixId],
    ] as const) {
      const least = this.before.length + this.after.length + (prefixId === undefined ? 0 : 1);
      if (length < least + 1)
        throw new InvalidArgumentError(
          name,
          `at least ${least + 1} (specials and prefix plus one token)`,
          `${length}`,
        );
    }
  }

  /** Reads tokenizer.json and tokenizer_config.json (or special_tokens_map.json) of `dir`. */
  static fromDir(dir: string, settings: ColbertSettings, Tokenizer: HfTokenizerClass): ColbertTokenizer {
    const file = path.join(dir, 'tokenizer.json');
    const json = readJson(dir, 'tokenizer.json');
    if (json === undefined)
      throw new FormatError(dir, 'no tokenizer.json (the Hugging Face fast tokenizer file)');
    const config = {
      ...(readJson(dir, 'special_tokens_map.json') ?? {}),
      ...(readJson(dir, 'tokenizer_config.json') ?? {}),
    };
    let tokenizer: HfTokenizer;
    try {
      tokenizer = new Tokenizer(json, config);
    } catch (error) {
      throw new FormatError(file, `the tokenizer could not be built (${(error as Error).message})`);
    }
    return new ColbertTokenizer(tokenizer, settings, json, config, file);
  }

  query(text: string): Tokenized {
    return this.tokenize(text, true);
  }

  document(text: string): Tokenized {
    return this.tokenize(text, false);
  }

  private tokenize(text: string, isQuery: boolean): Tokenized {
    const s = this.settings;
    const prefixId = isQuery ? this.queryPrefixId : this.documentPrefixId;
    const length = isQuery ? s.queryLength : s.documentLength;
    const maxSeq = prefixId === undefined ? length : length - 1;
    let clean = pythonStrip(text);
    if (s.doLowerCase) clean = clean.toLowerCase();
    const content = this.tokenizer.encode(clean, { add_special_tokens: false }).ids;
    const budget = maxSeq - this.before.length - this.after.length;
    const kept = content.length > budget ? content.slice(0, budget) : content;
    const seq = [...this.before, ...kept, ...this.after];
    const pad = isQuery && s.doQueryExpansion ? maxSeq - seq.length : 0;
    const padded = seq.length + pad;
    const total = padded + (prefixId === undefined ? 0 : 1);
    const ids = new Int32Array(total);
    const mask = new Uint8Array(total);
    // padded first, then the prefix inserted at index 1 whatever the first token is (PyLate's order)
    const insertAt = prefixId === undefined ? -1 : Math.min(1, padded);
    let at = 0;
    for (let i = 0; i <= padded; i++) {
      if (i === insertAt) {
        ids[at] = prefixId!;
        mask[at++] = 1;
      }
      if (i === padded) break;
      ids[at] = i < seq.length ? seq[i] : this.padId!;
      mask[at++] = i < seq.length ? 1 : 0;
    }
    if (isQuery && s.attendToExpansionTokens) mask.fill(1);
    return { ids, mask, dropped: content.length - kept.length };
  }

  /**
   * Positions whose embeddings are kept: every query position with query expansion (the MASK tokens
   * included), else the attended ones; document positions that are attended and not in the skiplist.
   */
  keptPositions(t: Tokenized, isQuery: boolean): Int32Array {
    const out: number[] = [];
    for (let j = 0; j < t.ids.length; j++) {
      if (
        isQuery
          ? this.settings.doQueryExpansion || t.mask[j] === 1
          : t.mask[j] === 1 && !this.skipIds.has(t.ids[j])
      )
        out.push(j);
    }
    return Int32Array.from(out);
  }
}
