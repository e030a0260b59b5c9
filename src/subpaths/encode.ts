// 'maxsim/encode': text in. loadColbert opens a local ColBERT model (ONNX encoder, tokenizer.json,
// PyLate's config and projection) and encodes queries and documents with ColBERT's rules, as PyLate
// applies them. Needs the optional packages onnxruntime-node and @huggingface/tokenizers, loaded
// only when a model is opened. Re-exports only.

export {
  type ColbertEncoder,
  type ColbertInfo,
  type EncodeOptions,
  type LoadColbertOptions,
  loadColbert,
} from '../encode/colbert.js';
export { type DenseLayer, findDense, projectRows } from '../encode/dense.js';
export {
  type ColbertSettings,
  DEFAULT_SETTINGS,
  PUNCTUATION,
  resolveSettings,
} from '../encode/settings.js';
export { ColbertTokenizer, pythonStrip, type Tokenized } from '../encode/tokenize.js';
