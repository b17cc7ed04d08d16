// Issue 5's cluster tests: `cairn controller` and two `cairn worker`s on
// loopback, driven through the controller's OpenAI HTTP API. Golden greedy
// text through the hop, both workers used, controller restart under running
// workers, prefix affinity with the worker's prefix-cache hits rising, and
// kill -9 of a worker while streams run (no hang, one worker left, later
// requests succeed). Every process is killed at the end, pass or fail.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { HEARTBEAT_MS, WORKER_TIMEOUT_MS, killAll, startController, startWorker, waitWorkers } from './cluster_helpers.mjs';
import { cairnBin, golden, loadOpenAI, modelPath, repoRoot, skipReason, startServer, waitFor } from './helpers.mjs';

// The kill -9 test needs only the binary and the openai package.
function killSkipReason() {
  if (!existsSync(cairnBin)) return `skipped: ${cairnBin} is not built`;
  try {
    createRequire(path.join(repoRoot, 'package.json')).resolve('openai');
  } catch {
    return 'skipped: the openai package is not installed (run scripts/install-node-deps.sh)';
  }
  return null;
}
const killSkip = killSkipReason();

// Per-worker values of a controller metric, keyed by the worker's name label.
async function perWorker(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out = {};
  for (const line of text.split('\n')) {
    if (!line.startsWith(name + '{')) continue;
    const label = line.match(/name="([^"]*)"/);
    out[label ? label[1] : '?'] = Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return out;
}

const withTimeout = (promise, ms, what) => {
  let timer;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what} hung for ${ms} ms`)), ms); }),
  ]);
};

describe('cairn controller + 2 workers', { skip: skipReason() ?? false, timeout: 240000 }, () => {
  let OpenAI, gold, controller, workers, client;

  before(async () => {
    OpenAI = await loadOpenAI();
    gold = golden().cases[0];
    controller = await startController();
    workers = await Promise.all([startWorker(controller.grpc, 'wa'), startWorker(controller.grpc, 'wb')]);
    await waitWorkers(controller.url, 2, 10000);
    client = new OpenAI({ baseURL: `${controller.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
  });
  after(async () => {
    killAll();
  });

  test('40 concurrent requests get the golden greedy text, and both workers served some', async () => {
    const before = await perWorker(controller.url, 'cairn_worker_routed_total');
    const results = await Promise.all(Array.from({ length: 40 }, () => client.completions.create({
      model: 'stories260K', prompt: gold.prompt, max_tokens: gold.n_predict, temperature: 0,
    })));
    for (const r of results) {
      assert.equal(r.choices[0].text, gold.text);
      assert.equal(r.usage.completion_tokens, gold.n_predict);
    }
    const after = await perWorker(controller.url, 'cairn_worker_routed_total');
    const served = workers.map((w) => (after[w.name] ?? 0) - (before[w.name] ?? 0));
    assert.equal(served[0] + served[1], 40, `routed: ${JSON.stringify(after)}`);
    assert.ok(served[0] > 0 && served[1] > 0, `one worker served nothing: ${served}`);
    // The workers' own counters (carried by heartbeats) agree.
    await waitFor(async () => {
      const done = await perWorker(controller.url, 'cairn_worker_requests_total');
      return workers.every((w) => done[w.name] > 0) || JSON.stringify(done);
    }, 5000, 'both workers reporting finished requests');
    const models = await client.models.list();
    assert.deepEqual(models.data.map((m) => m.id), ['stories260K']);
    assert.equal((await fetch(`${controller.url}/health`)).status, 200);
  });

  test('the Serving gRPC service on the controller streams the golden text (cairn client)', async () => {
    const r = spawnSync(cairnBin, ['client', '--address', controller.grpc, '--servable', 'stories260K',
      '--input', `prompt=${gold.prompt}`, '--input', `max_tokens=${gold.n_predict}`, '--input', 'temperature=0',
      '--stream', '--timeout', '30'], { encoding: 'utf8', timeout: 60000 });
    assert.equal(r.status, 0, `cairn client failed:\n${r.stderr}`);
    assert.ok(r.stdout.includes(gold.text), `got: ${r.stdout}`);
    const list = spawnSync(cairnBin, ['client', '--address', controller.grpc, '--list', '--timeout', '10'],
      { encoding: 'utf8', timeout: 30000 });
    assert.equal(list.status, 0, list.stderr);
    assert.match(list.stdout, /^stories260K\b/m);
  });

  test('a restarted controller has both workers back within two heartbeats', async () => {
    const { httpPort, grpcPort } = controller;
    await controller.kill('SIGKILL');
    assert.notEqual((await fetch(`${controller.url}/health`).catch(() => null))?.status, 200);
    // Same ports, so the running workers find it; prefix-affinity for the next test.
    controller = await startController(['--route', 'prefix-affinity', '--prefix-chars', '200'],
      { httpPort, grpcPort });
    const started = Date.now();
    // Two heartbeats, plus slack for a loaded machine (the workers' reconnect).
    await waitWorkers(controller.url, 2, 2 * HEARTBEAT_MS + 1500);
    console.log(`controller restart: both workers registered again after ${Date.now() - started} ms ` +
      `(heartbeat ${HEARTBEAT_MS} ms)`);
    for (const w of workers) assert.equal(w.proc.exitCode, null, `worker ${w.name} was restarted`);
    const r = await client.completions.create({
      model: 'stories260K', prompt: gold.prompt, max_tokens: gold.n_predict, temperature: 0,
    });
    assert.equal(r.choices[0].text, gold.text);
  });

  test('prefix affinity: a shared long prefix lands on one worker and its prefix cache hits', async () => {
    // stories260K holds 128 tokens: a 250-character prefix (about 85 tokens)
    // and --prefix-chars 200 on this controller.
    const prefix = (gold.prompt + gold.text + ' ').repeat(3).slice(0, 250);
    const routed0 = await perWorker(controller.url, 'cairn_worker_routed_total');
    const hits0 = await perWorker(controller.url, 'cairn_worker_prefix_cache_hits_total');
    for (const tail of ['Tom', 'Sue', 'Ben', 'Max', 'Amy', 'Kim']) {
      const r = await client.completions.create({
        model: 'stories260K', prompt: `${prefix}${tail} was`, max_tokens: 4, temperature: 0,
      });
      assert.equal(r.choices[0].finish_reason, 'length');
    }
    const routed1 = await perWorker(controller.url, 'cairn_worker_routed_total');
    const delta = workers.map((w) => (routed1[w.name] ?? 0) - (routed0[w.name] ?? 0));
    assert.ok((delta[0] === 6 && delta[1] === 0) || (delta[0] === 0 && delta[1] === 6),
      `requests sharing a prefix were split: ${delta}`);
    const home = delta[0] === 6 ? workers[0] : workers[1];
    // Hits arrive with the worker's next heartbeat.
    await waitFor(async () => {
      const hits = await perWorker(controller.url, 'cairn_worker_prefix_cache_hits_total');
      return (hits[home.name] ?? 0) > (hits0[home.name] ?? 0) || JSON.stringify(hits);
    }, 5 * HEARTBEAT_MS + 2000, `prefix-cache hits rising on ${home.name}`);
  });
});

