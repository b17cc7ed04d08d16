// The chat page's weight and first paint: the bytes of src/webui's files (raw
// and gzip), then first paint and first contentful paint of / in headless
// Chromium against `cairn serve` (the built-in demo model), from the
// Performance API. Prints; not a test.
//   node bench/webui.mjs [--runs N]     (needs build/cairn, chromium, puppeteer-core)
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const runsArg = process.argv.indexOf('--runs');
const runs = runsArg > 0 ? Number(process.argv[runsArg + 1]) : 10;
const cairn = process.env.CAIRN_BIN || path.join(root, 'build', 'cairn');
const chromium = process.env.CAIRN_CHROMIUM || '/usr/bin/chromium';

// The files embed_assets.cmake compiles in.
const dir = path.join(root, 'src', 'webui');
const files = readdirSync(dir).filter((f) => /\.(html|js|css|svg|png)$/.test(f)).sort();
let raw = 0;
let gz = 0;
console.log('file                raw bytes  gzip bytes');
for (const f of files) {
  const bytes = readFileSync(path.join(dir, f));
  const z = gzipSync(bytes, { level: 9 }).length;
  raw += bytes.length;
  gz += z;
  console.log(`${f.padEnd(18)} ${String(bytes.length).padStart(10)} ${String(z).padStart(11)}`);
}
console.log(`${'all'.padEnd(18)} ${String(raw).padStart(10)} ${String(gz).padStart(11)}`);

function startServer() {
  const proc = spawn(cairn, ['serve', '--port', '0', '--http-threads', '2'], { stdio: ['ignore', 'ignore', 'pipe'] });
  return new Promise((resolve, reject) => {
    let err = '';
    proc.stderr.on('data', (d) => {
      err += d;
      const m = err.match(/listening on (http:\/\/\S+)/);
      if (m) resolve({ proc, url: m[1] });
    });
    proc.on('exit', (code) => reject(new Error(`cairn serve exited with ${code}: ${err}`)));
  });
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const require = createRequire(path.join(root, 'package.json'));
const puppeteer = (await import(require.resolve('puppeteer-core'))).default;
const server = await startServer();
const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: process.getuid?.() === 0 ? ['--no-sandbox'] : [],
});
try {
  const samples = { fp: [], fcp: [], dcl: [], load: [] };
  for (let i = 0; i < runs; i++) {
    // A fresh context each time: nothing cached, nothing in localStorage.
    const context = await browser.createBrowserContext();
    const page = await context.newPage();
    await page.goto(`${server.url}/`, { waitUntil: 'load' });
    const t = await page.evaluate(async () => {
      // Paint entries can land a frame after load.
      await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 50)));
      const paint = Object.fromEntries(performance.getEntriesByType('paint').map((e) => [e.name, e.startTime]));
      const nav = performance.getEntriesByType('navigation')[0];
      return { fp: paint['first-paint'], fcp: paint['first-contentful-paint'], dcl: nav.domContentLoadedEventEnd, load: nav.loadEventEnd };
    });
    for (const k of Object.keys(samples)) if (typeof t[k] === 'number') samples[k].push(t[k]);
    await context.close();
  }
  console.log(`\nChromium ${await browser.version()}, ${runs} cold loads of ${server.url}/ (median ms):`);
  console.log(`first paint ${median(samples.fp).toFixed(1)}, first contentful paint ${median(samples.fcp).toFixed(1)}, ` +
    `DOMContentLoaded ${median(samples.dcl).toFixed(1)}, load ${median(samples.load).toFixed(1)}`);
} finally {
  await browser.close();
  server.proc.kill('SIGKILL');
}
