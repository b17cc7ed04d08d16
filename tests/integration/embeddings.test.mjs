// Embeddings and reranking through `cairn serve` with the official openai
// client: vectors equal the reference implementation's (llama.cpp's server,
// tests/model/golden-embd) for a generated BERT model and a shared decoder,
// strings and token lists, float and base64, many inputs equal one at a
// time; rerank scores equal the reference's; the llama.cpp-server routes
// users reach for (/props, /v1/models' meta, completions' echo).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { cairnBin, loadOpenAI, repoRoot, sharedDir, skipReason, startServer } from './helpers.mjs';

const goldenDir = path.join(repoRoot, 'tests', 'model', 'golden-embd');
const golden = (name) => JSON.parse(readFileSync(path.join(goldenDir, `${name}.json`), 'utf8'));

function cosine(a, b) {
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; ++i) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return dot / Math.sqrt(na * nb);
}

// Writes a golden's generated model again from its make-model spec; the
// bytes must be the ones the reference answered for.
function makeModel(g, dir) {
  const out = path.join(dir, g.model);
  const args = g.make_model.command.split(' ').slice(2);  // after "cairn make-model"
  const argv = ['make-model', out, ...args.slice(1).map((a) =>
    a.startsWith('../shared/') ? path.join(sharedDir, a.slice('../shared/'.length)) : a)];
  execFileSync(cairnBin, argv, { stdio: 'ignore' });
  const sha = createHash('sha256').update(readFileSync(out)).digest('hex');
  assert.equal(sha, g.sha256, `${g.model}: make-model wrote other bytes than the golden's`);
  return out;
}

const vocab = path.join(sharedDir, 'tokenizer', 'ggml-vocab-bert-bge.gguf');
const decoderPath = path.join(sharedDir, 'models', 'syn-llama-gqa-f32.gguf');
const why = skipReason() ??
  (!existsSync(vocab) ? 'skipped: ../shared/tokenizer/ggml-vocab-bert-bge.gguf is not available' : null) ??
  (!existsSync(decoderPath) ? 'skipped: ../shared/models/syn-llama-gqa-f32.gguf is not available' : null);

