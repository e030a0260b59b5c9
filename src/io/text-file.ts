// Files named on the command line: small text files (--ids, --api-key-file) are read only when they
// are regular files, so a FIFO cannot hang the command, and output files are opened so that a FIFO
// or a missing directory gets a message naming the path instead of a raw runtime error (EISDIR ...).
import * as fs from 'node:fs';
import { dirname } from 'node:path';
import { InvalidArgumentError, MaxsimError } from '../errors.js';

/** What a path that is not a readable regular file is, in words (for error messages). */
export function describePath(path: string): string {
  let st: fs.Stats;
  try {
    st = fs.statSync(path);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') {
      try {
        if (fs.lstatSync(path).isSymbolicLink())
          return `a symbolic link to ${fs.readlinkSync(path)}, which does not exist`;
      } catch {}
      return 'no such file';
    }
    return errnoWords(e);
  }
  return statWords(st);
}

/** A stat result in words: 'a directory', 'a FIFO (named pipe)', ... */
export function statWords(st: fs.Stats): string {
  if (st.isFile()) return 'a regular file';
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO (named pipe)';
  if (st.isSocket()) return 'a socket';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  return 'not a regular file';
}

/** A failed file operation's errno in words (the raw runtime message never reaches the user). */
export function errnoWords(e: unknown): string {
  const code = (e as NodeJS.ErrnoException).code;
  if (code === 'EACCES' || code === 'EPERM') return 'permission denied';
  if (code === 'EISDIR') return 'a directory';
  if (code === 'ENOSPC') return 'no space left on the device';
  if (code === 'EDQUOT') return 'the disk quota is exceeded';
  if (code === 'EROFS') return 'a read-only file system';
  if (code === 'EIO') return 'an I/O error from the device';
  if (code === 'ENOTDIR') return 'a path through something that is not a directory';
  if (code === 'ELOOP') return 'a loop of symbolic links';
  if (code === 'ENAMETOOLONG') return 'a name too long';
  return code ?? (e instanceof Error ? e.message : String(e));
}

/**
 * The text of a regular file, or an InvalidArgumentError(argument, expected, `path (what it is)`).
 * Opened non-blocking and checked on the descriptor: a FIFO is refused, never waited on.
 */
export function readTextFile(path: string, argument: string, expected: string, maxBytes = 1 << 30): string {
  let fd: number;
  try {
    fd = fs.openSync(path, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new InvalidArgumentError(
      argument,
      expected,
      `${path} (${code === 'ENOENT' ? describePath(path) : errnoWords(e)})`,
    );
  }
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) throw new InvalidArgumentError(argument, expected, `${path} (${statWords(st)})`);
    if (st.size > maxBytes)
      throw new InvalidArgumentError(
        argument,
        expected,
        `${path} (${st.size} bytes, more than the ${maxBytes} read)`,
      );
    try {
      return fs.readFileSync(fd, 'utf8');
    } catch (e) {
      throw new InvalidArgumentError(argument, expected, `${path} (${errnoWords(e)})`);
    }
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Opens `path` for writing (created or truncated). A FIFO, a directory or a missing parent directory
 * is a MaxsimError naming the path (non-blocking open: a FIFO without a reader never waits).
 */
export function openForWriting(path: string): number {
  let fd: number;
  const c = fs.constants;
  try {
    fd = fs.openSync(path, c.O_WRONLY | c.O_CREAT | c.O_TRUNC | c.O_NONBLOCK, 0o666);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const why =
      code === 'ENOENT'
        ? `the directory ${JSON.stringify(dirname(path))} does not exist`
        : code === 'ENXIO'
          ? 'a FIFO (named pipe) with no reader'
          : errnoWords(e);
    throw new MaxsimError(`cannot write ${path} (${why})`);
  }
  const st = fs.fstatSync(fd);
  if (st.isFIFO() || st.isSocket()) {
    fs.closeSync(fd);
    throw new MaxsimError(`cannot write ${path} (${statWords(st)}; write to a regular file)`);
  }
  return fd;
}

/** A write error on `path` as one line naming it. */
export function writeError(path: string, e: unknown): MaxsimError {
  return new MaxsimError(`cannot write ${path} (${errnoWords(e)})`);
}
