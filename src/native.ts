// Loads the native addon once, lazily. Importing this module never throws: a missing or broken build
// surfaces only when a native backend is used, as a BackendUnavailableError that names the fix.
import { constants as bufferConstants } from 'node:buffer';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BackendUnavailableError } from './errors.js';

/** Package root: this file is src/native.ts, compiled to dist/src/native.js. */
export const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const addonPath = join(packageRoot, 'build', 'Release', 'maxsim_native.node');

// The addon's surface, typed loosely here; each backend module gives it a precise face.
export interface NativeAddon {
  abiVersion: number;
  cpu: Record<string, (...args: never[]) => unknown>;
  cuda: Record<string, (...args: never[]) => unknown>;
}

let cached: { addon?: NativeAddon; error?: string } | undefined;

function tryLoad(): { addon?: NativeAddon; error?: string } {
  // A switch to run as where no addon exists (tests of the wasm fallback; a locked-down host).
  if (process.env.MAXSIM_NATIVE === 'off') {
    return { error: 'the native addon is switched off (MAXSIM_NATIVE=off)' };
  }
  if (!existsSync(addonPath)) {
    return {
      error: `the native addon is not built (${addonPath} is missing); run \`npm rebuild maxsim\` (or \`npm ci\` in a checkout), which needs a C++17 compiler, make and python3`,
    };
  }
  try {
    const require = createRequire(import.meta.url);
    const addon = require(addonPath) as NativeAddon;
    if (addon.abiVersion !== 1) {
      return {
        error: `the native addon at ${addonPath} is from another version; run \`npm rebuild maxsim\``,
      };
    }
    // mapFile refuses ranges larger than this Node's largest ArrayBuffer (more would abort the process)
    (addon as unknown as { file: { setMaxArrayBuffer(bytes: number): void } }).file.setMaxArrayBuffer(
      bufferConstants.MAX_LENGTH,
    );
    return { addon };
  } catch (e) {
    const msg = e instanceof Error ? e.message : String(e);
    return { error: `the native addon failed to load (${msg.split('\n')[0]}); run \`npm rebuild maxsim\`` };
  }
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
