// 32 concurrent streaming clients get complete, correct answers; 32 clients
// that disconnect mid-stream leave nothing running, waiting or holding KV blocks.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { golden, loadOpenAI, metric, skipReason, startServer, waitFor } from './helpers.mjs';

const skip = skipReason();

describe('cairn serve: concurrency', { skip: skip ?? false }, () => {
  let server;
  let client;
  let gold;

  before(async () => {
    gold = golden().cases[0];
    server = await startServer(['--max-seqs', '64']);
    const OpenAI = await loadOpenAI();
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => server?.stop());

  test('32 concurrent streams all equal the golden text', async () => {
    const one = async () => {
      const stream = await client.completions.create({
        prompt: gold.prompt, max_tokens: gold.n_predict, temperature: 0, stream: true,
      });
      let text = '';
      let finish = null;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.text ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      return { text, finish };
    };
    const results = await Promise.all(Array.from({ length: 32 }, one));
    for (const r of results) {
      assert.equal(r.text, gold.text);
      assert.equal(r.finish, 'length');
    }
  });

  test('32 clients disconnecting mid-stream free everything', async () => {
    const one = async () => {
      const ac = new AbortController();
      const stream = await client.completions.create(
        { prompt: gold.prompt, max_tokens: 120, temperature: 0, ignore_eos: true, stream: true },
        { signal: ac.signal },
      );
      try {
        for await (const chunk of stream) {
          if (chunk.choices[0]?.text) {
            ac.abort();
            break;
          }
        }
      } catch (e) {
        if (e.name !== 'AbortError' && !String(e).includes('abort')) throw e;
      }
    };
    await Promise.all(Array.from({ length: 32 }, one));
    await waitFor(async () => {
      const running = await metric(server.url, 'cairn_requests_running');
      const waiting = await metric(server.url, 'cairn_requests_waiting');
      const used = await metric(server.url, 'cairn_kv_blocks_used');
      return (running === 0 && waiting === 0 && used === 0) ||
        `running ${running}, waiting ${waiting}, kv blocks used ${used}`;
    }, 15000, 'an idle engine after disconnects');
    // The server still answers correctly afterwards.
    const r = await client.completions.create({
      prompt: gold.prompt, max_tokens: gold.n_predict, temperature: 0,
    });
    assert.equal(r.choices[0].text, gold.text);
  });
});
