// Completions and chat through the official OpenAI client: greedy text equals
// the golden continuation, streaming and not, n=2, logprobs, stop, seed.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { golden, loadOpenAI, skipReason, startServer } from './helpers.mjs';

const skip = skipReason();

describe('cairn serve: completions and chat', { skip: skip ?? false }, () => {
  let server;
  let client;
  let gold;

  before(async () => {
    gold = golden().cases[0];
    server = await startServer();
    const OpenAI = await loadOpenAI();
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => server?.stop());

  test('models lists the file name as the model id', async () => {
    const list = await client.models.list();
    assert.deepEqual(list.data.map((m) => m.id), ['stories260K']);
  });

  test('greedy completion equals the golden continuation (token ids and text prompt)', async () => {
    const byIds = await client.completions.create({
      model: 'stories260K', prompt: gold.prompt_tokens, max_tokens: gold.n_predict, temperature: 0,
    });
    assert.equal(byIds.choices[0].text, gold.text);
    assert.equal(byIds.choices[0].finish_reason, 'length');
    assert.equal(byIds.usage.prompt_tokens, gold.prompt_tokens.length);
    assert.equal(byIds.usage.completion_tokens, gold.n_predict);
    assert.equal(byIds.usage.total_tokens, gold.prompt_tokens.length + gold.n_predict);
    assert.equal(byIds.object, 'text_completion');
    const byText = await client.completions.create({
      model: 'stories260K', prompt: gold.prompt, max_tokens: gold.n_predict, temperature: 0,
    });
    assert.equal(byText.choices[0].text, gold.text);
  });

  test('streamed greedy completion concatenates to the golden text', async () => {
    const stream = await client.completions.create({
      prompt: gold.prompt, max_tokens: gold.n_predict, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let finish = null;
    let usage = null;
    const ids = new Set();
    for await (const chunk of stream) {
      ids.add(chunk.id);
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        text += c.text;
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(text, gold.text);
    assert.equal(finish, 'length');
    assert.equal(ids.size, 1, 'every chunk carries the same id');
    assert.ok(usage, 'include_usage sends a usage chunk');
    assert.equal(usage.completion_tokens, gold.n_predict);
  });

  test('chat, non-streaming and streaming, agree', async () => {
    const messages = [{ role: 'user', content: 'Tell me a story about a cat.' }];
    const full = await client.chat.completions.create({
      messages, max_tokens: 24, temperature: 0,
    });
    assert.equal(full.object, 'chat.completion');
    assert.equal(full.choices[0].message.role, 'assistant');
    assert.equal(typeof full.choices[0].message.content, 'string');
    assert.ok(['stop', 'length'].includes(full.choices[0].finish_reason));
    assert.ok(full.usage.prompt_tokens > 0);
    const stream = await client.chat.completions.create({
      messages, max_tokens: 24, temperature: 0, stream: true,
    });
    let text = '';
    let role = null;
    let finish = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      const d = chunk.choices[0]?.delta ?? {};
      if (d.role) role = d.role;
      if (d.content) text += d.content;
      if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
    }
    assert.equal(role, 'assistant');
    assert.equal(text, full.choices[0].message.content);
    assert.equal(finish, full.choices[0].finish_reason);
  });

  test('n=2 gives two choices, merged by index', async () => {
    const r = await client.completions.create({
      prompt: gold.prompt, max_tokens: 8, temperature: 1.0, seed: 5, n: 2,
    });
    assert.equal(r.choices.length, 2);
    assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1]);
    assert.equal(r.usage.completion_tokens, 16);
    const greedy = await client.chat.completions.create({
      messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, temperature: 0, n: 2,
    });
    assert.equal(greedy.choices.length, 2);
    assert.equal(greedy.choices[0].message.content, greedy.choices[1].message.content);
  });

  test('completion logprobs match the golden top-5', async () => {
    const r = await client.completions.create({
      prompt: gold.prompt_tokens, max_tokens: 4, temperature: 0, logprobs: 5,
    });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 4);
    assert.equal(lp.token_logprobs.length, 4);
    assert.equal(lp.top_logprobs.length, 4);
    assert.deepEqual(lp.text_offset.slice(0, 2), [0, lp.tokens[0].length]);
    for (let i = 0; i < 4; i++) {
      const step = gold.steps[i];
      assert.equal(lp.tokens[i], step.token);
      assert.ok(Math.abs(lp.token_logprobs[i] - step.logprob) < 0.02, `step ${i} logprob`);
      assert.equal(Object.keys(lp.top_logprobs[i]).length, 5);
    }
  });

  test('chat logprobs have content[] with bytes and top_logprobs', async () => {
    const r = await client.chat.completions.create({
      messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 3, temperature: 0,
      logprobs: true, top_logprobs: 2,
    });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, r.usage.completion_tokens);
    for (const e of content) {
      assert.equal(typeof e.token, 'string');
      assert.ok(e.logprob <= 0);
      assert.ok(Array.isArray(e.bytes));
      assert.equal(e.top_logprobs.length, 2);
    }
  });

  test('stop strings end the text before the stop', async () => {
    const r = await client.completions.create({
      prompt: gold.prompt, max_tokens: gold.n_predict, temperature: 0, stop: ['girl'],
    });
    const cut = gold.text.indexOf('girl');
    assert.equal(r.choices[0].text, gold.text.slice(0, cut));
    assert.equal(r.choices[0].finish_reason, 'stop');
    const s = await client.completions.create({
      prompt: gold.prompt, max_tokens: gold.n_predict, temperature: 0, stop: 'Lily', stream: true,
    });
    let text = '';
    for await (const chunk of s) text += chunk.choices[0]?.text ?? '';
    assert.equal(text, gold.text.slice(0, gold.text.indexOf('Lily')));
  });

  test('the same seed gives the same sample', async () => {
    const req = { prompt: gold.prompt, max_tokens: 24, temperature: 1.0, seed: 1234 };
    const a = await client.completions.create(req);
    const b = await client.completions.create(req);
    assert.equal(a.choices[0].text, b.choices[0].text);
  });

  test('tokenize and detokenize round-trip', async () => {
    const t = await (await fetch(`${server.url}/tokenize`, {
      method: 'POST', body: JSON.stringify({ prompt: gold.prompt }),
    })).json();
    assert.deepEqual(t.tokens, gold.prompt_tokens);
    const d = await (await fetch(`${server.url}/detokenize`, {
      method: 'POST', body: JSON.stringify({ tokens: gold.prompt_tokens.slice(1) }),
    })).json();
    assert.equal(d.prompt.trim(), gold.prompt);
  });
});