// kill -9 needs streams that are still running when the worker dies: a model
// written here (no ../shared needed) with a long context, a few ms per step.
describe('cairn controller: kill -9 of a worker', { skip: killSkip ?? false, timeout: 180000 }, () => {
  let dir, controller, workers, client;

  before(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'cairn-cluster-'));
    const model = path.join(dir, 'kill-test.gguf');
    const made = spawnSync(cairnBin, [
      'make-model', '--arch', 'llama', '--dim', '256', '--layers', '4', '--heads', '8',
      '--kv-heads', '2', '--ffn', '768', '--type', 'f32', '--ctx', '2048', '--seed', '7', model,
    ], { encoding: 'utf8' });
    assert.equal(made.status, 0, `cairn make-model failed:\n${made.stderr}`);
    const OpenAI = await loadOpenAI();
    controller = await startController();
    workers = await Promise.all([startWorker(controller.grpc, 'ka', model), startWorker(controller.grpc, 'kb', model)]);
    await waitWorkers(controller.url, 2, 10000);
    client = new OpenAI({ baseURL: `${controller.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
  });
  after(() => {
    killAll();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('kill -9 of a worker under 20 streams: no hang, one worker left, later requests succeed', async () => {
    const streams = Array.from({ length: 20 }, () => ({ tokens: 0, outcome: null }));
    const runs = streams.map(async (s) => {
      try {
        const stream = await client.completions.create({
          model: 'kill-test', prompt: [1, 2, 3, 4, 5], max_tokens: 300, temperature: 0, stream: true,
          ignore_eos: true,
        });
        for await (const chunk of stream) if (chunk.choices?.length) s.tokens++;
        s.outcome = 'completed';
      } catch (e) {
        s.outcome = `error: ${e.message}`;
      }
    });
    // Kill once every stream is under way.
    await waitFor(() => streams.every((s) => s.tokens > 0 || s.outcome) || 'streams starting', 30000,
      'all 20 streams to produce a token');
    // The worker with the most streams in flight dies.
    const outstanding = await perWorker(controller.url, 'cairn_worker_outstanding');
    const victim = (outstanding[workers[0].name] ?? 0) >= (outstanding[workers[1].name] ?? 0)
      ? workers[0] : workers[1];
    const survivor = victim === workers[0] ? workers[1] : workers[0];
    assert.ok(outstanding[victim.name] > 0, `no stream runs on ${victim.name}: ${JSON.stringify(outstanding)}`);
    await victim.kill('SIGKILL');
    const killedAt = Date.now();
    // Sent at once, before the controller may have noticed: a request routed
    // to the dead worker fails before its first token and is retried on the
    // other one without the client seeing it.
    const right = Promise.all(Array.from({ length: 8 }, () => client.completions.create({
      model: 'kill-test', prompt: [1, 2, 3, 4, 5], max_tokens: 16, temperature: 0, ignore_eos: true,
    })));
    // No hang: within 10 s of the kill every stream has ended (completed, or
    // a clear error for those on the dead worker) or is still receiving
    // tokens from the live one. Those then finish at the survivor's own pace,
    // which under the sanitizers is far slower than 10 s for 300 tokens.
    const atKill = streams.map((s) => s.tokens);
    await waitFor(() => streams.every((s, i) => s.outcome || s.tokens > atKill[i] + 1) || 'streams idle',
      10000, 'every stream to end or make progress after kill -9').catch((e) => {
      throw new Error(`${e.message}: ${JSON.stringify(streams)}`);
    });
    await withTimeout(Promise.all(runs), 120000, 'a stream on the surviving worker').catch((e) => {
      throw new Error(`${e.message}: ${JSON.stringify(streams)}`);
    });
    for (const r of await withTimeout(right, 60000, 'a request sent right after kill -9'))
      assert.equal(r.usage.completion_tokens, 16);
    const errors = streams.filter((s) => s.outcome !== 'completed');
    console.log(`kill -9: ${20 - errors.length} streams completed, ${errors.length} ended with an error ` +
      `after ${Date.now() - killedAt} ms (${[...new Set(errors.map((e) => e.outcome))].join('; ')})`);
    for (const s of errors) assert.match(s.outcome, /error: .+/);
    await waitWorkers(controller.url, 1, WORKER_TIMEOUT_MS + 1000);
    const survivors = await perWorker(controller.url, 'cairn_worker_up');
    assert.deepEqual(Object.keys(survivors), [survivor.name]);
    const later = await Promise.all(Array.from({ length: 8 }, () => client.completions.create({
      model: 'kill-test', prompt: [1, 2, 3, 4, 5], max_tokens: 16, temperature: 0, ignore_eos: true,
    })));
    for (const r of later) assert.equal(r.usage.completion_tokens, 16);
  });
});

// One-process mode: `cairn serve --grpc-port 0` exposes the same Serving service.
describe('cairn serve --grpc-port', { skip: skipReason() ?? false, timeout: 60000 }, () => {
  let server;
  before(async () => {
    server = await startServer(['--grpc-port', '0', '-t', '1']);
  });
  after(async () => {
    await server?.stop();
  });

  test('prints its gRPC address and serves ListServables and PredictStream', async () => {
    const m = server.stderr().match(/grpc listening on (\S+)/);
    assert.ok(m, `no "grpc listening" line:\n${server.stderr()}`);
    const list = spawnSync(cairnBin, ['client', '--address', m[1], '--list', '--timeout', '10'],
      { encoding: 'utf8', timeout: 30000 });
    assert.equal(list.status, 0, list.stderr);
    assert.match(list.stdout, /^stories260K\b/m);
    const gold = golden().cases[0];
    const r = spawnSync(cairnBin, ['client', '--address', m[1], '--input', `prompt=${gold.prompt}`,
      '--input', `max_tokens=${gold.n_predict}`, '--input', 'temperature=0', '--stream', '--timeout', '30'],
    { encoding: 'utf8', timeout: 60000 });
    assert.equal(r.status, 0, r.stderr);
    assert.ok(r.stdout.includes(gold.text), `got: ${r.stdout}`);
  });
});
