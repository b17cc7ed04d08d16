// Issue 41: prefill and decode on separate workers. A controller with
// `--role prefill` and `--role decode` workers on loopback: greedy output
// through the handoff equals the golden tokens, 16 concurrent streams and
// cancelled ones leave the decode worker's KV accounting at zero, and
// kill -9 of a decode worker and of a prefill worker under 16 streams
// neither hangs nor loses a request (the controller resumes it elsewhere).
// Every process is killed at the end, pass or fail.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { HEARTBEAT_MS, killAll, startController, startWorker, waitWorkers } from './cluster_helpers.mjs';
import { cairnBin, golden, loadOpenAI, repoRoot, sharedDir, skipReason, waitFor } from './helpers.mjs';

function binarySkipReason() {
  if (!existsSync(cairnBin)) return `skipped: ${cairnBin} is not built`;
  try {
    createRequire(path.join(repoRoot, 'package.json')).resolve('openai');
  } catch {
    return 'skipped: the openai package is not installed (run scripts/install-node-deps.sh)';
  }
  return null;
}

// Controller metrics: the value of `name` per worker name label, or the
// unlabelled value under ''.
async function metric(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out = {};
  for (const line of text.split('\n')) {
    if (line.startsWith(name + ' ')) out[''] = Number(line.slice(name.length + 1));
    if (!line.startsWith(name + '{')) continue;
    const label = line.match(/name="([^"]*)"/);
    out[label ? label[1] : '?'] = (out[label ? label[1] : '?'] ?? 0) + Number(line.slice(line.lastIndexOf(' ') + 1));
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

// Waits until the worker's reported KV blocks in use are 0 (heartbeats carry them).
async function kvDrained(url, name) {
  await waitFor(async () => {
    const used = await metric(url, 'cairn_worker_kv_blocks_used');
    return used[name] === 0 || `kv blocks used on ${name}: ${JSON.stringify(used)}`;
  }, 10 * HEARTBEAT_MS + 3000, `${name}'s KV accounting back to zero`);
}

describe('prefill → decode handoff on the golden models', { skip: skipReason() ?? false, timeout: 240000 }, () => {
  let OpenAI, controller, client;
  const roles = {};

  before(async () => {
    OpenAI = await loadOpenAI();
    controller = await startController();
    const models = ['stories260K', 'syn-qwen2-f32'].filter(
      (m) => existsSync(path.join(sharedDir, 'models', `${m}.gguf`)) && existsSync(path.join(sharedDir, 'golden', `${m}.json`)));
    const started = [];
    for (const m of models) {
      const file = path.join(sharedDir, 'models', `${m}.gguf`);
      started.push(startWorker(controller.grpc, `${m}-prefill`, file, ['--role', 'prefill']));
      started.push(startWorker(controller.grpc, `${m}-decode`, file, ['--role', 'decode']));
    }
    for (const w of await Promise.all(started)) roles[w.name] = w;
    await waitWorkers(controller.url, started.length, 15000);
    client = new OpenAI({ baseURL: `${controller.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
  });
  after(() => killAll());

  test('greedy tokens through the handoff equal the golden ones, alone and 16 at once', async () => {
    const handoffs0 = (await metric(controller.url, 'cairn_pd_handoffs_total'))[''] ?? 0;
    let expected = 0;
    for (const name of Object.keys(roles).filter((n) => n.endsWith('-prefill')).map((n) => n.slice(0, -8))) {
      const gold = JSON.parse(readFileSync(path.join(sharedDir, 'golden', `${name}.json`), 'utf8'));
      const ask = (c) => client.completions.create({
        model: name, prompt: c.prompt_tokens, max_tokens: c.n_predict, temperature: 0, logprobs: 1,
      });
      for (const c of gold.cases) {
        const r = await ask(c);
        const ids = r.choices[0].logprobs.tokens.length;
        assert.equal(ids, c.n_predict, `${name}: ${c.prompt}`);
        assert.equal(r.choices[0].text, c.text, `${name}: ${c.prompt}`);
        expected += c.n_predict > 1 ? 1 : 0;
      }
      const many = await Promise.all(Array.from({ length: 16 }, (_, i) => ask(gold.cases[i % gold.cases.length])));
      many.forEach((r, i) => assert.equal(r.choices[0].text, gold.cases[i % gold.cases.length].text, `${name} request ${i} of 16`));
      expected += 16;
      await kvDrained(controller.url, `${name}-decode`);
    }
    const handoffs = (await metric(controller.url, 'cairn_pd_handoffs_total'))[''] ?? 0;
    assert.ok(handoffs - handoffs0 >= expected, `handoffs ${handoffs - handoffs0}, expected at least ${expected}`);
    // The workers count the rows they moved (heartbeats carry the counters).
    await waitFor(async () => {
      const sent = await metric(controller.url, 'cairn_worker_kv_handoff_bytes_sent_total');
      const got = await metric(controller.url, 'cairn_worker_kv_handoff_bytes_received_total');
      return (sent['stories260K-prefill'] > 0 && got['stories260K-decode'] === sent['stories260K-prefill']) ||
        `sent ${JSON.stringify(sent)} received ${JSON.stringify(got)}`;
    }, 10 * HEARTBEAT_MS + 3000, 'handoff byte counters');
  });

  test('a prefill worker and all its threads run at nice 10, a decode worker at 0', () => {
    // Field 19 of /proc/PID/task/TID/stat, counted after the command's closing parenthesis.
    const nices = (pid) => readdirSync(`/proc/${pid}/task`).map((tid) => {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
    });
    for (const [name, w] of Object.entries(roles)) {
      const want = name.endsWith('-prefill') ? 10 : 0;
      const got = nices(w.proc.pid);
      assert.ok(got.length > 1 && got.every((n) => n === want), `${name}: threads' nice ${got}, want ${want}`);
    }
  });

  test('cancelled streams free every block on the decode worker', async () => {
    const gold = golden().cases[0];
    const aborts = [];
    const runs = Array.from({ length: 8 }, async () => {
      const ac = new AbortController();
      aborts.push(ac);
      try {
        const stream = await client.completions.create({
          model: 'stories260K', prompt: gold.prompt, max_tokens: 100, temperature: 0, stream: true, ignore_eos: true,
        }, { signal: ac.signal });
        let n = 0;
        for await (const chunk of stream) if (chunk.choices?.length && ++n === 3) ac.abort();
      } catch {
        // aborted
      }
    });
    await withTimeout(Promise.all(runs), 30000, 'aborted streams');
    await kvDrained(controller.url, 'stories260K-decode');
    await kvDrained(controller.url, 'stories260K-prefill');
  });
});

// kill -9 needs streams still running when a worker dies: a model written
// here (no ../shared needed) with a long context.
describe('prefill/decode workers: kill -9 under 16 streams', { skip: binarySkipReason() ?? false, timeout: 240000 }, () => {
  let dir, controller, client;
  const w = {};

  before(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'cairn-pd-'));
    const model = path.join(dir, 'pd-kill.gguf');
    const made = spawnSync(cairnBin, [
      'make-model', '--arch', 'llama', '--dim', '256', '--layers', '4', '--heads', '8',
      '--kv-heads', '2', '--ffn', '768', '--type', 'f32', '--ctx', '2048', '--seed', '11', model,
    ], { encoding: 'utf8' });
    assert.equal(made.status, 0, `cairn make-model failed:\n${made.stderr}`);
    const OpenAI = await loadOpenAI();
    controller = await startController();
    const started = await Promise.all([
      startWorker(controller.grpc, 'p1', model, ['--role', 'prefill']),
      startWorker(controller.grpc, 'p2', model, ['--role', 'prefill']),
      startWorker(controller.grpc, 'd1', model, ['--role', 'decode']),
      startWorker(controller.grpc, 'd2', model, ['--role', 'decode']),
    ]);
    for (const s of started) w[s.name] = s;
    await waitWorkers(controller.url, 4, 15000);
    client = new OpenAI({ baseURL: `${controller.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120000 });
  });
  after(() => {
    killAll();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const prompt = (i) => Array.from({ length: 40 + 8 * i }, (_, k) => 1 + ((k * 7 + i) % 200));

  async function streams16(maxTokens, onStarted) {
    const streams = Array.from({ length: 16 }, () => ({ tokens: 0, outcome: null }));
    const runs = streams.map(async (s, i) => {
      try {
        const stream = await client.completions.create({
          model: 'pd-kill', prompt: prompt(i), max_tokens: maxTokens, temperature: 0, stream: true, ignore_eos: true,
          logprobs: 1,
        });
        for await (const chunk of stream) s.tokens += chunk.choices?.[0]?.logprobs?.tokens?.length ?? 0;
        s.outcome = 'completed';
      } catch (e) {
        s.outcome = `error: ${e.message}`;
      }
    });
    await onStarted(streams);
    await withTimeout(Promise.all(runs), 180000, 'a stream after kill -9').catch((e) => {
      throw new Error(`${e.message}: ${JSON.stringify(streams)}`);
    });
    return streams;
  }

  test('kill -9 of the busier decode worker: every stream resumes on the other and completes', async () => {
    const streams = await streams16(300, async (streams) => {
      await waitFor(() => streams.every((s) => s.tokens > 2 || s.outcome) || 'streams starting', 60000,
        'all 16 streams under way');
      const out = await metric(controller.url, 'cairn_worker_outstanding');
      const victim = (out.d1 ?? 0) >= (out.d2 ?? 0) ? w.d1 : w.d2;
      assert.ok(out[victim.name] > 0, `no stream on ${victim.name}: ${JSON.stringify(out)}`);
      await victim.kill('SIGKILL');
    });
    const bad = streams.filter((s) => s.outcome !== 'completed');
    assert.deepEqual(bad, [], `lost streams: ${JSON.stringify(streams)}`);
    // Every token arrives once: resumed streams neither repeat nor skip.
    for (const s of streams) assert.equal(s.tokens, 300, JSON.stringify(streams));
    const text = await (await fetch(`${controller.url}/metrics`)).text();
    const fallbacks = text.split('\n').filter((l) => l.startsWith('cairn_pd_fallbacks_total{'));
    console.log(`kill -9 decode: 16 of 16 streams completed; ${fallbacks.join(', ')}`);
  });

  test('kill -9 of a prefill worker while prompts arrive: none lost', async () => {
    const streams = await streams16(40, async (streams) => {
      await waitFor(() => streams.some((s) => s.tokens > 0) || 'no token yet', 60000, 'a first token');
      await w.p1.kill('SIGKILL');
    });
    const bad = streams.filter((s) => s.outcome !== 'completed' || s.tokens !== 40);
    assert.deepEqual(bad, [], `lost streams: ${JSON.stringify(streams)}`);
    const survivors = Object.values(w).filter((x) => x.proc.exitCode === null && x.proc.signalCode === null);
    for (const s of survivors) await kvDrained(controller.url, s.name);
  });
});
