// File-system steps shared by every corpus writer: exact reads and writes, syncs, durable renames,
// and the fault hook tests use to fail any step.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { FormatError } from '../../errors.js';

// ---- fault injection (tests): every file-system step of a writer reports here first ----

let faultHook: ((step: string) => void) | undefined;

/** Test hook: `hook(step)` runs before each write / sync / rename of a writer and may throw. */
export function setCorpusFaultHook(hook: ((step: string) => void) | undefined): void {
  faultHook = hook;
}

export function step(name: string): void {
  faultHook?.(name);
}

export function writeAll(fd: number, bytes: Uint8Array, position: number): void {
  let done = 0;
  while (done < bytes.length) done += fs.writeSync(fd, bytes, done, bytes.length - done, position + done);
}

export function readExactly(
  fd: number,
  file: string,
  bytes: Uint8Array,
  position: number,
  what: string,
): void {
  let done = 0;
  while (done < bytes.length) {
    const n = fs.readSync(fd, bytes, done, bytes.length - done, position + done);
    if (n === 0) throw new FormatError(file, `truncated: ${what} ends past the end of the file`);
    done += n;
  }
}

export function syncDir(dir: string): void {
  step('sync-dir');
  const fd = fs.openSync(dir, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

export function bytesOf(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/**
 * Writes a new file under a temporary name (`write(fd)` fills it), syncs it, renames it into place
 * and syncs the directory. The steps report to the fault hook as `open` (default `write-<what>`),
 * then `sync-<what>` and `rename-<what>`; a failure before the rename removes the temporary.
 */
export function writeDurably(
  dir: string,
  name: string,
  token: string,
  what: string,
  write: (fd: number) => void,
  open = `write-${what}`,
): void {
  const tmp = path.join(dir, `${name}.${token}.tmp`);
  step(open);
  const fd = fs.openSync(tmp, 'wx');
  try {
    write(fd);
    step(`sync-${what}`);
    fs.fsyncSync(fd);
  } catch (e) {
    fs.closeSync(fd);
    fs.rmSync(tmp, { force: true });
    throw e;
  }
  fs.closeSync(fd);
  step(`rename-${what}`);
  fs.renameSync(tmp, path.join(dir, name));
  syncDir(dir);
}

// After a publish: files the new MANIFEST no longer names (best effort; the next writer retries).
export function removeFile(dir: string, name: string) {
  step('remove-old');
  fs.rmSync(path.join(dir, name), { force: true });
}
