// Issue 3's prefix-cache test: a request sharing a 500-token prefix with an
// earlier one gets the same greedy output as on a server that never saw that
// prefix, with a much shorter time to first token, and /metrics counts the hits.
// stories260K's 128-token context cannot hold such a prompt, so the test makes
// its own random-weight model, large enough that prefilling 500 tokens takes
// clearly longer than prefilling a few dozen.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { cairnBin, loadOpenAI, metric, repoRoot, startServer } from './helpers.mjs';

// Needs only the binary and the client: the model is made here, not read from ../shared.
function skipReason() {
  if (!existsSync(cairnBin)) return `skipped: ${cairnBin} is not built`;
  try {
    createRequire(path.join(repoRoot, 'package.json')).resolve('openai');
  } catch {
    return 'skipped: the openai package is not installed (run scripts/install-node-deps.sh)';
  }
  return null;
}

const BLOCK = 16;           // tokens per KV block (issue 3)
const SHARED = 500;         // prompt tokens A and B have in common
const PROMPT = 520;         // tokens in every prompt
const MAX_TOKENS = 16;
const VOCAB_FIRST = 3;      // the demo vocabulary: 0 <unk>, 1 <s>, 2 </s>
const VOCAB_END = 1284;
const SAMPLES = 3;          // timed requests per side; medians are compared

// Deterministic token ids (a small LCG), never a special token.
function tokens(seed, n) {
  let x = seed >>> 0;
  const out = [];
  for (let i = 0; i < n; ++i) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(VOCAB_FIRST + ((x >>> 8) % (VOCAB_END - VOCAB_FIRST)));
  }
  return out;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// Streams a greedy completion; TTFT is taken at the first chunk carrying a choice.
async function timedCompletion(client, prompt) {
  const t0 = performance.now();
  const stream = await client.completions.create({
    prompt, max_tokens: MAX_TOKENS, temperature: 0, ignore_eos: true, stream: true,
  });
  let ttft = null;
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    const c = chunk.choices?.[0];
    if (!c) continue;
    if (ttft === null) ttft = performance.now() - t0;
    text += c.text ?? '';
    finish = c.finish_reason ?? finish;
  }
  assert.notEqual(ttft, null, 'the stream carried no choice');
  return { ttft, text, finish };
}

describe('cairn serve: prefix cache', { skip: skipReason() ?? false }, () => {
  let dir;
  let model;
  let OpenAI;
  const servers = [];

  const serve = async () => {
    // One kernel thread: timings on a shared 2-core machine wobble less, and
    // the prefill/decode ratio the test relies on does not depend on it.
    const s = await startServer(['-t', '1', '--ctx', '1024'], { model });
    servers.push(s);
    return { server: s, client: new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 }) };
  };

  before(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'cairn-prefix-'));
    model = path.join(dir, 'prefix-test.gguf');
    const made = spawnSync(cairnBin, [
      'make-model', '--arch', 'llama', '--dim', '256', '--layers', '4', '--heads', '8',
      '--kv-heads', '2', '--ffn', '768', '--type', 'f32', '--ctx', '2048', '--seed', '7', model,
    ], { encoding: 'utf8' });
    assert.equal(made.status, 0, `cairn make-model failed:\n${made.stderr}`);
    OpenAI = await loadOpenAI();
  });
  after(async () => {
    await Promise.all(servers.map((s) => s.stop()));
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('a shared 500-token prefix: same output, much shorter TTFT, hits in /metrics', async () => {
    const a = tokens(1, PROMPT);
    const tail = (seed) => tokens(seed, PROMPT - SHARED);
    const b = [...a.slice(0, SHARED), ...tail(2)];
    // More prompts sharing the prefix (cached samples) and prompts sharing
    // nothing with anything (uncached samples), all of the same length.
    const cachedPrompts = [b, ...Array.from({ length: SAMPLES - 1 }, (_, i) => [...a.slice(0, SHARED), ...tail(10 + i)])];
    const freshPrompts = Array.from({ length: SAMPLES }, (_, i) => tokens(100 + i, PROMPT));
    const warmup = tokens(99, 24);

    // Reference: B's output on a server that has never seen any of its blocks.
    const ref = await serve();
    await timedCompletion(ref.client, warmup);
    const refB = await timedCompletion(ref.client, b);
    assert.equal(refB.finish, 'length');
    assert.ok(refB.text.length > 0, 'the reference output is empty: comparing it would prove nothing');
    assert.equal(await metric(ref.server.url, 'cairn_prefix_cache_hits_total'), 0,
      'the reference server found cached blocks it cannot have');
    await ref.server.stop();

    const { server, client } = await serve();
    await timedCompletion(client, warmup);  // first-request costs (pages, threads) off the clock
    const resA = await timedCompletion(client, a);
    assert.equal(resA.finish, 'length');

    const hits0 = await metric(server.url, 'cairn_prefix_cache_hits_total');
    const queries0 = await metric(server.url, 'cairn_prefix_cache_queries_total');
    const resB = await timedCompletion(client, b);
    const hits1 = await metric(server.url, 'cairn_prefix_cache_hits_total');
    const queries1 = await metric(server.url, 'cairn_prefix_cache_queries_total');

    assert.equal(resB.finish, 'length');
    assert.equal(resB.text, refB.text, 'B with its prefix cached differs from B computed from scratch');
    const fullBlocks = Math.floor(SHARED / BLOCK) * BLOCK;  // 496
    assert.ok(hits1 - hits0 >= fullBlocks,
      `prefix-cache hits rose by ${hits1 - hits0}, expected at least ${fullBlocks}`);
    assert.ok(queries1 - queries0 >= PROMPT,
      `prefix-cache queries rose by ${queries1 - queries0}, expected at least ${PROMPT}`);

    // Timings: uncached and cached requests interleaved, so a burst of load
    // from elsewhere on the machine hits both sides alike.
    const cold = [refB.ttft];  // B itself, uncached, on the reference server
    const warm = [resB.ttft];
    for (let i = 0; i < SAMPLES; ++i) {
      const f = await timedCompletion(client, freshPrompts[i]);
      cold.push(f.ttft);
      if (i + 1 < SAMPLES) {
        const c = await timedCompletion(client, cachedPrompts[i + 1]);
        warm.push(c.ttft);
      }
    }
    const hits2 = await metric(server.url, 'cairn_prefix_cache_hits_total');
    assert.ok(hits2 - hits1 >= (SAMPLES - 1) * fullBlocks,
      `the later shared-prefix requests hit only ${hits2 - hits1} tokens`);

    const coldMs = median(cold);
    const warmMs = median(warm);
    console.log(`prefix cache: uncached TTFT ${cold.map((t) => t.toFixed(1)).join(', ')} ms ` +
      `(median ${coldMs.toFixed(1)}); cached TTFT ${warm.map((t) => t.toFixed(1)).join(', ')} ms ` +
      `(median ${warmMs.toFixed(1)}); ratio ${(warmMs / coldMs).toFixed(3)}; ` +
      `hits +${hits1 - hits0} of ${queries1 - queries0} queried for B`);
    assert.ok(warmMs < 0.5 * coldMs,
      `cached TTFT median ${warmMs.toFixed(1)} ms is not under half the uncached ${coldMs.toFixed(1)} ms`);
  });
});