describe('embeddings', { skip: why ?? false }, () => {
  let dir, bert, rank, decoder, chat, OpenAI;

  before(async () => {
    OpenAI = await loadOpenAI();
    dir = mkdtempSync(path.join(os.tmpdir(), 'cairn-embd-'));
    const bertModel = makeModel(golden('syn-bert-f32'), dir);
    const rankModel = makeModel(golden('syn-bert-rank-f32'), dir);
    [bert, rank, decoder, chat] = await Promise.all([
      startServer(['--pooling', 'mean'], { model: bertModel }),
      startServer([], { model: rankModel }),
      startServer(['--embeddings', '--pooling', 'last'], { model: decoderPath }),
      startServer([]),
    ]);
  });
  after(async () => {
    await Promise.all([bert, rank, decoder, chat].filter(Boolean).map((s) => s.stop()));
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const client = (server) => new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none' });

  async function checkGolden(server, g, pooling) {
    const want = g.poolings[pooling];
    const c = client(server);
    // Strings, with the SDK's default encoding (base64, decoded by the SDK).
    const byText = await c.embeddings.create({ input: g.texts });
    assert.equal(byText.data.length, g.texts.length);
    byText.data.forEach((d, i) => {
      assert.equal(d.index, i);
      const cos = cosine(d.embedding, want[i]);
      assert.ok(cos >= 0.9999, `${g.model} ${pooling} text ${i}: cosine ${cos}`);
      const norm = Math.hypot(...d.embedding);
      assert.ok(Math.abs(norm - 1) < 1e-4, `unit length, got ${norm}`);
    });
    const tokens = g.tokens.reduce((n, t) => n + t.length, 0);
    assert.equal(byText.usage.prompt_tokens, tokens, 'cairn tokenizes as the reference did');
    // Token lists, as floats: the same vectors.
    const byIds = await c.embeddings.create({ input: g.tokens, encoding_format: 'float' });
    byIds.data.forEach((d, i) => {
      const cos = cosine(d.embedding, byText.data[i].embedding);
      assert.ok(cos > 0.999999, `token list ${i}: cosine ${cos} to the text's`);
    });
    // One at a time equals all at once.
    for (let i = 0; i < g.texts.length; ++i) {
      const one = await c.embeddings.create({ input: g.texts[i], encoding_format: 'float' });
      const cos = cosine(one.data[0].embedding, byText.data[i].embedding);
      assert.ok(cos > 0.999999, `alone ${i}: cosine ${cos} to the batched one`);
    }
  }

  test('a BERT model: strings and token lists match the reference, mean pooling', async () => {
    await checkGolden(bert, golden('syn-bert-f32'), 'mean');
  });

  test('a decoder served with --embeddings: last-token pooling matches the reference', async () => {
    await checkGolden(decoder, golden('syn-llama-gqa-f32'), 'last');
  });

  test('many concurrent requests with many inputs give the vectors of one at a time', async () => {
    const g = golden('syn-bert-f32');
    const c = client(bert);
    const inputs = Array.from({ length: 48 }, (_, i) => g.texts[i % g.texts.length] + ' ' + 'more '.repeat(i % 7));
    const alone = [];
    for (const input of inputs.slice(0, 7)) {
      alone.push((await c.embeddings.create({ input, encoding_format: 'float' })).data[0].embedding);
    }
    const all = await Promise.all([0, 1, 2, 3].map(() => c.embeddings.create({ input: inputs, encoding_format: 'float' })));
    for (const r of all) {
      assert.equal(r.data.length, inputs.length);
      for (let i = 0; i < 7; ++i) assert.ok(cosine(r.data[i].embedding, alone[i]) > 0.999999, `input ${i}`);
    }
  });

  test('bad embedding requests get a 400 naming the field', async () => {
    const post = (server, route, body) => fetch(`${server.url}${route}`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
    });
    const cases = [
      [bert, '/v1/embeddings', { input: 'a', dimensions: 3 }, 'dimensions'],
      [bert, '/v1/embeddings', { input: [] }, 'input'],
      [bert, '/v1/embeddings', { input: 'a', encoding_format: 'int8' }, 'encoding_format'],
      [bert, '/v1/embeddings', { input: [[1, 99999999]] }, 'input'],
      [bert, '/v1/embeddings', { input: 'word '.repeat(600) }, 'input'],
      [bert, '/v1/completions', { prompt: 'a' }, 'model'],
      [rank, '/v1/embeddings', { input: 'a' }, 'model'],
      [bert, '/v1/rerank', { query: 'q', documents: ['a'] }, 'model'],
    ];
    for (const [server, route, body, param] of cases) {
      const r = await post(server, route, body);
      const j = await r.json();
      assert.equal(r.status, 400, `${route} ${JSON.stringify(body).slice(0, 80)}: ${JSON.stringify(j)}`);
      assert.equal(j.error.param, param, JSON.stringify(j));
    }
  });

  test('rerank: scores equal the reference, best first, top_n', async () => {
    const g = golden('syn-bert-rank-f32');
    const docs = g.rerank.pairs.map((p) => p.document);
    const r = await fetch(`${rank.url}/v1/rerank`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: g.rerank.query, documents: docs, top_n: 3 }),
    });
    assert.equal(r.status, 200);
    const j = await r.json();
    assert.equal(j.results.length, 3);
    const want = g.rerank.pairs.map((p, i) => [i, p.score]).sort((a, b) => b[1] - a[1]);
    j.results.forEach((res, k) => {
      assert.equal(res.index, want[k][0], 'ranked as the reference scores');
      assert.ok(Math.abs(res.relevance_score - want[k][1]) <= 1e-3 * Math.abs(want[k][1]) + 1e-5,
        `score ${res.relevance_score} vs ${want[k][1]}`);
      assert.equal(res.document.text, docs[res.index]);
    });
    const tokens = g.rerank.pairs.reduce((n, p) => n + p.n_tokens, 0);
    assert.equal(j.usage.prompt_tokens, tokens, 'pairs built as the reference builds them');
  });

  test('/props and /v1/models describe the model', async () => {
    const props = await (await fetch(`${bert.url}/props`)).json();
    assert.equal(props.embedding, true);
    assert.equal(props.pooling, 'mean');
    assert.equal(props.model_meta.architecture, 'bert');
    assert.equal(props.model_meta.n_embd, 128);
    assert.equal(props.model_meta.n_ctx_train, 512);
    const chatProps = await (await fetch(`${chat.url}/props`)).json();
    assert.equal(chatProps.embedding, false);
    assert.ok(chatProps.n_ctx > 0);
    assert.equal(typeof chatProps.chat_template, 'string');
    assert.equal(chatProps.default_generation_settings.params.temperature, 1);
    const models = await client(chat).models.list();
    const m = models.data[0];
    assert.ok(m.max_model_len > 0);
    assert.equal(m.meta.n_ctx, m.max_model_len);
    assert.ok(m.meta.n_ctx_train >= m.max_model_len);
    assert.equal(m.meta.generates, true);
  });

  test('completions echo the prompt, streamed or not', async () => {
    const c = client(chat);
    const prompt = 'Once upon a time';
    const whole = await c.completions.create({ prompt, max_tokens: 6, temperature: 0, echo: true });
    const plain = await c.completions.create({ prompt, max_tokens: 6, temperature: 0 });
    assert.equal(whole.choices[0].text, prompt + plain.choices[0].text);
    const stream = await c.completions.create({ prompt, max_tokens: 6, temperature: 0, echo: true, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    assert.equal(text, whole.choices[0].text);
    const refused = await fetch(`${chat.url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt, echo: true, logprobs: 1 }),
    });
    assert.equal(refused.status, 400);
    assert.equal((await refused.json()).error.param, 'echo');
  });
});
