// Tool calling, reasoning and chat-template fields as an agent framework on
// the official `openai` client uses them: tool_choice required / named (the
// grammar forces a call whose arguments follow the tool's schema), the call
// in message.tool_calls and in streamed deltas (id and name first, then the
// arguments), finish_reason "tool_calls", a round trip with the tool's
// result, reasoning_content split from <think>, chat_template_kwargs, the
// same through a controller and a worker, and the client's key order kept
// from the request to the template (POST /apply-template against Jinja2's
// renders of the shared templates).
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { killAll, startController, startWorker, waitWorkers } from './cluster_helpers.mjs';
import { loadOpenAI, sharedDir, skipReason, startServer } from './helpers.mjs';

const skip = skipReason();

// Short enough for stories260K's 128-token context: tools are not printed,
// and the comment names the Hermes marker and the reasoning tags, so the
// server reads calls and reasoning that way.
const TEMPLATE = `{#- calls are written as <tool_call>{...}</tool_call>, reasoning as <think>...</think> -#}
{%- for m in messages %}{{ m.role }}: {{ m.content if m.content else '' }}{% if flavor is defined %} ({{ flavor }}){% endif %}{{ '\\n' }}
{%- endfor %}{% if add_generation_prompt %}assistant: {% endif %}`;

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'weather',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', minLength: 1, maxLength: 6 }, days: { type: 'integer', minimum: 1, maximum: 3 } },
        required: ['city', 'days'],
      },
    },
  },
  {
    type: 'function',
    function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { enum: ['utc', 'local'] } }, required: ['zone'] } },
  },
];

function checkCall(call, name) {
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  assert.equal(call.type, 'function');
  if (name) assert.equal(call.function.name, name);
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === 'get_weather') {
    assert.equal(typeof args.city, 'string');
    assert.ok([...args.city].length >= 1 && [...args.city].length <= 6, args.city);
    assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 3, String(args.days));
  } else {
    assert.equal(call.function.name, 'get_time');
    assert.ok(['utc', 'local'].includes(args.zone), JSON.stringify(args));
  }
  return args;
}

const ask = { role: 'user', content: 'Weather?' };

// Reads a streamed chat completion the way the SDK's users do.
async function collect(stream) {
  const out = { content: '', reasoning: '', calls: [], finish: null, order: [] };
  for await (const chunk of stream) {
    const ch = chunk.choices[0];
    if (!ch) continue;
    const d = ch.delta ?? {};
    if (d.content) out.content += d.content;
    if (d.reasoning_content) out.reasoning += d.reasoning_content;
    for (const tc of d.tool_calls ?? []) {
      if (tc.id) {
        out.order.push('begin');
        out.calls[tc.index] = { id: tc.id, type: tc.type, function: { name: tc.function.name, arguments: '' } };
      }
      if (tc.function?.arguments) {
        out.order.push('args');
        out.calls[tc.index].function.arguments += tc.function.arguments;
      }
    }
    if (ch.finish_reason) out.finish = ch.finish_reason;
  }
  return out;
}

async function toolCallingChecks(client) {
  // Required, not streamed: one call, content null.
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({
      model: 'm', messages: [ask], tools: TOOLS, tool_choice: 'required', parallel_tool_calls: false,
      max_tokens: 100, temperature: 1, seed,
    });
    const ch = r.choices[0];
    if (ch.finish_reason === 'length') continue;
    assert.equal(ch.finish_reason, 'tool_calls', JSON.stringify(ch));
    assert.equal(ch.message.content, null);
    assert.equal(ch.message.tool_calls.length, 1);
    checkCall(ch.message.tool_calls[0]);
  }
  // Named, streamed: id and name before any argument, arguments that add up.
  let finished = 0;
  for (const seed of [4, 5, 6]) {
    const s = await collect(await client.chat.completions.create({
      model: 'm', messages: [ask], tools: TOOLS, tool_choice: { type: 'function', function: { name: 'get_time' } },
      parallel_tool_calls: false, max_tokens: 100, temperature: 1, seed, stream: true,
    }));
    if (s.finish === 'length') continue;
    finished++;
    assert.equal(s.finish, 'tool_calls');
    assert.equal(s.calls.length, 1);
    assert.equal(s.order[0], 'begin');
    checkCall(s.calls[0], 'get_time');
  }
  assert.ok(finished >= 1, 'no named call finished within max_tokens');
}

