// `maxsim serve`: the HTTP service (src/server/app.ts) over an on-disk corpus, until SIGTERM / SIGINT.
import { Command, Option, InvalidArgumentError as UsageError } from 'commander';
import type { BackendChoice } from '../backends/select.js';
import { InvalidArgumentError } from '../errors.js';
import { readTextFile } from '../io/text-file.js';
import { createServer } from '../server/index.js';
import { integerOption, parseGpus, parseMaxWork } from './common.js';

interface ServeOptions {
  corpus: string;
  host: string;
  port: number;
  backend: BackendChoice;
  pin?: boolean;
  threads?: number;
  gpuMemory?: number;
  gpus?: 'all' | number[];
  dtype?: 'int8' | 'fp8';
  maxBatch: number;
  maxWaitMs: number | 'auto';
  maxQueue?: number;
  passesInFlight?: number;
  apiKeyFile?: string;
  authReads?: boolean;
  bodyLimit: number;
  timeoutMs: number;
  maxWork?: number;
  closeGraceMs: number;
  logLevel: string;
  model?: string;
  maxTexts?: number;
  maxTextChars?: number;
  encoderThreads?: number;
}

/** --max-wait-ms: 'auto' or a number of ms; commander's usage error names the flag (exit 2). */
function waitOption(value: string): number | 'auto' {
  if (value === 'auto') return 'auto';
  const n = value.trim() === '' ? Number.NaN : Number(value);
  if (!(Number.isFinite(n) && n >= 0)) throw new UsageError("expected 'auto' or a number of ms >= 0");
  return n;
}

function passDtypeOption(value: string): 'int8' | 'fp8' {
  // commander's error: a usage error naming the option, exit code 2
  if (value !== 'int8' && value !== 'fp8')
    throw new UsageError("expected 'int8' or 'fp8' (8-bit search passes)");
  return value;
}

function readKey(file: string): string {
  const text = readTextFile(file, '--api-key-file', 'a readable file holding the key', 1 << 20);
  const key = text.trim();
  if (key.length < 8 || /\s/.test(key))
    throw new InvalidArgumentError(
      '--api-key-file',
      'one key of at least 8 characters without spaces',
      `${key.length} characters${/\s/.test(key) ? ' with whitespace' : ''}`,
    );
  return key;
}

export function serveCommand(): Command {
  const command = new Command('serve')
    .description(
      'serve search / rerank / score over HTTP for a resident corpus, batching concurrent requests into one pass ' +
        '(POST /v1/search, /v1/rerank, /v1/score, /v1/documents, /v1/encode; GET /healthz, /readyz, /metrics, /openapi.json, /v1/info, /v1/model); with a model (--model), text in as well as embeddings',
    )
    .requiredOption('--corpus <dir>', 'the corpus (maxsim corpus build)')
    .option(
      '--model <dir>',
      'a ColBERT model directory: text fields of search / rerank / documents and POST /v1/encode (default: the model the corpus was built with, when it is still there)',
    )
    .option('--max-texts <n>', 'texts in one request at most (413 beyond)', integerOption(1), 1024)
    .option(
      '--max-text-chars <n>',
      'characters of one text at most (413 beyond; texts are tokenized on the JS thread)',
      integerOption(1),
      32_768,
    )
    .option(
      '--encoder-threads <n>',
      "onnxruntime's threads for the model (default its own choice)",
      integerOption(1),
    )
    .option('--host <address>', 'address to bind (default loopback only)', '127.0.0.1')
    .option('--port <n>', 'port (0: any free port)', integerOption(0, 65535), 8080)
    .addOption(
      new Option('--backend <name>', 'scoring backend').choices(['auto', 'cpu', 'cuda']).default('auto'),
    )
    .option('--pin', 'CUDA: page-lock the corpus files and stream them instead of uploading the corpus')
    .option('--threads <n>', 'CPU worker threads (default all cores)', integerOption(1))
    .option('--gpu-memory <MiB>', 'CUDA: device memory the resident corpus may take', integerOption(1))
    .option(
      '--gpus <list>',
      "CUDA: 'all' or device indices (0,1): each segment is sharded over these GPUs (or streamed by all of them)",
      parseGpus,
    )
    .option(
      '--dtype <type>',
      'int8 | fp8: every search pass scans an 8-bit copy of the corpus and rescores 4 x top_k candidates exactly (fp8: GPU only); rerank and score stay exact',
      passDtypeOption,
    );
  return withServiceOptions(command).action(runServe);
}

