// `cairn worker` as a process: it registers with a controller (a fake one in
// Python: node has no gRPC client here), heartbeats, serves Generate, and on
// SIGTERM deregisters, refuses new work, finishes what runs and exits 0.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { cairnBin, repoRoot, waitFor } from './helpers.mjs';

const python = '/usr/bin/python3';
const harness = path.join(repoRoot, 'tests', 'integration', 'worker_harness.py');
const pyDir = path.join(path.dirname(cairnBin), 'python');

function skipReason() {
  if (!existsSync(cairnBin)) return `skipped: ${cairnBin} is not built`;
  if (!existsSync(path.join(pyDir, 'cairn', 'v1', 'controller_pb2.py')))
    return `skipped: ${pyDir}/cairn/v1/*_pb2.py are not built (target cairn_python_protos)`;
  const probe = spawnSync(python, ['-c', 'import grpc'], { stdio: 'ignore' });
  if (probe.status !== 0) return `skipped: ${python} has no grpc module`;
  return null;
}
const skip = skipReason();

// Every child is killed at the end, passed or failed.
const children = new Set();
function track(proc) {
  children.add(proc);
  proc.on('exit', () => children.delete(proc));
  return proc;
}
function killAll() {
  for (const p of children) p.kill('SIGKILL');
}

// A line-reader over a child's stream: collects lines, resolves waits.
function lines(stream) {
  const all = [];
  let buf = '';
  const waiters = [];
  stream.on('data', (d) => {
    buf += d.toString();
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      all.push(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
    for (const w of [...waiters]) w();
  });
  return {
    all,
    text: () => all.join('\n') + '\n' + buf,
    // Resolves with the first line matching `pred` (from `from` on).
    wait(pred, what, timeoutMs = 30000, from = 0) {
      return new Promise((resolve, reject) => {
        const check = () => {
          for (let k = from; k < all.length; k++) {
            if (pred(all[k])) {
              clearTimeout(timer);
              waiters.splice(waiters.indexOf(check), 1);
              resolve(all[k]);
              return true;
            }
          }
          return false;
        };
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(check), 1);
          reject(new Error(`timed out waiting for ${what}; got:\n${all.join('\n')}\n${buf}`));
        }, timeoutMs);
        waiters.push(check);
        check();
      });
    },
  };
}

const json = (l) => { try { return JSON.parse(l); } catch { return null; } };

async function startController() {
  const proc = track(spawn(python, [harness, pyDir, 'controller'], { stdio: ['pipe', 'pipe', 'pipe'] }));
  const out = lines(proc.stdout);
  const err = lines(proc.stderr);
  const first = await out.wait((l) => json(l)?.port || json(l)?.error, 'the fake controller port', 30000)
    .catch((e) => { throw new Error(`${e.message}\nstderr: ${err.text()}`); });
  const port = json(first).port;
  assert.ok(port > 0, first);
  const events = (kind) => out.all.map(json).filter((e) => e && e.event === kind);
  return { proc, out, address: `127.0.0.1:${port}`, events };
}

function startWorker(controller, extra = []) {
  const proc = track(spawn(cairnBin, ['worker', '--controller', controller, '--name', 'it-worker',
    '--heartbeat-ms', '100', '--threads', '1', ...extra], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, CAIRN_CACHE_DIR: cacheDir },
  }));
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const err = lines(proc.stderr);
  return { proc, err, exited };
}

// Waits for the worker's two start-up lines; returns its address and the
// registration line.
async function listeningAndRegistered(w) {
  const listening = await w.err.wait((l) => l.startsWith('cairn: worker listening on '), 'listening line');
  const address = listening.slice('cairn: worker listening on '.length).trim();
  const registered = await w.err.wait((l) => l.startsWith('cairn: registered with '), 'registered line');
  return { address, registered };
}

function generate(address, maxTokens) {
  const proc = track(spawn(python, [harness, pyDir, 'generate', address, 'Once upon a time', String(maxTokens)],
    { stdio: ['ignore', 'pipe', 'pipe'] }));
  const out = lines(proc.stdout);
  const err = lines(proc.stderr);
  const done = new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
  return {
    out,
    async result() {
      const code = await done;
      const evs = out.all.map(json).filter(Boolean);
      return { code, evs, stderr: err.text(), tokens: evs.filter((e) => 'token' in e).length,
        finish: evs.find((e) => 'finish' in e), status: evs.find((e) => 'status' in e) };
    },
  };
}

let cacheDir;
let modelPath;

