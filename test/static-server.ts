// A read-only static file server on loopback for the headless-browser runs (test/browser.test.ts,
// bench/wasm-browser.ts): GET only, each URL prefix mapped to one folder, nothing outside them.
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as path from 'node:path';

const TYPES: Record<string, string> = {
  '.html': 'text/html',
  '.js': 'text/javascript',
  '.mjs': 'text/javascript',
  '.wasm': 'application/wasm',
  '.map': 'application/json',
};

/**
 * Serves `roots` (URL prefix, e.g. '/' or '/maxsim-web/', -> folder; the longest prefix wins) and a
 * blank page titled `title` at '/'. Resolves with the server and its origin.
 */
export function serveStatic(
  roots: Record<string, string>,
  title: string,
): Promise<{ server: http.Server; origin: string }> {
  const prefixes = Object.keys(roots).sort((a, b) => b.length - a.length);
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const prefix = prefixes.find((p) => url.pathname.startsWith(p));
    const root = prefix === undefined ? undefined : roots[prefix];
    const file =
      root && path.resolve(root, `./${decodeURIComponent(url.pathname.slice((prefix as string).length))}`);
    const ok = req.method === 'GET' && file && file.startsWith(root + path.sep) && fs.existsSync(file);
    if (!ok || fs.statSync(file).isDirectory()) {
      res.writeHead(url.pathname === '/' ? 200 : 404, { 'content-type': 'text/html' });
      res.end(url.pathname === '/' ? `<!doctype html><title>${title}</title>` : 'not found');
      return;
    }
    res.writeHead(200, { 'content-type': TYPES[path.extname(file)] ?? 'application/octet-stream' });
    fs.createReadStream(file).pipe(res);
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({ server, origin: `http://127.0.0.1:${(server.address() as { port: number }).port}` }),
    ),
  );
}