describe('tool calls and reasoning over the OpenAI API', { skip: skip ?? false, timeout: 180000 }, () => {
  let dir, templatePath, server, client;
  before(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'cairn-tools-'));
    templatePath = path.join(dir, 'chat.jinja');
    writeFileSync(templatePath, TEMPLATE);
    server = await startServer(['--chat-template', templatePath, '--model-name', 'm']);
    const OpenAI = await loadOpenAI();
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0 });
  });
  after(async () => {
    await server?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('tool_choice required and named force valid calls, whole and streamed', async () => {
    await toolCallingChecks(client);
  });

  test('tool_choice auto: a call the model writes is parsed, plain text stays content', async () => {
    // The grammar stands in for a model trained to call tools.
    const call = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "utc"}}\n</tool_call>';
    const body = {
      model: 'm', messages: [ask], tools: TOOLS, max_tokens: 100, temperature: 0,
      guided_grammar: `root ::= "Let me check." ${JSON.stringify(call)}`,
    };
    const r = await client.chat.completions.create(body);
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.equal(r.choices[0].message.content, 'Let me check.');
    assert.deepEqual(checkCall(r.choices[0].message.tool_calls[0], 'get_time'), { zone: 'utc' });
    const s = await collect(await client.chat.completions.create({ ...body, stream: true }));
    assert.equal(s.finish, 'tool_calls');
    assert.equal(s.content, 'Let me check.');
    assert.equal(s.calls[0].function.name, 'get_time');
    assert.deepEqual(JSON.parse(s.calls[0].function.arguments), { zone: 'utc' });
    // The same text with tool_choice none is content, and the tools are not parsed.
    const none = await client.chat.completions.create({ ...body, tool_choice: 'none' });
    assert.equal(none.choices[0].finish_reason, 'stop');
    assert.equal(none.choices[0].message.content, `Let me check.${call}`);
    assert.equal(none.choices[0].message.tool_calls, undefined);
  });

  test('a round trip: the call, the tool result, then an answer without tools', async () => {
    let call;
    for (let seed = 1; !call && seed < 10; seed++) {
      const r = await client.chat.completions.create({
        model: 'm', messages: [ask], tools: TOOLS, tool_choice: { type: 'function', function: { name: 'get_weather' } },
        parallel_tool_calls: false, max_tokens: 100, temperature: 1, seed,
      });
      if (r.choices[0].finish_reason === 'tool_calls') call = r.choices[0].message;
    }
    assert.ok(call, 'no call finished in 9 tries');
    const messages = [ask, call, { role: 'tool', tool_call_id: call.tool_calls[0].id, content: 'sun' }];
    const rendered = await (await fetch(`${server.url}/apply-template`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ messages }),
    })).json();
    assert.match(rendered.prompt, /tool: sun\nassistant: $/);
    const answer = await client.chat.completions.create({
      model: 'm', messages, tools: TOOLS, tool_choice: 'none', max_tokens: 8, temperature: 0,
    });
    assert.equal(answer.choices[0].message.tool_calls, undefined);
    assert.equal(typeof answer.choices[0].message.content, 'string');
    assert.ok(answer.choices[0].message.content.length > 0);

    // The same round trip streamed: the call from deltas, then the answer.
    let streamed;
    for (let seed = 1; !streamed && seed < 10; seed++) {
      const s = await collect(await client.chat.completions.create({
        model: 'm', messages: [ask], tools: TOOLS, tool_choice: { type: 'function', function: { name: 'get_weather' } },
        parallel_tool_calls: false, max_tokens: 100, temperature: 1, seed, stream: true,
      }));
      if (s.finish === 'tool_calls') streamed = s;
    }
    assert.ok(streamed, 'no streamed call finished in 9 tries');
    checkCall(streamed.calls[0], 'get_weather');
    const again = [ask, { role: 'assistant', content: null, tool_calls: streamed.calls },
      { role: 'tool', tool_call_id: streamed.calls[0].id, content: 'rain' }];
    const s = await collect(await client.chat.completions.create({
      model: 'm', messages: again, tools: TOOLS, max_tokens: 8, temperature: 0, stream: true,
    }));
    assert.ok(['stop', 'length'].includes(s.finish), s.finish);
    assert.equal(s.calls.length, 0);
    assert.ok(s.content.length > 0);
  });

  test('reasoning_content: <think> split out, whole and streamed', async () => {
    // A grammar makes the tiny model write reasoning and an answer.
    const body = {
      model: 'm', messages: [ask], max_tokens: 60, temperature: 1, seed: 7,
      guided_grammar: 'root ::= "<think>" [a-z]{2,6} " " [a-z]{2,6} "</think>" [a-z]{2,8}',
    };
    const whole = await client.chat.completions.create(body);
    const m = whole.choices[0].message;
    assert.equal(whole.choices[0].finish_reason, 'stop');
    assert.match(m.reasoning_content, /^[a-z]{2,6} [a-z]{2,6}$/);
    assert.match(m.content, /^[a-z]{2,8}$/);
    const s = await collect(await client.chat.completions.create({ ...body, stream: true }));
    assert.equal(s.reasoning, m.reasoning_content);
    assert.equal(s.content, m.content);
  });

  test('chat_template_kwargs reach the template; reserved names are refused', async () => {
    const post = (body) => fetch(`${server.url}/apply-template`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
    });
    const ok = await (await post({ messages: [ask], chat_template_kwargs: { flavor: 'mild' } })).json();
    assert.equal(ok.prompt, 'user: Weather? (mild)\nassistant: ');
    const bad = await post({ messages: [ask], chat_template_kwargs: { messages: [] } });
    assert.equal(bad.status, 400);
    assert.match((await bad.json()).error.message, /messages/);
    const r = await client.chat.completions.create({
      model: 'm', messages: [ask], chat_template_kwargs: { flavor: 'mild' }, max_tokens: 2,
    });
    assert.ok(r.usage.prompt_tokens > 0);
  });

  test('bad tool fields are 400s naming them', async () => {
    for (const [extra, param] of [
      [{ tools: TOOLS, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice'],
      [{ tool_choice: 'required' }, 'tool_choice'],
      [{ tools: [{ type: 'code_interpreter' }] }, 'tools'],
      [{ tools: TOOLS, tool_choice: 'required', response_format: { type: 'json_object' } }, 'tool_choice'],
    ]) {
      await assert.rejects(
        client.chat.completions.create({ model: 'm', messages: [ask], max_tokens: 4, ...extra }),
        (e) => e.status === 400 && e.param === param,
        JSON.stringify(extra));
    }
  });
});

