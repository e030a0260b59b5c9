// The directory of a new corpus: made or checked, never anything in it deleted that a writer did not create.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { InvalidArgumentError } from '../../errors.js';
import { errnoWords } from '../text-file.js';
import { FORMAT, LEFTOVER_NAME, MANIFEST, SEGMENT_NAME } from './format.js';
import { LOCK_FILE, LOCK_TEMP_NAME } from './lock.js';

// ---- the directory of a new corpus ----

export function refuseOut(dir: string, why: string): never {
  throw new InvalidArgumentError('out', 'a new or empty directory for the corpus', `${dir} (${why})`);
}

/** Makes the directory of a new corpus, or checks an existing one; true when this call made it. */
export function prepareNewDirectory(dir: string): boolean {
  const resolved = path.resolve(dir);
  if (resolved === path.parse(resolved).root) refuseOut(dir, 'the file-system root');
  let st: fs.Stats | undefined;
  // file-system errors as one line naming the path (ENOTDIR under a file, EACCES, EROFS, ...)
  const refuseErrno = (e: unknown): never => {
    const code = (e as NodeJS.ErrnoException).code;
    refuseOut(
      dir,
      code === 'ENOTDIR'
        ? 'a path through something that is not a directory'
        : code === 'ENOENT'
          ? 'the file system does not let a directory be made there'
          : errnoWords(e),
    );
  };
  try {
    st = fs.lstatSync(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') refuseErrno(e);
  }
  if (!st) {
    try {
      makeParents(path.dirname(resolved));
    } catch (e) {
      refuseErrno(e);
    }
    try {
      fs.mkdirSync(dir);
      return true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') refuseErrno(e);
      st = fs.lstatSync(dir); // made by someone else meanwhile: check it like any existing one
    }
  }
  if (st.isSymbolicLink()) refuseOut(dir, 'a symbolic link');
  if (!st.isDirectory()) refuseOut(dir, 'an existing file');
  checkNewDirectory(dir, false);
  return false;
}

// mkdir -p, one level at a time: Node's recursive mkdirSync never returns for a path under /proc
export function makeParents(dir: string) {
  const missing: string[] = [];
  for (let d = dir; !fs.existsSync(d); d = path.dirname(d)) {
    if (path.dirname(d) === d) break;
    missing.push(d);
  }
  for (const d of missing.reverse()) {
    try {
      fs.mkdirSync(d);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
  }
}

// An existing directory may become a corpus only when it holds nothing but our own temporaries
// (an interrupted build); with `locked`, those are removed.
export function checkNewDirectory(dir: string, locked: boolean) {
  const names = fs.readdirSync(dir);
  if (names.includes(MANIFEST))
    throw new InvalidArgumentError(
      'out',
      'a path where no corpus exists yet (use append to add documents)',
      `${dir} (a corpus)`,
    );
  const segments = names.filter((n) => SEGMENT_NAME.test(n));
  if (segments.length > 0)
    refuseOut(
      dir,
      `it holds ${segments.length} corpus segment(s) but no MANIFEST; \`maxsim corpus recover ${dir}\` rebuilds the MANIFEST from them`,
    );
  const others = names.filter((n) => !LEFTOVER_NAME.test(n) && n !== LOCK_FILE && !LOCK_TEMP_NAME.test(n));
  if (others.length > 0)
    refuseOut(dir, `not empty: ${others.length} entries such as ${JSON.stringify(others[0])}`);
  if (locked) for (const n of names) if (LEFTOVER_NAME.test(n)) fs.rmSync(path.join(dir, n), { force: true });
}

export function removeEmptyDirectory(dir: string) {
  try {
    fs.rmdirSync(dir); // fails unless empty: never removes what someone else put there
  } catch {
    // not empty or gone: leave it
  }
}

/**
 * The corpus directory that `file` lies in (or is), if any: the nearest directory on its real path,
 * the file itself included, that holds a maxsim MANIFEST or a segment file (a corpus that lost its
 * MANIFEST still counts). Writing there would put foreign bytes in a corpus, or overwrite one of its
 * files.
 */
export function corpusHolding(file: string): string | undefined {
  let at = path.resolve(file);
  // the deepest part of the path that exists, through its symbolic links
  const rest: string[] = [];
  for (;;) {
    try {
      at = path.join(fs.realpathSync(at), ...rest.reverse());
      break;
    } catch {
      const parent = path.dirname(at);
      if (parent === at) break;
      rest.push(path.basename(at));
      at = parent;
    }
  }
  for (let dir = at; ; dir = path.dirname(dir)) {
    let names: string[] = [];
    try {
      if (fs.statSync(dir).isDirectory()) names = fs.readdirSync(dir);
    } catch {
      // not there (yet) or not readable: nothing of a corpus to protect in it
    }
    if (names.some((n) => SEGMENT_NAME.test(n)) || (names.includes(MANIFEST) && isCorpusManifest(dir)))
      return dir;
    if (path.dirname(dir) === dir) return undefined;
  }
}

function isCorpusManifest(dir: string): boolean {
  try {
    const fd = fs.openSync(path.join(dir, MANIFEST), fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
    try {
      const head = Buffer.alloc(64);
      const n = fs.readSync(fd, head, 0, 64, 0);
      return head.toString('utf8', 0, n).startsWith(`{"format":"${FORMAT}"`);
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return false;
  }
}
