// `maxsim corpus build | append | info`: on-disk corpora (src/io/corpus.ts).
import { Command, Option } from 'commander';
import { InvalidArgumentError } from '../errors.js';
import { type CorpusDType, type CorpusInfo, recoverCorpus } from '../io/corpus.js';
import { buildCorpusFromFilesAsync } from '../io/corpus-build.js';
import { openCorpus } from '../ops/corpus-search.js';
import { grouped, interruptSignal, printTable } from './common.js';
import { Progress } from './progress.js';

interface BuildOptions {
  docs: string;
  docOffsets?: string;
  docLengths?: string;
  docScales?: string;
  ids?: string;
  out: string;
  dtype: string;
  checkFinite: boolean;
  json?: boolean;
  wait?: string;
  clamp?: boolean;
}

const DTYPES: Record<string, CorpusDType> = {
  fp16: 'float16',
  f16: 'float16',
  float16: 'float16',
  bf16: 'bfloat16',
  bfloat16: 'bfloat16',
  fp32: 'float32',
  f32: 'float32',
  float32: 'float32',
  int8: 'int8',
};

function printInfo(info: CorpusInfo, json: boolean | undefined, extra: Record<string, string> = {}) {
  if (json) {
    console.log(JSON.stringify({ ...info, ...extra }));
    return;
  }
  const gib = (n: number) => `${(n / 1024 ** 3).toFixed(3)} GiB`;
  printTable(
    ['field', 'value'],
    [
      ['path', info.path],
      ['dtype', info.dtype],
      ['dim', String(info.dim)],
      ['documents', grouped(info.documents)],
      ['tokens', grouped(info.tokens)],
      ['longest document', grouped(info.maxLength)],
      ['segments', String(info.segments)],
      ['ids', info.hasIds ? 'yes' : 'no (indices)'],
      ['files', gib(info.bytes)],
      ['generation', String(info.generation)],
      ...Object.entries(extra),
    ],
  );
}

function waitMs(seconds: string | undefined): number | undefined {
  if (seconds === undefined) return undefined;
  const s = Number(seconds);
  if (!(Number.isFinite(s) && s >= 0))
    throw new InvalidArgumentError('--wait', 'a number of seconds >= 0', JSON.stringify(seconds));
  return s * 1000;
}

function buildAction(append: boolean) {
  return async (opts: BuildOptions) => {
    let bar: Progress | undefined;
    const interrupt = interruptSignal();
    const info = await buildCorpusFromFilesAsync({
      docs: opts.docs,
      docOffsets: opts.docOffsets,
      docLengths: opts.docLengths,
      docScales: opts.docScales,
      ids: opts.ids,
      out: opts.out,
      dtype: DTYPES[opts.dtype],
      append,
      checkFinite: opts.checkFinite,
      waitMs: waitMs(opts.wait),
      clamp: opts.clamp,
      onProgress: (done, total) => {
        bar ??= new Progress(append ? 'append' : 'build', total);
        bar.update(done);
      },
      // Ctrl-C: the writer aborts between groups, nothing is published (main() exits 130)
      signal: interrupt.signal,
    })
      .catch((e: unknown) => {
        bar?.abandon();
        throw e;
      })
      .finally(() => interrupt.dispose());
    bar?.finish();
    const { clamped, ...published } = info;
    if (clamped > 0)
      process.stderr.write(
        `clamped ${clamped} value${clamped === 1 ? '' : 's'} beyond the ${published.dtype} range to its largest finite value\n`,
      );
    printInfo(published, opts.json, opts.clamp ? { clamped: String(clamped) } : {});
  };
}

function inputOptions(command: Command): Command {
  return command
    .requiredOption(
      '--docs <spec>',
      'documents: packed [T, d] (with --doc-offsets or --doc-lengths) or dense [B, L, d]',
    )
    .option('--doc-offsets <spec>', 'packed documents: token offsets [B+1] (int32/int64)')
    .option('--doc-lengths <spec>', 'token counts [B] (packed), or real lengths of dense documents')
    .option('--doc-scales <spec>', 'int8 tokens: one float32 scale per token row (makes an int8 corpus)')
    .option('--ids <file>', 'document ids, one per line')
    .option('--no-check-finite', 'skip the scan for NaN / Infinity (trusted input)')
    .option('--json', 'print the corpus summary as JSON')
    .option(
      '--clamp',
      'store values beyond the fp16 / bf16 range as its largest finite value (default: refuse them)',
    )
    .option(
      '--wait <seconds>',
      'when another writer holds the corpus, wait up to this long (default: fail at once)',
    );
}

export function corpusCommand(): Command {
  const corpus = new Command('corpus').description(
    'build, grow and inspect on-disk corpora (a directory, e.g. docs.msx)',
  );
  corpus.addCommand(
    inputOptions(
      new Command('build').description('write a new corpus from .npy / .safetensors documents (streamed)'),
    )
      .requiredOption('--out <dir>', 'the corpus directory to create (e.g. docs.msx)')
      .addOption(
        new Option('--dtype <dtype>', 'storage dtype')
          .choices(['fp16', 'bf16', 'fp32', 'int8'])
          .default('fp16'),
      )
      .action(buildAction(false)),
  );
  corpus.addCommand(
    inputOptions(
      new Command('append').description('add documents to a corpus (a new segment, published atomically)'),
    )
      .requiredOption('--out <dir>', 'the corpus directory to append to')
      .addOption(new Option('--dtype <dtype>').hideHelp().default('fp16'))
      .action(buildAction(true)),
  );
  corpus.addCommand(
    new Command('info')
      .description('print a corpus header and verify every checksum')
      .argument('<dir>', 'the corpus directory')
      .option('--no-verify', 'skip reading the token data (headers, offsets and ids are always checked)')
      .option('--json', 'print JSON')
      .action((dir: string, opts: { verify: boolean; json?: boolean }) => {
        const c = openCorpus(dir);
        if (opts.verify) {
          const bar = new Progress('verify', c.info.tokenBytes);
          c.verify((p) => bar.update(p.bytes));
          bar.finish();
        }
        printInfo(c.info, opts.json, { checksums: opts.verify ? 'ok' : 'not read (--no-verify)' });
      }),
  );
  corpus.addCommand(
    new Command('recover')
      .description(
        'rebuild a lost or damaged MANIFEST from the intact segment files (deletes nothing; a damaged MANIFEST is kept as MANIFEST.damaged-<time>)',
      )
      .argument('<dir>', 'the corpus directory')
      .option(
        '--no-verify',
        'adopt segments without re-reading their tokens (headers, offsets, ids are checked)',
      )
      .option('--wait <seconds>', 'when a writer holds the corpus, wait up to this long')
      .option('--json', 'print JSON')
      .action((dir: string, opts: { verify: boolean; wait?: string; json?: boolean }) => {
        const r = recoverCorpus(dir, { verify: opts.verify, waitMs: waitMs(opts.wait) });
        for (const s of r.skipped) process.stderr.write(`skipped ${s.reason}\n`);
        if (r.damagedManifest)
          process.stderr.write(`the damaged MANIFEST was kept as ${r.damagedManifest}\n`);
        printInfo(r.info, opts.json, {
          recovered: `${r.info.segments} segment(s)`,
          skipped: String(r.skipped.length),
        });
      }),
  );
  return corpus;
}
