// The package version, read from package.json at run time so it is never out of date.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from './native.js';

export const version: string = (
  JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8')) as { version: string }
).version;
