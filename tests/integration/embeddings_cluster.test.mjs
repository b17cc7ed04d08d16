// Embeddings through the cluster: a controller and a worker serving a
// generated bert model. /v1/embeddings through the controller gives the
// vectors a plain `cairn serve` of the same file gives (within 1e-6), /v1/rerank
// works against a `--pooling rank` worker, /v1/models and /props show what the
// worker's model is, and a completion to the bert-only cluster is a 400 that
// says why. Every process is killed at the end, pass or fail.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { killAll, startController, startWorker, waitWorkers } from './cluster_helpers.mjs';
import { cairnBin, sharedDir, startServer } from './helpers.mjs';

const vocab = path.join(sharedDir, 'tokenizer', 'ggml-vocab-bert-bge.gguf');
const skip = !existsSync(cairnBin) ? `skipped: ${cairnBin} is not built`
  : !existsSync(vocab) ? `skipped: ${vocab} is not available`
  : null;

function makeBert(file, extra = []) {
  const made = spawnSync(cairnBin, ['make-model', file, '--arch', 'bert', '--dim', '128',
    '--layers', '2', '--heads', '4', '--ffn', '256', '--ctx', '512', '--vocab-from', vocab, ...extra],
  { encoding: 'utf8' });
  assert.equal(made.status, 0, `cairn make-model failed:\n${made.stderr}`);
}

async function post(url, route, body) {
  const r = await fetch(`${url}${route}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  return { status: r.status, body: await r.json() };
}

function assertClose(got, want, what) {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; ++i)
    assert.ok(Math.abs(got[i] - want[i]) <= 1e-6, `${what}[${i}]: ${got[i]} vs ${want[i]}`);
}

const inputs = ['the quick brown fox', 'a cluster of workers', 'x'];

describe('embeddings through the cluster', { skip: skip ?? false }, () => {
  let dir, bert, ranker, ctl, plain;

  before(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'cairn-embed-cluster-'));
    bert = path.join(dir, 'bert.gguf');
    ranker = path.join(dir, 'ranker.gguf');
    makeBert(bert);
    makeBert(ranker, ['--pooling', 'rank']);
    ctl = await startController();
    await startWorker(ctl.grpc, 'bert', bert);
    await waitWorkers(ctl.url, 1, 15000);
    plain = await startServer([], { model: bert });
  });

  after(async () => {
    if (plain) await plain.stop();
    killAll();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('/v1/embeddings through the controller matches a plain cairn serve', async () => {
    for (const input of [inputs, inputs[0]]) {
      const viaCtl = await post(ctl.url, '/v1/embeddings', { input });
      assert.equal(viaCtl.status, 200, JSON.stringify(viaCtl.body));
      const direct = await post(plain.url, '/v1/embeddings', { input });
      assert.equal(direct.status, 200, JSON.stringify(direct.body));
      assert.equal(viaCtl.body.data.length, Array.isArray(input) ? input.length : 1);
      assert.equal(viaCtl.body.data.length, direct.body.data.length);
      for (let i = 0; i < direct.body.data.length; ++i) {
        assert.equal(viaCtl.body.data[i].embedding.length, 128);
        assertClose(viaCtl.body.data[i].embedding, direct.body.data[i].embedding, `input ${i}`);
      }
      assert.equal(viaCtl.body.usage.prompt_tokens, direct.body.usage.prompt_tokens);
    }
  });

  test('an invalid embedding request is a 400 through the controller, as on the worker', async () => {
    const r = await post(ctl.url, '/v1/embeddings', { input: [[1, 2, 999999999]] });
    assert.equal(r.status, 400, JSON.stringify(r.body));
    // Longer than the 512-token context: only the worker's engine knows; its
    // InvalidArgument must stay a 400 across the hop.
    const long = { input: 'word '.repeat(2000) };
    const direct = await post(plain.url, '/v1/embeddings', long);
    assert.equal(direct.status, 400, JSON.stringify(direct.body));
    const viaCtl = await post(ctl.url, '/v1/embeddings', long);
    assert.equal(viaCtl.status, 400, JSON.stringify(viaCtl.body));
    assert.equal(viaCtl.body.error.message, direct.body.error.message);
  });

  test('/v1/models and /props through the controller describe the model', async () => {
    const models = await (await fetch(`${ctl.url}/v1/models`)).json();
    const meta = models.data[0].meta;
    assert.equal(meta.architecture, 'bert');
    assert.equal(meta.n_embd, 128);
    assert.equal(meta.generates, false);
    assert.ok(meta.n_params > 0);
    const props = await (await fetch(`${ctl.url}/props`)).json();
    assert.equal(props.embedding, true);
    assert.equal(props.model_meta.architecture, 'bert');
    assert.equal(props.model_meta.n_embd, 128);
  });

  test('a completion to the bert-only cluster is a 400 naming why', async () => {
    const r = await post(ctl.url, '/v1/completions', { prompt: 'hello', max_tokens: 4 });
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.match(r.body.error.message, /embeddings only/);
  });

  test('/v1/rerank through the controller against a --pooling rank worker', async () => {
    const ctl2 = await startController();
    await startWorker(ctl2.grpc, 'ranker', ranker);
    await waitWorkers(ctl2.url, 1, 15000);
    const direct = await startServer([], { model: ranker });
    try {
      const body = { query: 'what is a fox', documents: inputs };
      const viaCtl = await post(ctl2.url, '/v1/rerank', body);
      assert.equal(viaCtl.status, 200, JSON.stringify(viaCtl.body));
      assert.equal(viaCtl.body.results.length, inputs.length);
      const want = await post(direct.url, '/v1/rerank', body);
      assert.equal(want.status, 200, JSON.stringify(want.body));
      const score = (res) => Object.fromEntries(res.body.results.map((r) => [r.index, r.relevance_score]));
      const got = score(viaCtl), exp = score(want);
      for (let i = 0; i < inputs.length; ++i)
        assert.ok(Math.abs(got[i] - exp[i]) <= 1e-6, `document ${i}: ${got[i]} vs ${exp[i]}`);
    } finally {
      await direct.stop();
      await ctl2.kill();
    }
  });
});
