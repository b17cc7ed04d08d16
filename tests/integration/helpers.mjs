// Shared by the integration tests: find the binary, model and client; start
// `cairn serve` on a free port and wait until it is ready.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '..', '..');
export const cairnBin = process.env.CAIRN_BIN || path.join(repoRoot, 'build', 'cairn');
export const sharedDir = process.env.CAIRN_SHARED_DIR || path.resolve(repoRoot, '..', 'shared');
export const modelPath = path.join(sharedDir, 'models', 'stories260K.gguf');
export const goldenPath = path.join(sharedDir, 'golden', 'stories260K.json');

// Why the suite cannot run here, or null when it can.
export function skipReason() {
  if (!existsSync(cairnBin)) return `skipped: ${cairnBin} is not built`;
  if (!existsSync(modelPath)) return `skipped: ../shared/models/stories260K.gguf is not available`;
  if (!existsSync(goldenPath)) return `skipped: ../shared/golden/stories260K.json is not available`;
  try {
    createRequire(path.join(repoRoot, 'package.json')).resolve('openai');
  } catch {
    return 'skipped: the openai package is not installed (run scripts/install-node-deps.sh)';
  }
  return null;
}

export async function loadOpenAI() {
  const require = createRequire(path.join(repoRoot, 'package.json'));
  const mod = await import(require.resolve('openai'));
  return mod.default ?? mod.OpenAI;
}

export function golden() {
  return JSON.parse(readFileSync(goldenPath, 'utf8'));
}

// Starts `cairn serve` on port 0 with stories260K; resolves once /health is 200.
export async function startServer(extraArgs = [], { model = modelPath } = {}) {
  const args = ['serve', '-m', model, '--port', '0', '--http-threads', '2', ...extraArgs];
  const proc = spawn(cairnBin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no "listening on" line in 30 s:\n${stderr}`)), 30000);
    proc.stderr.on('data', (d) => {
      stderr += d.toString();
      const m = stderr.match(/listening on (http:\/\/[^\s]+)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    exited.then(({ code }) => reject(new Error(`cairn serve exited with ${code}:\n${stderr}`)));
  });
  const deadline = Date.now() + 60000;
  for (;;) {
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 200) break;
    } catch {}
    if (Date.now() > deadline) throw new Error(`server never became ready:\n${stderr}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url,
    proc,
    exited,
    stderr: () => stderr,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      await exited;
    },
  };
}

// The values of a Prometheus metric (all label sets summed).
export async function metric(url, name, headers = {}) {
  const text = await (await fetch(`${url}/metrics`, { headers })).text();
  let sum = 0;
  let found = false;
  for (const line of text.split('\n')) {
    if (line.startsWith(name + '{') || line.startsWith(name + ' ')) {
      sum += Number(line.slice(line.lastIndexOf(' ') + 1));
      found = true;
    }
  }
  if (!found) throw new Error(`metric ${name} missing from /metrics`);
  return sum;
}

export async function waitFor(check, timeoutMs = 15000, what = 'condition') {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    last = await check();
    if (last === true) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${last})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