describe('tool calls through a controller and a worker', { skip: skip ?? false, timeout: 180000 }, () => {
  let dir, client;
  before(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'cairn-tools-cluster-'));
    const templatePath = path.join(dir, 'chat.jinja');
    writeFileSync(templatePath, TEMPLATE);
    const controller = await startController();
    await startWorker(controller.grpc, 'tw', undefined, ['--chat-template', templatePath, '--model-name', 'm']);
    await waitWorkers(controller.url, 1, 10000);
    const OpenAI = await loadOpenAI();
    client = new OpenAI({ baseURL: `${controller.url}/v1`, apiKey: 'none', maxRetries: 0 });
  });
  after(() => {
    killAll();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('the same calls, whole and streamed', async () => {
    await toolCallingChecks(client);
  });
});

// Jinja2's renders of the shared templates with tools: the request's key
// order must reach the template (tools print with tojson).
const goldenPath = path.join(sharedDir, 'golden', 'chat-templates.json');
const renderSkip = skip ?? (existsSync(goldenPath) ? null : 'skipped: ../shared/golden/chat-templates.json is not available');

describe('tools reach chat templates in the client\'s key order', { skip: renderSkip ?? false, timeout: 180000 }, () => {
  test('POST /apply-template equals Jinja2 for every render of the shared golden file', async () => {
    const gold = JSON.parse(readFileSync(goldenPath, 'utf8'));
    // The reference rendered strftime_now with a fixed date; cairn prints today's.
    const fixed = '15 Jan 2026';
    const now = new Date();
    const today = `${String(now.getDate()).padStart(2, '0')} ${now.toLocaleString('en-US', { month: 'short' })} ${now.getFullYear()}`;
    const byTemplate = new Map();
    for (const c of gold.cases) {
      if (c.error) continue;
      if (!byTemplate.has(c.template)) byTemplate.set(c.template, []);
      byTemplate.get(c.template).push(c);
    }
    let compared = 0;
    for (const [template, cases] of byTemplate) {
      const server = await startServer(['--chat-template', path.join(sharedDir, 'templates', template)]);
      try {
        for (const c of cases) {
          const r = await fetch(`${server.url}/apply-template`, {
            method: 'POST', headers: { 'Content-Type': 'application/json' },
            body: JSON.stringify({ messages: c.messages, ...(c.tools ? { tools: c.tools } : {}) }),
          });
          const body = await r.json();
          assert.equal(r.status, 200, `${template} / ${c.conversation}: ${JSON.stringify(body)}`);
          assert.equal(body.prompt, c.render.replaceAll(fixed, today), `${template} / ${c.conversation}`);
          compared++;
        }
      } finally {
        await server.stop();
      }
    }
    assert.equal(compared, gold.cases.filter((c) => !c.error).length);
  });
});
