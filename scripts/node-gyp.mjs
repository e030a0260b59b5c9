// Where node-gyp is: npm_config_node_gyp (set when npm runs a script), else the copy npm ships
// inside itself next to the running node, else a project dependency; undefined when none is found.
// Shared by build-native.mjs, pack-all.mjs and test/pin-no-v8.test.ts.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';

export function findNodeGyp(root) {
  const env = process.env.npm_config_node_gyp;
  const candidates = [
    ...(env ? [env] : []),
    join(
      dirname(process.execPath),
      '..',
      'lib',
      'node_modules',
      'npm',
      'node_modules',
      'node-gyp',
      'bin',
      'node-gyp.js',
    ),
    join(root, 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'),
  ];
  return candidates.find((c) => existsSync(c));
}
