// A controller and its workers as child processes, for the integration
// tests that go through the cluster: start-up lines awaited, every process
// killed at the end (killAll), worker registration awaited.
import { spawn } from 'node:child_process';

import { cairnBin, modelPath, waitFor } from './helpers.mjs';

export const HEARTBEAT_MS = 300;
// Ten heartbeats: on a loaded 2-core CI host a controller may answer a few
// heartbeats late (each has a 500 ms deadline), and a worker dropped then
// re-registered mid-test resets the counters the tests read.
export const WORKER_TIMEOUT_MS = 3000;

const children = new Set();
export function killAll() {
  for (const p of children) p.kill('SIGKILL');
}

// Starts `cairn <args>` and resolves with the first match of each regex on stderr.
export function startProc(args, patterns, what, timeoutMs = 30000) {
  const proc = spawn(cairnBin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  children.add(proc);
  let stderr = '';
  const exited = new Promise((resolve) =>
    proc.on('exit', (code, signal) => {
      children.delete(proc);
      resolve({ code, signal });
    }));
  const matched = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what}: no start-up lines in ${timeoutMs} ms:\n${stderr}`)),
      timeoutMs);
    const check = () => {
      const found = patterns.map((re) => stderr.match(re));
      if (found.every(Boolean)) {
        clearTimeout(timer);
        resolve(found.map((m) => m[1]));
      }
    };
    proc.stderr.on('data', (d) => {
      stderr += d.toString();
      check();
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited (${code ?? signal}):\n${stderr}`));
    });
  });
  return {
    proc, exited, matched, stderr: () => stderr,
    async kill(signal = 'SIGKILL') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      await exited;
    },
  };
}

export async function startController(extra = [], { httpPort = 0, grpcPort = 0 } = {}) {
  const p = startProc(['controller', '--host', '127.0.0.1', '--http-port', String(httpPort),
    '--grpc-port', String(grpcPort), '--heartbeat-ms', String(HEARTBEAT_MS),
    '--worker-timeout-ms', String(WORKER_TIMEOUT_MS), '--http-threads', '2', ...extra],
  [/listening on (http:\/\/\S+)/, /grpc listening on (\S+)/], 'cairn controller');
  const [url, grpc] = await p.matched;
  return { ...p, url, grpc, httpPort: Number(new URL(url).port), grpcPort: Number(grpc.split(':').pop()) };
}

export async function startWorker(controllerGrpc, name, model = modelPath, extra = []) {
  const p = startProc(['worker', '-m', model, '--controller', controllerGrpc, '--name', name,
    '--listen', '127.0.0.1:0', '--heartbeat-ms', String(HEARTBEAT_MS), '-t', '1', ...extra],
  [/worker listening on (\S+)/, /registered with \S+ as (\S+)/], `cairn worker ${name}`);
  const [address, id] = await p.matched;
  return { ...p, name, address, id };
}

export async function workerCount(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = text.match(/^cairn_workers (\d+)$/m);
  return m ? Number(m[1]) : -1;
}

export async function waitWorkers(url, n, timeoutMs) {
  await waitFor(async () => {
    try {
      const c = await workerCount(url);
      return c === n ? true : `cairn_workers ${c}`;
    } catch (e) {
      return String(e);
    }
  }, timeoutMs, `${n} workers registered`);
}