describe('cairn worker process', { skip: skip ?? false }, () => {
  before(() => {
    cacheDir = mkdtempSync(path.join(os.tmpdir(), 'cairn-worker-it-'));
    // A random model big enough that a long request is still running when the
    // signal comes, small enough to write in a moment.
    modelPath = path.join(cacheDir, 'slow.gguf');
    const r = spawnSync(cairnBin, ['make-model', modelPath, '--dim', '256', '--layers', '4',
      '--heads', '4', '--kv-heads', '4', '--ffn', '768', '--ctx', '2048', '--type', 'f32', '-t', '1'],
    { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
  });
  after(() => {
    killAll();
    if (cacheDir) rmSync(cacheDir, { recursive: true, force: true });
  });

  test('registers, heartbeats, serves Generate', async () => {
    const c = await startController();
    const w = startWorker(c.address);  // no -m: the built-in demo model
    try {
      const { address, registered: reg } = await listeningAndRegistered(w);
      assert.match(address, /^127\.0\.0\.1:\d+$/);
      assert.match(reg, new RegExp(`^cairn: registered with ${c.address} as fake-1$`));
      const r0 = c.events('register')[0];
      assert.equal(r0.address, address, 'the worker advertises its bound address');
      assert.equal(r0.name, 'it-worker');
      assert.equal(r0.models.length, 1);
      await waitFor(() => c.events('heartbeat').filter((h) => h.id === 'fake-1').length >= 2, 10000, 'heartbeats');

      const g = generate(address, 8);
      const res = await g.result();
      assert.equal(res.code, 0, res.stderr);
      assert.equal(res.status?.status, 'OK', JSON.stringify(res.evs));
      assert.equal(res.tokens, 8);
      assert.equal(res.finish?.finish, 'length');
      assert.equal(res.finish?.completion_tokens, 8);

      w.proc.kill('SIGTERM');
      const { code, signal } = await w.exited;
      assert.equal(signal, null);
      assert.equal(code, 0, w.err.text());
      assert.ok(c.events('deregister').some((d) => d.id === 'fake-1' && d.known), 'deregistered');
    } finally {
      w.proc.kill('SIGKILL');
      c.proc.kill('SIGKILL');
    }
  });

  test('SIGTERM deregisters first, refuses new work and finishes the running request', async () => {
    const c = await startController();
    const w = startWorker(c.address, ['-m', modelPath, '--drain-seconds', '120']);
    try {
      const { address } = await listeningAndRegistered(w);

      const maxTokens = 1500;
      const running = generate(address, maxTokens);
      await running.out.wait((l) => json(l)?.token !== undefined, 'the first token', 60000);
      w.proc.kill('SIGTERM');
      await waitFor(() => c.events('deregister').length >= 1, 15000, 'the deregister call');
      const draining = await w.err.wait((l) => /draining: \d+ running, \d+ waiting/.test(l), 'the draining log line');
      assert.match(draining, /draining: 1 running, 0 waiting/, 'the request was still running at the signal');

      // Deregistered: new work is refused (or finds the port closed).
      const late = await generate(address, 4).result();
      assert.equal(late.status?.status, 'UNAVAILABLE', JSON.stringify(late.evs));

      const res = await running.result();
      assert.equal(res.status?.status, 'OK', JSON.stringify(res.evs.slice(-3)) + res.stderr);
      assert.equal(res.finish?.finish, 'length');
      assert.equal(res.tokens, maxTokens, 'the running request streamed to the end');
      const { code, signal } = await w.exited;
      assert.equal(signal, null);
      assert.equal(code, 0, w.err.text());
      // Deregistration came before the request finished.
      assert.equal(c.events('heartbeat').filter((h) => h.id === 'fake-1' && h.state === 2).length, 0,
        'no heartbeat after the drain began');
    } finally {
      w.proc.kill('SIGKILL');
      c.proc.kill('SIGKILL');
    }
  });

  test('a second signal exits at once, without waiting for the drain', async () => {
    const c = await startController();
    const w = startWorker(c.address, ['-m', modelPath, '--drain-seconds', '120']);
    try {
      const { address } = await listeningAndRegistered(w);
      const running = generate(address, 1900);
      await running.out.wait((l) => json(l)?.token !== undefined, 'the first token', 60000);
      w.proc.kill('SIGTERM');
      await w.err.wait((l) => /draining: 1 running/.test(l), 'the draining log line');
      const t0 = Date.now();
      w.proc.kill('SIGINT');
      const { code, signal } = await w.exited;
      assert.equal(signal, null);
      assert.notEqual(code, 0, 'an interrupted drain is not a clean exit');
      assert.ok(Date.now() - t0 < 10000, 'it exited at once');
      const res = await running.result();
      assert.notEqual(res.status?.status, 'OK', 'the cut-off request did not end normally');
      assert.ok(res.tokens < 1900);
    } finally {
      w.proc.kill('SIGKILL');
      c.proc.kill('SIGKILL');
    }
  });

  test('bad flags are one clear error line', () => {
    for (const [args, want] of [
      [['worker', '--controller', '127.0.0.1:1', '--listen', 'nonsense'], /--listen 'nonsense' is not HOST:PORT/],
      [['worker', '--controller', '127.0.0.1:1', '--heartbeat-ms', '0'], /heartbeat-ms/],
      [['worker'], /controller/],
    ]) {
      const r = spawnSync(cairnBin, args, { encoding: 'utf8', timeout: 30000, env: { ...process.env, CAIRN_CACHE_DIR: cacheDir } });
      assert.notEqual(r.status, 0, args.join(' '));
      assert.match(r.stderr, want);
      assert.match(r.stderr, /cairn: error:/);
    }
  });
});
