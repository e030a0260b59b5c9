// allowRemote: a Hugging Face model id ("org/name") fetched once into a cache folder, the files
// loadColbert reads and nothing else. Only ever called when the caller passed allowRemote: true.
// HF_ENDPOINT points at another hub (a mirror, or a local server in the tests).

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { InvalidArgumentError, MaxsimError } from '../errors.js';

const REQUIRED = ['tokenizer.json'];
const OPTIONAL = [
  'tokenizer_config.json',
  'special_tokens_map.json',
  'config.json',
  'config_sentence_transformers.json',
  'sentence_bert_config.json',
  'modules.json',
  'artifact.metadata',
  '1_Dense/config.json',
  '1_Dense/model.safetensors',
];
const COMPLETE = '.maxsim-complete';

async function download(url: string, file: string, required: boolean): Promise<boolean> {
  const response = await fetch(url, { redirect: 'follow' });
  if (response.status === 404 && !required) return false;
  if (!response.ok) throw new MaxsimError(`${url}: HTTP ${response.status} ${response.statusText}`);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const part = `${file}.part`;
  fs.writeFileSync(part, new Uint8Array(await response.arrayBuffer()));
  fs.renameSync(part, file);
  return true;
}

/** The local folder holding model `id` (downloaded on the first call). */
export async function fetchModel(
  id: string,
  options: { cacheDir?: string; onnxFile?: string },
): Promise<string> {
  if (!/^[A-Za-z0-9][\w.-]*\/[A-Za-z0-9][\w.-]*$/.test(id) || id.includes('..'))
    throw new InvalidArgumentError(
      'model',
      'a model directory or a Hugging Face id "org/name"',
      JSON.stringify(id),
    );
  const root = options.cacheDir ?? path.join(os.homedir(), '.cache', 'maxsim', 'models');
  const dir = path.join(root, ...id.split('/'));
  if (fs.existsSync(path.join(dir, COMPLETE))) return dir;
  const endpoint = (process.env.HF_ENDPOINT ?? 'https://huggingface.co').replace(/\/+$/, '');
  const url = (file: string) => `${endpoint}/${id}/resolve/main/${file}`;
  for (const file of REQUIRED) await download(url(file), path.join(dir, file), true);
  for (const file of OPTIONAL) await download(url(file), path.join(dir, file), false);
  const onnx = options.onnxFile !== undefined ? [options.onnxFile] : ['onnx/model.onnx', 'model.onnx'];
  let found = false;
  for (const file of onnx) {
    if (await download(url(file), path.join(dir, file), false)) {
      found = true;
      break;
    }
  }
  if (!found) throw new MaxsimError(`${id}: no ONNX encoder on the hub (looked for ${onnx.join(', ')})`);
  fs.writeFileSync(path.join(dir, COMPLETE), `${new Date().toISOString()}\n`);
  return dir;
}
