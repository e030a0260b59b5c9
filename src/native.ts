// Loads the native addon once, lazily. Importing this module never throws: a missing or broken build
// surfaces only when a native backend is used, as a BackendUnavailableError that names the fix.
import { constants as bufferConstants } from 'node:buffer';
import { existsSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BackendUnavailableError } from './errors.js';

/** Package root: this file is src/native.ts, compiled to dist/src/native.js. */
export const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
/** A source build (a checkout, or the explicit opt-in `node scripts/build-native.mjs`). */
export const addonPath = join(packageRoot, 'build', 'Release', 'maxsim_native.node');

/** glibc or musl (an addon linked against one does not load on the other). */
function libc(): 'gnu' | 'musl' | '' {
  if (process.platform !== 'linux') return '';
  const header = (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)
    ?.header;
  return header?.glibcVersionRuntime ? 'gnu' : 'musl';
}

/** The prebuilt addon package for this platform, e.g. @maxsim/linux-x64-gnu. */
export function platformPackage(): string {
  return `@maxsim/${[process.platform, process.arch, libc()].filter(Boolean).join('-')}`;
}

const requireHere = createRequire(import.meta.url);

/** The directory of an installed package, or undefined. */
function packageDir(name: string): string | undefined {
  try {
    return dirname(requireHere.resolve(`${name}/package.json`));
  } catch {
    return undefined;
  }
}

/**
 * Where the addon may be, in the order tried: the source build (a checkout, or the opt-in
 * `node scripts/build-native.mjs`), then the platform package npm picked by its os / cpu / libc fields.
 */
export function addonCandidates(): string[] {
  const found = [addonPath];
  const dir = packageDir(platformPackage());
  if (dir) found.push(join(dir, 'maxsim_native.node'));
  return found;
}

/** The CUDA fatbins: build/kernels of a source build, else the @maxsim/cuda-kernels package. */
export function kernelDir(): string | undefined {
  const has = (d: string) => existsSync(d) && readdirSync(d).some((f) => f.endsWith('.fatbin'));
  const local = join(packageRoot, 'build', 'kernels');
  if (has(local)) return local;
  const dir = packageDir('@maxsim/cuda-kernels');
  const k = dir && join(dir, 'kernels');
  return k && has(k) ? k : undefined;
}

// The addon's surface, typed loosely here; each backend module gives it a precise face.
export interface NativeAddon {
  abiVersion: number;
  cpu: Record<string, (...args: never[]) => unknown>;
  cuda: Record<string, (...args: never[]) => unknown>;
}

let cached: { addon?: NativeAddon; error?: string } | undefined;

function missingMessage(): string {
  const pkg = platformPackage();
  return `no native addon for ${pkg.slice('@maxsim/'.length)}: the optional package ${pkg} is not installed (install it with \`npm install ${pkg}@${packageVersion()}\`, or reinstall maxsim without --omit=optional / --no-optional), or build from source with \`node node_modules/maxsim/scripts/build-native.mjs\` (needs a C++17 compiler, make and python3); the wasm backend runs without it`;
}

function packageVersion(): string {
  try {
    return (requireHere(join(packageRoot, 'package.json')) as { version: string }).version;
  } catch {
    return 'latest';
  }
}

/** Loads one addon file: the addon, or the one-line reason it cannot be used. */
function loadFile(addonFile: string): { addon?: NativeAddon; error?: string } {
  try {
    const addon = requireHere(addonFile) as NativeAddon;
    if (addon.abiVersion !== 1) return { error: `${addonFile} is from another version of maxsim` };
    return { addon };
  } catch (e) {
    const msg = e instanceof Error ? e.message : String(e);
    return { error: `${addonFile} failed to load (${msg.split('\n')[0]})` };
  }
}

function tryLoad(): { addon?: NativeAddon; error?: string } {
  // A switch to run as where no addon exists (tests of the wasm fallback; a locked-down host).
  if (process.env.MAXSIM_NATIVE === 'off') {
    return { error: 'the native addon is switched off (MAXSIM_NATIVE=off)' };
  }
  const present = addonCandidates().filter((p) => existsSync(p));
  if (present.length === 0) return { error: missingMessage() };
  // The first that loads: a build/ copied from another machine (another arch or libc) must not hide
  // the platform package that npm installed for this one.
  const failures: string[] = [];
  for (const addonFile of present) {
    // The addon finds its fatbins through MAXSIM_KERNEL_DIR when they are not next to it.
    if (!process.env.MAXSIM_KERNEL_DIR) {
      const k = kernelDir();
      if (k && k !== join(dirname(addonFile), '..', 'kernels')) process.env.MAXSIM_KERNEL_DIR = k;
    }
    const { addon, error } = loadFile(addonFile);
    if (!addon) {
      failures.push(error as string);
      continue;
    }
    // mapFile refuses ranges larger than this Node's largest ArrayBuffer (more would abort the process)
    (addon as unknown as { file: { setMaxArrayBuffer(bytes: number): void } }).file.setMaxArrayBuffer(
      bufferConstants.MAX_LENGTH,
    );
    return { addon };
  }
  const fix = packageDir(platformPackage()) ? `reinstall maxsim and ${platformPackage()}` : missingMessage();
  return {
    error: `the native addon for ${platformPackage().slice('@maxsim/'.length)} cannot be used: ${failures.join('; ')}; ${fix}`,
  };
}

/** The addon, or a BackendUnavailableError saying why it cannot be used and how to fix it. */
export function loadNative(): NativeAddon {
  cached ??= tryLoad();
  if (!cached.addon) throw new BackendUnavailableError(cached.error ?? 'native addon unavailable');
  return cached.addon;
}

/** Why the addon cannot be used, or undefined when it can. Never throws. */
export function nativeUnavailableReason(): string | undefined {
  cached ??= tryLoad();
  return cached.addon ? undefined : cached.error;
}
