// Every kind of bad input gets its 4xx in OpenAI's error shape and leaves the
// server healthy; the same with --api-key for 401s.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { loadOpenAI, skipReason, startServer } from './helpers.mjs';

const skip = skipReason();

async function call(url, path, { method = 'POST', body, headers = {} } = {}) {
  const r = await fetch(url + path, {
    method,
    headers: { 'Content-Type': 'application/json', ...headers },
    body,
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch {}
  return { status: r.status, json, text, headers: r.headers };
}

function assertErrorShape(res, status, type, name) {
  assert.equal(res.status, status, `${name}: status (body ${res.text.slice(0, 200)})`);
  assert.ok(res.json && res.json.error, `${name}: OpenAI error object`);
  for (const k of ['message', 'type', 'param', 'code']) assert.ok(k in res.json.error, `${name}: error.${k}`);
  assert.equal(res.json.error.type, type, `${name}: error type`);
  assert.ok(res.json.error.message.length < 300, `${name}: short message`);
}

describe('cairn serve: bad input', { skip: skip ?? false }, () => {
  let server;
  let nCtx;

  before(async () => {
    server = await startServer(['--max-body-bytes', '65536']);
    const models = await (await fetch(`${server.url}/v1/models`)).json();
    nCtx = models.data[0].max_model_len;
  });
  after(async () => server?.stop());

  test('table of bad requests, then a good one', async () => {
    const body = (o) => JSON.stringify(o);
    const longPrompt = Array.from({ length: 40 }, (_, i) => 300 + (i % 100));
    const cases = [
      ['malformed JSON', '/v1/completions', '{"prompt": "a",', 400, 'invalid_request_error'],
      ['body is a list', '/v1/completions', '[1, 2]', 400, 'invalid_request_error'],
      ['body is a string', '/v1/chat/completions', '"hi"', 400, 'invalid_request_error'],
      ['empty body', '/v1/completions', '', 400, 'invalid_request_error'],
      ['prompt wrong type', '/v1/completions', body({ prompt: 5 }), 400, 'invalid_request_error'],
      ['max_tokens wrong type', '/v1/completions', body({ prompt: 'a', max_tokens: 'ten' }), 400, 'invalid_request_error'],
      ['messages wrong type', '/v1/chat/completions', body({ messages: 'hi' }), 400, 'invalid_request_error'],
      ['unknown model', '/v1/completions', body({ model: 'gpt-9', prompt: 'a' }), 404, 'invalid_request_error'],
      ['empty prompt', '/v1/completions', body({ prompt: '' }), 400, 'invalid_request_error'],
      ['empty messages', '/v1/chat/completions', body({ messages: [] }), 400, 'invalid_request_error'],
      ['prompt + max_tokens beyond context', '/v1/completions',
        body({ prompt: longPrompt, max_tokens: nCtx }), 400, 'invalid_request_error'],
      ['max_tokens 0', '/v1/completions', body({ prompt: 'a', max_tokens: 0 }), 400, 'invalid_request_error'],
      ['max_tokens negative', '/v1/completions', body({ prompt: 'a', max_tokens: -3 }), 400, 'invalid_request_error'],
      ['temperature NaN', '/v1/completions', '{"prompt":"a","temperature":NaN}', 400, 'invalid_request_error'],
      ['temperature Infinity', '/v1/completions', '{"prompt":"a","temperature":1e999}', 400, 'invalid_request_error'],
      ['temperature negative', '/v1/completions', body({ prompt: 'a', temperature: -1 }), 400, 'invalid_request_error'],
      ['top_p out of range', '/v1/completions', body({ prompt: 'a', top_p: 1.5 }), 400, 'invalid_request_error'],
      ['presence_penalty out of range', '/v1/completions', body({ prompt: 'a', presence_penalty: 9 }), 400, 'invalid_request_error'],
      ['token id outside vocab', '/v1/completions', body({ prompt: [1, 100000] }), 400, 'invalid_request_error'],
      ['negative token id', '/v1/completions', body({ prompt: [1, -1] }), 400, 'invalid_request_error'],
      ['logit_bias id outside vocab', '/v1/completions', body({ prompt: 'a', logit_bias: { 99999: 1 } }), 400, 'invalid_request_error'],
      ['invalid UTF-8', '/v1/completions', Buffer.from([...Buffer.from('{"prompt":"'), 0xff, 0xfe, ...Buffer.from('"}')]), 400, 'invalid_request_error'],
      ['n too large', '/v1/completions', body({ prompt: 'a', n: 1000 }), 400, 'invalid_request_error'],
      ['body over --max-body-bytes', '/v1/completions', body({ prompt: 'a'.repeat(70000) }), 413, 'invalid_request_error'],
      ['unknown route', '/v1/nothing', body({}), 404, 'not_found_error'],
    ];
    for (const [name, path, b, status, type] of cases) {
      const res = await call(server.url, path, { body: b });
      assertErrorShape(res, status, type, name);
      if (name === 'prompt + max_tokens beyond context') {
        assert.match(res.json.error.message, new RegExp(String(longPrompt.length)), 'names the prompt length');
        assert.match(res.json.error.message, new RegExp(String(nCtx)), 'names the limit');
      }
    }
    const wrongMethod = await call(server.url, '/v1/completions', { method: 'GET' });
    assertErrorShape(wrongMethod, 405, 'invalid_request_error', 'wrong method');

    // Unknown fields are ignored; a prompt of context - 1 with 1 new token works.
    const ok = await call(server.url, '/v1/completions', {
      body: body({ prompt: 'Once upon a time', max_tokens: 4, temperature: 0, frobnicate: true }),
    });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.choices.length, 1);
    const edge = await call(server.url, '/v1/completions', {
      body: body({ prompt: Array.from({ length: nCtx - 1 }, (_, i) => 300 + (i % 100)), max_tokens: 1 }),
    });
    assert.equal(edge.status, 200, edge.text);
    assert.equal(edge.json.usage.completion_tokens, 1);
    const health = await call(server.url, '/health', { method: 'GET' });
    assert.equal(health.status, 200);
  });
});

describe('cairn serve: --api-key', { skip: skip ?? false }, () => {
  let server;
  before(async () => {
    server = await startServer(['--api-key', 'sk-test-123']);
  });
  after(async () => server?.stop());

  test('401 without the key on every route but /health', async () => {
    const body = JSON.stringify({ prompt: 'a', max_tokens: 2 });
    const cases = [
      ['POST', '/v1/completions', {}],
      ['POST', '/v1/chat/completions', {}],
      ['GET', '/v1/models', {}],
      ['GET', '/metrics', {}],
      ['POST', '/tokenize', {}],
      ['POST', '/detokenize', {}],
      ['POST', '/v1/completions', { Authorization: 'Bearer sk-test-124' }],
      ['POST', '/v1/completions', { Authorization: 'Bearer ' }],
      ['POST', '/v1/completions', { Authorization: 'sk-test-123' }],
      ['POST', '/v1/completions', { Authorization: 'Basic c2stdGVzdC0xMjM=' }],
    ];
    for (const [method, path, headers] of cases) {
      const res = await call(server.url, path, { method, headers, body: method === 'POST' ? body : undefined });
      assertErrorShape(res, 401, 'authentication_error', `${method} ${path} ${JSON.stringify(headers)}`);
    }
    assert.equal((await call(server.url, '/health', { method: 'GET' })).status, 200);

    const OpenAI = await loadOpenAI();
    const bad = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.completions.create({ prompt: 'a', max_tokens: 2 }), (e) => e.status === 401);
    const good = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sk-test-123', maxRetries: 0 });
    const r = await good.completions.create({ prompt: 'Once upon a time', max_tokens: 4, temperature: 0 });
    assert.equal(r.choices.length, 1);
  });
});
