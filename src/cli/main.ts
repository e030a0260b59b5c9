#!/usr/bin/env node
// The `maxsim` command line. Errors print one line, `maxsim: <message>`, on stderr: exit code 2 for usage
// errors (reported by commander), 1 for everything else; --debug adds the stack trace.
import { Command, CommanderError } from 'commander';
import { isAbortError } from '../abort.js';
import { version } from '../version.js';
import { benchCommand } from './bench.js';
import { chamferCommand } from './chamfer.js';
import { INTERRUPTED_EXIT_CODE } from './common.js';
import { corpusCommand } from './corpus.js';
import { demoCommand } from './demo.js';
import { encodeCommand } from './encode.js';
import { fidelityCommand } from './fidelity.js';
import { infoCommand } from './info.js';
import { Progress } from './progress.js';
import { quantizeCommand } from './quantize.js';
import { queryTextOptions } from './query-text.js';
import { scoreCommand } from './score.js';
import { searchCommand } from './search.js';
import { serveCommand } from './serve.js';
import { verifyCommand } from './verify.js';

const USAGE_EXIT_CODE = 2;
const RUNTIME_EXIT_CODE = 1;

function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
}

function buildProgram(): Command {
  const program = new Command('maxsim')
    .description('Late-interaction (ColBERT / ColPali) MaxSim scoring: score(Q, D) = sum_i max_j <Q_i, D_j>')
    .version(version, '-V, --version', 'print the version')
    .option('--debug', 'show stack traces on errors')
    .option('-q, --quiet', 'no progress output on stderr (errors are still printed)')
    .showSuggestionAfterError(true)
    .hook('preAction', (self) => {
      Progress.quiet = self.opts().quiet === true || process.argv.includes('--quiet');
    })
    // Throw instead of exiting, so every error leaves through main()'s single exit path.
    .exitOverride()
    .configureOutput({
      outputError: (text, write) => write(`maxsim: ${oneLine(text.replace(/^error: /, ''))}\n`),
    });
  for (const command of [
    infoCommand(),
    demoCommand(),
    scoreCommand(),
    chamferCommand(),
    queryTextOptions(searchCommand()),
    serveCommand(),
    corpusCommand(),
    quantizeCommand(),
    benchCommand(),
    verifyCommand(),
    fidelityCommand(),
    encodeCommand(),
  ]) {
    // addCommand (unlike .command()) does not inherit exitOverride and the error output: copied to
    // every level (`corpus build` too), so every usage error is one `maxsim:` line with exit code 2
    program.addCommand(inherit(command, program));
  }
  return program;
}

function inherit(command: Command, parent: Command): Command {
  command.copyInheritedSettings(parent);
  for (const sub of command.commands) inherit(sub, command);
  return command;
}

// Library wording in errors that reach the command line, said with the flags instead.
const CLI_WORDING: [RegExp, string][] = [
  [/pass checkFinite: false/g, 'pass --no-check-finite'],
  [/pass clamp: true \/ --clamp/g, 'pass --clamp'],
  [/; pass \{ view: true \} for a view into a larger buffer/g, ''],
  [/; a larger buffer is a view: pass \{ view: true \}/g, ''],
  [/\(maxWork[^)]*\)/g, '(--max-work)'],
];

/** An error message as the command line says it: flags, not library option names. */
function cliWording(message: string): string {
  let out = message;
  for (const [from, to] of CLI_WORDING) out = out.replace(from, to);
  return out;
}

function reportError(error: unknown, debug: boolean): void {
  const message = cliWording(error instanceof Error ? error.message : String(error));
  process.stderr.write(`maxsim: ${oneLine(message) || 'unknown error'}\n`);
  if (debug && error instanceof Error && error.stack) process.stderr.write(`${error.stack}\n`);
}

async function main(): Promise<void> {
  // `maxsim ... | head` closes stdout early: stop quietly instead of failing on EPIPE.
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code === 'EPIPE') process.exit(process.exitCode ?? 0);
    throw error;
  });
  const program = buildProgram();
  try {
    await program.parseAsync(process.argv);
  } catch (error) {
    if (error instanceof CommanderError) {
      // Help and --version also leave through here, with exit code 0.
      process.exitCode = error.exitCode === 0 ? 0 : USAGE_EXIT_CODE;
      return;
    }
    reportError(error, program.opts().debug === true || process.argv.includes('--debug'));
    // stopped by Ctrl-C (interruptSignal): one line, and the shell's code for SIGINT
    process.exitCode = isAbortError(error) ? INTERRUPTED_EXIT_CODE : RUNTIME_EXIT_CODE;
  }
}

await main();
