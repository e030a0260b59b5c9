// `maxsim corpus build | append | info | delete | get | compact | recover | unlock`: on-disk corpora
// (src/io/corpus/). Every command but build takes the corpus as its first argument, DIR.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { Command, Option } from 'commander';
import { InvalidArgumentError } from '../errors.js';
import { decodeToFloat32 } from '../floats.js';
import {
  type CorpusDType,
  type CorpusInfo,
  CorpusWriter,
  deleteDocuments,
  recoverCorpus,
} from '../io/corpus/index.js';
import { CorpusLock } from '../io/corpus/lock.js';
import { buildCorpusFromFiles } from '../io/corpus-build.js';
import { writeNpy } from '../io/npy.js';
import { openCorpus } from '../ops/corpus-search.js';
import type { FloatDType } from '../tensor.js';
import { grouped, interruptSignal, printTable } from './common.js';
import { indexAfterWrite, indexCommand, indexRows } from './corpus-index.js';
import { buildFromTexts, type TextBuildOptions, textOptions } from './corpus-texts.js';
import { refuseInsideCorpus } from './out-path.js';
import { Progress } from './progress.js';

export { refuseInsideCorpus };

interface BuildOptions {
  docs?: string;
  docOffsets?: string;
  docLengths?: string;
  docScales?: string;
  ids?: string;
  out: string;
  dtype?: string;
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

function printInfo(
  info: CorpusInfo,
  json: boolean | undefined,
  extra: Record<string, string> = {},
  /** Fields of the JSON form only. */
  jsonOnly: Record<string, unknown> = {},
) {
  if (json) {
    console.log(JSON.stringify({ ...info, ...extra, ...jsonOnly }));
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
      ['live / deleted', `${grouped(info.live)} / ${grouped(info.deleted)}`],
      ['tokens', grouped(info.tokens)],
      ['longest document', grouped(info.maxLength)],
      ['segments', String(info.segments)],
      ['ids', info.hasIds ? 'yes' : 'no (indices)'],
      ['files', gib(info.bytes)],
      ['generation', String(info.generation)],
      ...indexRows(info),
      ...Object.entries(extra),
    ],
  );
}

/** Ids from a file, one per line (a trailing newline is fine; blank lines are refused). */
export function readIdList(file: string): string[] {
  let text: string;
  try {
    text = fs.readFileSync(file === '-' ? 0 : file, 'utf8');
  } catch (e) {
    throw new InvalidArgumentError(
      '--ids',
      'a readable file of ids, one per line',
      `${file} (${(e as NodeJS.ErrnoException).code ?? e})`,
    );
  }
  const ids = text.replace(/\r?\n$/, '').split(/\r?\n/);
  const blank = ids.indexOf('');
  if (blank >= 0)
    throw new InvalidArgumentError(
      '--ids',
      'one id per line, no blank lines',
      `${file} (line ${blank + 1} is blank)`,
    );
  return ids;
}

function waitMs(seconds: string | undefined): number | undefined {
  if (seconds === undefined) return undefined;
  const s = Number(seconds);
  if (!(Number.isFinite(s) && s >= 0))
    throw new InvalidArgumentError('--wait', 'a number of seconds >= 0', JSON.stringify(seconds));
  return s * 1000;
}

