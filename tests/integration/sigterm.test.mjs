// SIGTERM drains: in-flight streams complete, new requests get 503, exit 0.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { golden, loadOpenAI, skipReason, startServer } from './helpers.mjs';

const skip = skipReason();

describe('cairn serve: SIGTERM', { skip: skip ?? false }, () => {
  test('in-flight streams finish, new requests get 503, exit code 0', async () => {
    const gold = golden().cases[0];
    // One sequence at a time, so most streams are still queued or running
    // when the signal arrives (the model is tiny and fast).
    const server = await startServer(['--drain-seconds', '60', '--max-seqs', '1']);
    try {
      const OpenAI = await loadOpenAI();
      const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      // create() resolves once the response headers arrive: the request is accepted.
      const streams = await Promise.all(Array.from({ length: 12 }, () => client.completions.create({
        prompt: gold.prompt, max_tokens: 120, temperature: 0, ignore_eos: true, stream: true,
      })));
      server.proc.kill('SIGTERM');
      // The signal is delivered asynchronously: wait until the server says it
      // is draining, so the next request cannot race ahead of the handler.
      for (let i = 0; i < 500 && !server.stderr().includes('draining'); i++) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      assert.ok(server.stderr().includes('draining'), 'the server logs that it is draining');
      const refused = await fetch(`${server.url}/v1/completions`, {
        method: 'POST', body: JSON.stringify({ prompt: 'a', max_tokens: 2 }),
      }).then((r) => r.status, () => 'connection refused');
      const results = await Promise.all(streams.map(async (stream) => {
        let text = '';
        let finish = null;
        for await (const chunk of stream) {
          text += chunk.choices[0]?.text ?? '';
          finish = chunk.choices[0]?.finish_reason ?? finish;
        }
        return { text, finish };
      }));
      const first = results[0].text;
      for (const r of results) {
        assert.ok(r.text.startsWith(gold.text), 'a drained stream is complete and correct');
        assert.equal(r.text, first);
        assert.equal(r.finish, 'length');
      }
      assert.equal(refused, 503, 'a request after SIGTERM is refused with 503');
      const { code, signal } = await server.exited;
      assert.equal(signal, null);
      assert.equal(code, 0, server.stderr());
    } finally {
      await server.stop();
    }
  });
});