// The batcher, the key, the request limits and the log.
function withServiceOptions(command: Command): Command {
  return command
    .option('--max-batch <n>', 'queries per scoring pass (1 turns batching off)', integerOption(1), 128)
    .option(
      '--max-wait-ms <ms>',
      "longest wait for company before a pass starts ('auto': a tenth of the pass time, 1-50 ms)",
      waitOption,
      'auto' as const,
    )
    .option(
      '--passes-in-flight <n>',
      'passes handed to the backend at once (default 2 on a GPU-resident corpus: the next gathers while one runs; else 1)',
      integerOption(1),
    )
    .option(
      '--max-queue <n>',
      'queries queued at most before 429 (default 16 x max-batch, at least 1024)',
      integerOption(1),
    )
    .option('--api-key-file <file>', 'bearer token required for writes (POST / DELETE /v1/documents)')
    .option(
      '--auth-reads',
      'require the API key for searches, reranks, scores, /metrics, /openapi.json and /v1/info too (/healthz and /readyz stay open)',
    )
    .option('--body-limit <MiB>', 'largest request body', integerOption(1), 64)
    .option(
      '--timeout-ms <ms>',
      "per-request deadline (504 beyond; the pass's work stops)",
      integerOption(1),
      30_000,
    )
    .option(
      '--max-work <n>',
      'work one rerank / score / id-restricted search may ask for: query tokens x document tokens x dim multiply-adds (413 beyond; default 2.5e11, ~3 s on two CPU cores)',
      parseMaxWork,
    )
    .option(
      '--close-grace-ms <ms>',
      'on SIGTERM: how long requests in flight get before their connections are closed',
      integerOption(0),
      10_000,
    )
    .addOption(
      new Option('--log-level <level>', 'log level (one JSON line per request at info)')
        .choices(['fatal', 'error', 'warn', 'info', 'debug', 'silent'])
        .default('info'),
    );
}

async function runServe(opts: ServeOptions): Promise<void> {
  if (opts.authReads && opts.apiKeyFile === undefined)
    throw new InvalidArgumentError('--auth-reads', '--api-key-file with it', 'no key file');
  const server = await createServer({
    corpus: opts.corpus,
    host: opts.host,
    port: opts.port,
    backend: opts.backend,
    pin: opts.pin,
    threads: opts.threads,
    gpuMemory: opts.gpuMemory === undefined ? undefined : opts.gpuMemory * 1024 * 1024,
    devices: opts.gpus,
    dtype: opts.dtype,
    maxBatch: opts.maxBatch,
    maxWaitMs: opts.maxWaitMs,
    maxQueue: opts.maxQueue,
    passesInFlight: opts.passesInFlight,
    apiKey: opts.apiKeyFile === undefined ? undefined : readKey(opts.apiKeyFile),
    authReads: opts.authReads,
    bodyLimit: opts.bodyLimit * 1024 * 1024,
    timeoutMs: opts.timeoutMs,
    maxWork: opts.maxWork,
    closeGraceMs: opts.closeGraceMs,
    logger: { level: opts.logLevel },
    model: opts.model,
    modelOptions: opts.encoderThreads === undefined ? undefined : { threads: opts.encoderThreads },
    maxTexts: opts.maxTexts,
    maxTextChars: opts.maxTextChars,
  });
  const { url } = await server.listen();
  const info = server.resident.info;
  process.stderr.write(
    `maxsim serve: listening on ${url} (${server.resident.backend}, ${server.resident.mode}, ${info.documents} documents, dim ${info.dim}, ${info.dtype}${server.resident.dtype ? `, ${server.resident.dtype} passes` : ''})\n`,
  );
  for (const line of server.notes) process.stderr.write(`maxsim serve: ${line}\n`);
  await untilSignal(server);
}

// Stops accepting, answers what is in flight, releases the corpus and the GPU, and resolves (exit 0)
// on SIGTERM / SIGINT; a second signal exits at once.
function untilSignal(server: Awaited<ReturnType<typeof createServer>>): Promise<void> {
  return new Promise<void>((resolve) => {
    let stopping = false;
    const stop = (signal: NodeJS.Signals) => {
      if (stopping) process.exit(1);
      stopping = true;
      process.stderr.write(`maxsim serve: ${signal}: draining\n`);
      server.close().then(
        () => {
          process.stderr.write('maxsim serve: stopped\n');
          resolve();
        },
        (e) => {
          process.stderr.write(`maxsim serve: shutdown failed: ${(e as Error).message}\n`);
          process.exitCode = 1;
          resolve();
        },
      );
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  });
}