function buildAction(append: boolean) {
  return async (...args: unknown[]) => {
    // build: (options); append: (dir, options) with --out kept as an alias of DIR
    const opts = args[append ? 1 : 0] as BuildOptions & TextBuildOptions;
    const dir = append ? (args[0] as string | undefined) : undefined;
    if (append) {
      if (dir !== undefined && opts.out !== undefined && path.resolve(dir) !== path.resolve(opts.out))
        throw new InvalidArgumentError(
          'DIR',
          'one corpus directory (DIR, or --out as its alias)',
          `${dir} and --out ${opts.out}`,
        );
      opts.out = (dir ?? opts.out)!;
      if (opts.out === undefined)
        throw new InvalidArgumentError(
          'DIR',
          'the corpus directory to append to',
          'none (maxsim corpus append DIR --docs ...)',
        );
    } else refuseInsideCorpus(path.dirname(path.resolve(opts.out)), '--out');
    if (!append && opts.texts !== undefined) {
      if (opts.docs !== undefined) throw new InvalidArgumentError('--docs / --texts', 'one of them', 'both');
      return buildFromTexts(opts, DTYPES[opts.dtype ?? 'fp16']);
    }
    if (opts.docs === undefined)
      throw new InvalidArgumentError(
        '--docs',
        append ? 'a documents spec' : 'a documents spec (or --texts)',
        'nothing',
      );
    let bar: Progress | undefined;
    const interrupt = interruptSignal();
    const info = await buildCorpusFromFiles({
      docs: opts.docs,
      docOffsets: opts.docOffsets,
      docLengths: opts.docLengths,
      docScales: opts.docScales,
      ids: opts.ids,
      out: opts.out,
      // append: no default, so a --dtype given is checked against the corpus's
      dtype: opts.dtype === undefined ? undefined : DTYPES[opts.dtype],
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
    const { clamped, ...written } = info;
    // an indexed corpus: the new segment is encoded against the existing centroids (drift reported)
    const published = (append && (await indexAfterWrite(opts.out, waitMs(opts.wait)))) || written;
    if (clamped > 0)
      process.stderr.write(
        `clamped ${clamped} value${clamped === 1 ? '' : 's'} beyond the ${published.dtype} range to its largest finite value\n`,
      );
    printInfo(published, opts.json, opts.clamp ? { clamped: String(clamped) } : {});
  };
}

function inputOptions(command: Command): Command {
  return command
    .option(
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

/** `corpus build`: a new corpus from files or texts. */
function buildCommand(): Command {
  return textOptions(
    inputOptions(
      new Command('build').description(
        'write a new corpus from .npy / .safetensors documents (streamed), or from texts with --texts --model',
      ),
    ),
  )
    .requiredOption('--out <dir>', 'the corpus directory to create (e.g. docs.msx)')
    .addOption(new Option('--dtype <dtype>', 'storage dtype').choices(Object.keys(DTYPES)).default('fp16'))
    .action(buildAction(false));
}

/** `corpus append`: a new segment. */
function appendCommand(): Command {
  return inputOptions(
    new Command('append').description('add documents to a corpus (a new segment, published atomically)'),
  )
    .argument('[dir]', 'the corpus directory to append to')
    .addOption(new Option('--out <dir>', 'the corpus directory (an alias of DIR)').hideHelp())
    .addOption(
      new Option('--dtype <dtype>', "the corpus's storage dtype (refused when it is another)")
        .choices(Object.keys(DTYPES))
        .hideHelp(),
    )
    .action(buildAction(true));
}

/** `corpus info`: the header, every checksum verified. */
function infoCommand(): Command {
  return new Command('info')
    .description(
      'print a corpus header and verify every checksum: token segments, tombstones and index files (a damaged file is named, exit 1)',
    )
    .argument('<dir>', 'the corpus directory')
    .option(
      '--no-verify',
      'skip reading the token and index data (headers, sizes, offsets, ids and tombstones are always checked)',
    )
    .option('--json', 'print JSON')
    .action((dir: string, opts: { verify: boolean; json?: boolean }) => {
      const c = openCorpus(dir);
      if (opts.verify) {
        const bar = new Progress('verify', c.info.tokenBytes);
        c.verify((p) => bar.update(p.bytes));
        bar.finish();
      }
      printInfo(c.info, opts.json, { checksums: opts.verify ? 'ok' : 'not read (--no-verify)' });
    });
}

/** `corpus delete`: tombstones by id. */
function deleteCommand(): Command {
  return new Command('delete')
    .description(
      'delete documents by id (tombstones published atomically; searches and get skip them; `compact` reclaims the space)',
    )
    .argument('<dir>', 'the corpus directory')
    .requiredOption(
      '--ids <file>',
      'ids to delete, one per line (indices for a corpus without ids; - for stdin)',
    )
    .option(
      '--ignore-missing',
      'skip ids that are not live documents (unknown or deleted already) instead of failing: a retried delete succeeds',
    )
    .option('--wait <seconds>', 'when another writer holds the corpus, wait up to this long')
    .option('--json', 'print the corpus summary as JSON')
    .action((dir: string, opts: { ids: string; wait?: string; json?: boolean; ignoreMissing?: boolean }) => {
      const r = deleteDocuments(dir, readIdList(opts.ids), {
        waitMs: waitMs(opts.wait),
        ignoreMissing: opts.ignoreMissing === true,
      });
      if (r.absent.length > 0 && !opts.json)
        process.stderr.write(
          `skipped ${r.absent.length} id${r.absent.length === 1 ? '' : 's'} that ${r.absent.length === 1 ? 'is' : 'are'} not live documents (--ignore-missing)\n`,
        );
      printInfo(r.info, opts.json, { 'deleted now': String(r.deleted.length) }, { absent: r.absent });
    });
}

/** `corpus get`: documents by id to .npy. */
function getCommand(): Command {
  return new Command('get')
    .description(
      'write documents by id to .npy: float32 tokens [T, d] and int64 offsets [B+1], in request order',
    )
    .argument('<dir>', 'the corpus directory')
    .requiredOption('--ids <file>', 'ids, one per line (indices for a corpus without ids; - for stdin)')
    .requiredOption('--out <file.npy>', 'the tokens, float32 [T, d] (int8 corpora: dequantized)')
    .requiredOption('--out-offsets <file.npy>', 'the token offsets of the documents, int64 [B+1]')
    .action((dir: string, opts: { ids: string; out: string; outOffsets: string }) => {
      refuseInsideCorpus(opts.out, '--out');
      refuseInsideCorpus(opts.outOffsets, '--out-offsets');
      const c = openCorpus(dir);
      const docs = c.get(readIdList(opts.ids));
      const dim = docs.dim;
      const total = docs.lengths.reduce((a, b) => a + b, 0);
      const out = new Float32Array(total * dim);
      const offsets = new BigInt64Array(docs.count + 1);
      let at = 0;
      for (let i = 0; i < docs.count; i++) {
        const n = docs.lengths[i];
        const rows = docs.data.subarray(docs.starts[i] * dim, (docs.starts[i] + n) * dim);
        if (docs.dtype === 'int8') {
          for (let t = 0; t < n; t++) {
            const scale = docs.scales![docs.starts[i] + t];
            for (let j = 0; j < dim; j++) out[(at + t) * dim + j] = rows[t * dim + j] * scale;
          }
        } else out.set(decodeToFloat32(rows, docs.dtype as FloatDType, dim), at * dim);
        at += n;
        offsets[i + 1] = BigInt(at);
      }
      writeNpy(opts.out, { dtype: 'float32', shape: [total, dim], data: out });
      writeNpy(opts.outOffsets, { dtype: 'int64', shape: [docs.count + 1], data: offsets });
      process.stderr.write(`wrote ${docs.count} document(s), ${total} token(s)\n`);
    });
}

/** `corpus compact`: the live documents into one segment. */
function compactCommand(): Command {
  return new Command('compact')
    .description(
      'rewrite the live documents into one fresh segment without tombstones (crash-safe; document indices change)',
    )
    .argument('<dir>', 'the corpus directory')
    .option('--wait <seconds>', 'when another writer holds the corpus, wait up to this long')
    .option('--json', 'print the corpus summary as JSON')
    .action(async (dir: string, opts: { wait?: string; json?: boolean }) => {
      let bar: Progress | undefined;
      const compacted = CorpusWriter.compact(dir, {
        waitMs: waitMs(opts.wait),
        onProgress: (done, total) => {
          bar ??= new Progress('compact', total);
          bar.update(done);
        },
      });
      bar?.finish();
      printInfo((await indexAfterWrite(dir, waitMs(opts.wait))) ?? compacted, opts.json);
    });
}

/** `corpus recover`: a MANIFEST rebuilt from the segments. */
function recoverCommand(): Command {
  return new Command('recover')
    .description(
      'rebuild a lost or damaged MANIFEST from the intact segment and index files, deletions kept (deletes nothing; a damaged MANIFEST is kept as MANIFEST.damaged-<time>, a segment left out as <segment>.left-out-<generation>)',
    )
    .argument('<dir>', 'the corpus directory')
    .option(
      '--no-verify',
      'adopt segments and index files without re-reading their data (headers, offsets, ids and index descriptions are checked)',
    )
    .option('--wait <seconds>', 'when a writer holds the corpus, wait up to this long')
    .option('--json', 'print JSON')
    .action((dir: string, opts: { verify: boolean; wait?: string; json?: boolean }) => {
      const r = recoverCorpus(dir, { verify: opts.verify, waitMs: waitMs(opts.wait) });
      for (const s of r.skipped)
        process.stderr.write(`skipped ${s.reason}${s.movedTo ? ` (kept as ${s.movedTo})` : ''}\n`);
      if (r.damagedManifest) process.stderr.write(`the damaged MANIFEST was kept as ${r.damagedManifest}\n`);
      printInfo(r.info, opts.json, {
        recovered: `${r.info.segments} segment(s)`,
        skipped: String(r.skipped.length),
      });
    });
}

/** `corpus unlock`: a LOCK left behind, removed on request. */
function unlockCommand(): Command {
  return new Command('unlock')
    .description(
      "remove the corpus's LOCK when no writer provably holds it (a lock left by a crashed writer, or one whose owner cannot be told apart from another process); a running writer's lock is refused",
    )
    .argument('<dir>', 'the corpus directory')
    .option('--force', 'remove it even when a running writer holds it (that writer then publishes nothing)')
    .option('--json', 'print JSON')
    .action((dir: string, opts: { force?: boolean; json?: boolean }) => {
      const r = CorpusLock.unlock(dir, { force: opts.force === true });
      if (opts.json) console.log(JSON.stringify(r));
      else if (r.removed) console.log(`removed ${path.join(dir, 'LOCK')} (it held ${r.record})`);
      else console.log(`${dir} is not locked`);
    });
}

export function corpusCommand(): Command {
  const corpus = new Command('corpus').description(
    'build, grow and inspect on-disk corpora (a directory, e.g. docs.msx)',
  );
  corpus.addCommand(buildCommand());
  corpus.addCommand(appendCommand());
  corpus.addCommand(infoCommand());
  corpus.addCommand(deleteCommand());
  corpus.addCommand(getCommand());
  corpus.addCommand(compactCommand());
  corpus.addCommand(indexCommand(printInfo, waitMs));
  corpus.addCommand(recoverCommand());
  corpus.addCommand(unlockCommand());
  // Subcommands made here inherit nothing from the program (main() copies its settings to `corpus`
  // only, after this returns): copied just before dispatch, usage errors of `corpus <sub>` leave
  // through main()'s exit path like every other (`maxsim: ...`, exit code 2).
  corpus.hook('preSubcommand', (self, sub) => {
    sub.copyInheritedSettings(self);
  });
  return corpus;
}
