// LoRA adapters as a vLLM user reaches them with the official `openai`
// client: `cairn serve -m BASE --lora-modules NAME=FILE` lists each adapter
// in /v1/models beside the base model (with its parent), a request's `model`
// picks one, requests of the base and of the adapters running at the same
// time get what each gets alone, and an unknown model is a 404 naming it.
// The base model is stories260K; the adapters are written by `cairn make-lora`.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { cairnBin, loadOpenAI, modelPath, skipReason, startServer } from './helpers.mjs';

const skip = skipReason();
const PROMPT = 'Once upon a time, there was a little girl who';

describe('LoRA adapters over the OpenAI API', { skip: skip ?? false }, () => {
  let dir, server, client;
  before(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'cairn-lora-'));
    for (const [name, targets, seed] of [['sql', 'attn_q,attn_v,output', 1], ['poem', 'attn_k,ffn_up,ffn_down', 2]]) {
      const made = spawnSync(cairnBin, ['make-lora', modelPath, path.join(dir, `${name}.gguf`), '--rank', '4',
        '--targets', targets, '--b-scale', '2', '--seed', String(seed)], { encoding: 'utf8' });
      assert.equal(made.status, 0, made.stderr);
    }
    server = await startServer(['--lora-modules', `sql=${path.join(dir, 'sql.gguf')}`,
      '--lora-modules', `poem=${path.join(dir, 'poem.gguf')}:0.5`]);
    const OpenAI = await loadOpenAI();
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none' });
  });
  after(async () => {
    await server?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const complete = (model) =>
    client.completions.create({ model, prompt: PROMPT, max_tokens: 24, temperature: 0 })
      .then((r) => r.choices[0].text);

  test('/v1/models lists the adapters with their parent', async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m);
    const base = ids.find((m) => m.parent === undefined);
    assert.ok(base, JSON.stringify(ids));
    for (const name of ['sql', 'poem']) {
      const m = ids.find((x) => x.id === name);
      assert.ok(m, `${name} missing from ${JSON.stringify(ids)}`);
      assert.equal(m.parent, base.id);
    }
  });

  test('each model answers its own way, alone and all at once', async () => {
    const models = ['stories260K', 'sql', 'poem'];
    const alone = [];
    for (const m of models) alone.push(await complete(m));
    assert.notEqual(alone[0], alone[1]);
    assert.notEqual(alone[0], alone[2]);
    assert.notEqual(alone[1], alone[2]);
    const together = await Promise.all([...models, ...models].map(complete));
    for (let i = 0; i < together.length; ++i) assert.equal(together[i], alone[i % 3], `request ${i}`);
    // Chat takes the adapter the same way.
    const chat = await client.chat.completions.create({
      model: 'sql', messages: [{ role: 'user', content: 'hello' }], max_tokens: 8, temperature: 0 });
    assert.equal(chat.model, 'sql');
  });

  test('an unknown model is a 404 that names it', async () => {
    await assert.rejects(complete('nope'), (e) => e.status === 404 && /nope/.test(e.message));
  });
});
