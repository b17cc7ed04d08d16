// Structured outputs end to end: a corpus of JSON Schemas (data/schemas.json)
// sampled at temperature 1 through the official OpenAI client, every finished
// output validated with ajv (draft 2020-12, ajv-formats); then guided_regex,
// guided_choice, GBNF grammars, json_object, the completions endpoint,
// chat.completions.parse(), the 400s for unsupported keywords and for two
// constraints at once.
//
// stories260K's context is 128 tokens, so a chat reply gets at most what the
// prompt leaves (about 80 tokens), not the ~300 a larger model would get: the
// corpus bounds its strings and arrays so most outputs fit, and outputs cut by
// the length limit are counted but not validated (a cut JSON text is not one).
// The few corpus entries marked "long" (a 10-field user profile, an invoice)
// go through /v1/completions with a one-word prompt, which leaves 126 tokens.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { loadOpenAI, repoRoot, skipReason, startServer } from './helpers.mjs';

const CONTEXT = 128;  // stories260K's n_ctx_train; `cairn serve` refuses more
const SEEDS = [1, 2, 3];
const CONCURRENCY = 4;
// The share of corpus samples that must finish with "stop". Measured on
// stories260K: 248 of 279 (88.9%), the same on every run (fixed seeds); the
// rest run into the context (unbounded strings and keys, recursion without a
// bound, emails whose local part the model drags on). Below 75% means
// something pushes outputs longer (whitespace, a mask that hides the end).
const MIN_STOP_SHARE = 0.75;

const corpus = JSON.parse(readFileSync(path.join(repoRoot, 'tests', 'integration', 'data', 'schemas.json'), 'utf8'));

let skip = skipReason();
let Ajv2020;
let addFormats;
if (!skip) {
  try {
    const require = createRequire(path.join(repoRoot, 'package.json'));
    Ajv2020 = require('ajv/dist/2020').default;
    addFormats = require('ajv-formats').default ?? require('ajv-formats');
  } catch {
    skip = 'skipped: ajv / ajv-formats are not installed (run scripts/install-node-deps.sh)';
  }
}

// Runs `fn` over `items`, at most `limit` at a time, results in order.
async function pool(items, limit, fn) {
  const out = new Array(items.length);
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  }));
  return out;
}

const MESSAGES = [{ role: 'user', content: 'JSON' }];

describe('cairn serve: structured outputs', { skip: skip ?? false }, () => {
  let server;
  let client;
  let ajv;
  let maxTokens;  // what the chat prompt leaves of the context
  const results = new Map();  // schema name -> [{seed, finish, content, error}]
  let corpusMs = 0;

  async function post(route, body) {
    const r = await fetch(`${server.url}${route}`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
    });
    return { status: r.status, body: await r.json() };
  }

  // n samples of a chat request with `extra` fields, seeds 1..n; the
  // finished ones' contents and the count cut by the length limit.
  async function chatSamples(extra, n = 3) {
    const seeds = Array.from({ length: n }, (_, i) => i + 1);
    const rs = await pool(seeds, CONCURRENCY, (seed) => client.chat.completions.create({
      messages: MESSAGES, max_tokens: maxTokens, temperature: 1, seed, ...extra,
    }));
    const done = rs.filter((r) => r.choices[0].finish_reason === 'stop').map((r) => r.choices[0].message.content);
    return { done, cut: rs.length - done.length };
  }

  before(async () => {
    server = await startServer();
    const OpenAI = await loadOpenAI();
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
    ajv = new Ajv2020({ strict: false, allErrors: true, unicodeRegExp: true });
    addFormats(ajv);
    const probe = await client.chat.completions.create({ messages: MESSAGES, max_tokens: 1 });
    maxTokens = CONTEXT - probe.usage.prompt_tokens;

    // The whole corpus, CONCURRENCY requests at a time.
    const jobs = corpus.flatMap((c) => SEEDS.map((seed) => ({ c, seed })));
    const t0 = Date.now();
    const outs = await pool(jobs, CONCURRENCY, async ({ c, seed }) => {
      const response_format = { type: 'json_schema', json_schema: { name: c.name, schema: c.schema, strict: true } };
      try {
        if (c.long) {  // too big for what a chat prompt leaves: the whole context
          const r = await client.completions.create({
            prompt: 'Once', max_tokens: CONTEXT - 2, temperature: 1, seed, response_format,
          });
          return { seed, finish: r.choices[0].finish_reason, content: r.choices[0].text };
        }
        const r = await client.chat.completions.create({
          messages: MESSAGES, max_tokens: maxTokens, temperature: 1, seed, response_format,
        });
        return { seed, finish: r.choices[0].finish_reason, content: r.choices[0].message.content };
      } catch (e) {
        return { seed, error: `${e.status ?? ''} ${e.message}` };
      }
    });
    corpusMs = Date.now() - t0;
    jobs.forEach(({ c }, i) => {
      if (!results.has(c.name)) results.set(c.name, []);
      results.get(c.name).push(outs[i]);
    });
    // CAIRN_STRUCTURED_DUMP=file: every sample, for reading what the model wrote.
    if (process.env.CAIRN_STRUCTURED_DUMP)
      writeFileSync(process.env.CAIRN_STRUCTURED_DUMP, JSON.stringify(Object.fromEntries(results), null, 1));
  });
  after(async () => server?.stop());

  test('the corpus covers every supported keyword', () => {
    assert.ok(corpus.length >= 60, `${corpus.length} schemas`);
    const text = JSON.stringify(corpus.map((c) => c.schema));
    for (const k of ['type', 'properties', 'required', 'additionalProperties', 'items', 'prefixItems',
      'minItems', 'maxItems', 'enum', 'const', 'anyOf', 'oneOf', 'allOf', '$ref', '$defs', 'definitions',
      'minLength', 'maxLength', 'format', 'pattern', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'])
      assert.ok(text.includes(`"${k}":`), `no schema uses ${k}`);
    for (const f of ['date', 'time', 'date-time', 'uuid', 'email'])
      assert.ok(text.includes(`"format":"${f}"`), `no schema uses format ${f}`);
  });

  for (const c of corpus) {
    test(`schema ${c.name}: finished outputs parse and validate`, () => {
      const problems = [];
      // A schema cairn cannot honour exactly is a 400 naming why, never a relaxed output.
      if (c.refused) {
        for (const r of results.get(c.name))
          if (!r.error || !r.error.startsWith('400') || !r.error.includes(c.refused))
            problems.push(`seed ${r.seed}: expected a 400 saying "${c.refused}", got ${r.error ?? JSON.stringify(r.content)}`);
        assert.deepEqual(problems, [], `schema ${c.name}`);
        return;
      }
      const validate = ajv.compile(c.schema);
      for (const r of results.get(c.name)) {
        if (r.error) {
          problems.push(`seed ${r.seed}: request failed: ${r.error}`);
          continue;
        }
        if (r.finish !== 'stop') continue;
        let value;
        try {
          value = JSON.parse(r.content);
        } catch (e) {
          problems.push(`seed ${r.seed}: not JSON (${e.message}): ${JSON.stringify(r.content)}`);
          continue;
        }
        if (!validate(value))
          problems.push(`seed ${r.seed}: ${JSON.stringify(r.content)} fails ${ajv.errorsText(validate.errors)}`);
      }
      assert.deepEqual(problems, [], `schema ${c.name}${c.note ? ` (${c.note})` : ''}: ${JSON.stringify(c.schema)}`);
    });
  }

  test('most corpus samples finish with "stop"', () => {
    let stop = 0;
    let length = 0;
    let failed = 0;
    const cutNames = [];
    const refused = new Set(corpus.filter((c) => c.refused).map((c) => c.name));
    for (const [name, rs] of results) {
      if (refused.has(name)) continue;
      for (const r of rs) {
        if (r.error) failed++;
        else if (r.finish === 'stop') stop++;
        else {
          length++;
          cutNames.push(name);
        }
      }
    }
    const total = stop + length + failed;
    console.log(`structured outputs corpus: ${corpus.length} schemas x ${SEEDS.length} seeds = ${total} samples; ` +
      `stop ${stop} (${(100 * stop / total).toFixed(1)}%), length ${length}, failed ${failed}; ` +
      `max_tokens ${maxTokens}; ${(corpusMs / 1000).toFixed(1)} s at ${CONCURRENCY} at a time`);
    console.log(`cut by the length limit: ${[...new Set(cutNames)].join(', ')}`);
    assert.ok(stop / total >= MIN_STOP_SHARE, `only ${stop} of ${total} finished`);
  });

  // logit_bias pushes the model into corners of a schema's grammar that it
  // rarely reaches on its own: digits 0-3 only make day 30/31 of February
  // or of a 30-day month likely, and numbers likely where strings are usual.
  test('schemas sampled with logit_bias toward the digits 0-3 still validate', async () => {
    const bias = {};
    for (const d of ['0', '1', '2', '3']) {
      const r = await post('/tokenize', { content: d });
      bias[r.body.tokens.at(-1)] = 100;
    }
    const cases = [
      [{ type: 'string', format: 'date' }, 48],
      [{ type: 'string', format: 'date-time' }, 12],
      [{ minimum: 5, maximum: 9 }, 6],  // untyped: bounds on whatever number comes
      [{ type: 'string', enum: ['a', 1, null, true] }, 6],  // the type rules out 1, null, true
    ];
    const problems = [];
    let finished = 0;
    for (const [schema, n] of cases) {
      const validate = ajv.compile(schema);
      const seeds = Array.from({ length: n }, (_, i) => i + 1);
      const rs = await pool(seeds, CONCURRENCY, (seed) => client.chat.completions.create({
        messages: MESSAGES, max_tokens: maxTokens, temperature: 1, seed, logit_bias: bias,
        response_format: { type: 'json_schema', json_schema: { name: 'biased', schema, strict: true } },
      }));
      rs.forEach((r, i) => {
        if (r.choices[0].finish_reason !== 'stop') return;
        finished++;
        const text = r.choices[0].message.content;
        if (!validate(JSON.parse(text)))
          problems.push(`${JSON.stringify(schema)} seed ${seeds[i]}: ${JSON.stringify(text)} fails ${ajv.errorsText(validate.errors)}`);
      });
    }
    assert.ok(finished > 0);
    assert.deepEqual(problems, []);
  });

  test('streamed and n=3 outputs are constrained alike', async () => {
    const schema = { type: 'object', properties: { a: { type: 'integer', minimum: -9, maximum: 9 }, b: { enum: ['x', 'y', null] } }, required: ['a', 'b'] };
    const validate = ajv.compile(schema);
    const response_format = { type: 'json_schema', json_schema: { name: 'ab', schema, strict: true } };
    const texts = [];
    for (const seed of [1, 2, 3]) {
      const stream = await client.chat.completions.create({
        messages: MESSAGES, max_tokens: maxTokens, temperature: 1, seed, response_format, stream: true,
      });
      let text = '';
      let finish = null;
      for await (const chunk of stream) {
        for (const c of chunk.choices) {
          text += c.delta?.content ?? '';
          if (c.finish_reason) finish = c.finish_reason;
        }
      }
      if (finish === 'stop') texts.push(text);
      // The same seed without streaming writes the same text.
      const full = await client.chat.completions.create({
        messages: MESSAGES, max_tokens: maxTokens, temperature: 1, seed, response_format,
      });
      assert.equal(full.choices[0].message.content, text, `seed ${seed}`);
    }
    const many = await client.chat.completions.create({
      messages: MESSAGES, max_tokens: maxTokens, temperature: 1, seed: 7, n: 3, response_format,
    });
    assert.equal(many.choices.length, 3);
    for (const c of many.choices) if (c.finish_reason === 'stop') texts.push(c.message.content);
    assert.ok(texts.length >= 3, `${texts.length} finished`);
    for (const text of texts) assert.ok(validate(JSON.parse(text)), `${text}: ${ajv.errorsText(validate.errors)}`);
  });

  test('guided_regex outputs match the whole regex', async () => {
    for (const re of ['[a-z]{3,6}', '(yes|no|maybe)!?', '\\d{3}-\\d{4}', '[A-Z][a-z]+ [0-9]{1,2}', 'a(b|c)*d', '.{2,5}']) {
      const { done } = await chatSamples({ guided_regex: re });
      const check = new RegExp(`^(?:${re})$`, 'u');
      for (const text of done) assert.match(text, check, `guided_regex ${re}`);
      assert.ok(done.length > 0, `no guided_regex ${re} sample finished`);
    }
  });

  // The recognizer decodes UTF-8 byte by byte. Overlong forms (E0 80 B0 for
  // "0") and UTF-16 surrogates (ED A0 80) are not UTF-8: an output made of
  // them reaches the client as U+FFFD, outside the constraint's language.
  test('constrained outputs are UTF-8: no overlong forms, no surrogates', async () => {
    const problems = [];
    // Byte-fallback tokens: <0xHH> is token 3 + HH in this vocabulary.
    const byteToken = (b) => 3 + b;
    const probe = await post('/detokenize', { tokens: [byteToken(0x41)] });
    assert.equal(probe.body.prompt, 'A', 'byte tokens are not where this test expects them');
    // A class with a digit and U+0800: E0 may start U+0800, and E0 80 B0 is
    // an overlong "0" the recognizer must refuse.
    const bias = { [byteToken(0xe0)]: 100, [byteToken(0x80)]: 100, [byteToken(0xb0)]: 100 };
    for (const seed of [1, 2, 3]) {
      const r = await client.chat.completions.create({
        messages: MESSAGES, max_tokens: 10, temperature: 1, seed, guided_regex: '[0-9\\u0800]', logit_bias: bias,
      });
      const text = r.choices[0].message.content;
      if (!/^[0-9\u0800]$/u.test(text)) problems.push(`guided_regex [0-9\\u0800] seed ${seed} (logit_bias toward bytes E0 80 B0): ${JSON.stringify(text)}`);
    }
    // A surrogate pair written as two \u escapes (as JavaScript writes 😀)
    // is one code point, or else a 400; never the surrogates' own bytes.
    for (const [field, value, check] of [
      ['guided_regex', '\\ud83d\\ude00', (t) => t === '😀'],
      ['guided_regex', 'x[\\ud800-\\udfff]', (t) => false],
      ['guided_json', { type: 'string', pattern: '^\\ud83d\\ude00$' }, (t) => JSON.parse(t) === '😀'],
      ['guided_grammar', 'root ::= [\\U0000D800-\\U0000DFFF]', (t) => false],
    ]) {
      const r = await post('/v1/chat/completions', { messages: MESSAGES, max_tokens: 10, temperature: 1, seed: 1, [field]: value });
      if (r.status === 400) {
        if (r.body.error.param !== field) problems.push(`${field} ${JSON.stringify(value)}: 400 naming ${r.body.error.param}`);
        continue;
      }
      const text = r.body.choices?.[0]?.message?.content;
      if (r.status !== 200 || !check(text)) problems.push(`${field} ${JSON.stringify(value)}: ${r.status} ${JSON.stringify(text ?? r.body)}`);
    }
    assert.deepEqual(problems, []);
  });

  test('guided_choice outputs are one of the choices', async () => {
    const choices = ['yes', 'no', 'maybe so', 'naïve "quoted"', '日本'];
    const { done } = await chatSamples({ guided_choice: choices }, 6);
    assert.ok(done.length > 0);
    for (const text of done) assert.ok(choices.includes(text), `${JSON.stringify(text)} is not a choice`);
  });

  test('GBNF (guided_grammar and grammar) outputs are in the language', async () => {
    // A list: checked by a regex.
    const list = 'root ::= "(" item ( ", " item ){0,3} ")"\nitem ::= [a-z]{1,5} | [0-9]{1,3}\n';
    const listRe = /^\((?:[a-z]{1,5}|[0-9]{1,3})(?:, (?:[a-z]{1,5}|[0-9]{1,3})){0,3}\)$/;
    // Arithmetic with nesting: checked by a recursive descent parser (at most
    // three operators a level, as the grammar says).
    const expr = 'root ::= expr\nexpr ::= term ( [-+*] term ){0,3}\nterm ::= [0-9]{1,3} | "(" expr ")"\n';
    const isExpr = (s) => {
      let i = 0;
      const term = () => {
        if (s[i] === '(') {
          i++;
          if (!exprAt() || s[i] !== ')') return false;
          i++;
          return true;
        }
        const m = /^[0-9]{1,3}/.exec(s.slice(i));
        if (!m || /[0-9]/.test(s[i + m[0].length] ?? '')) return false;
        i += m[0].length;
        return true;
      };
      const exprAt = () => {
        if (!term()) return false;
        for (let ops = 0; ops < 3 && '+-*'.includes(s[i] ?? 'x'); ops++) {
          i++;
          if (!term()) return false;
        }
        return true;
      };
      return exprAt() && i === s.length;
    };
    for (const field of ['guided_grammar', 'grammar']) {
      const a = await chatSamples({ [field]: list }, 4);
      assert.ok(a.done.length > 0, `no ${field} list sample finished`);
      for (const text of a.done) assert.match(text, listRe, `${field} list`);
      const b = await chatSamples({ [field]: expr }, 4);
      assert.ok(b.done.length > 0, `no ${field} expression sample finished`);
      for (const text of b.done) assert.ok(isExpr(text), `${field}: ${JSON.stringify(text)} is not an expression`);
    }
  });

  test('json_object outputs parse to objects', async () => {
    const { done } = await chatSamples({ response_format: { type: 'json_object' } }, 6);
    assert.ok(done.length > 0, 'no json_object sample finished');
    for (const text of done) {
      const v = JSON.parse(text);
      assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v), `${text} is not an object`);
    }
  });

  test('guided_json and json_schema (llama.cpp) constrain like response_format', async () => {
    const schema = { type: 'object', properties: { ok: { type: 'boolean' }, n: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['ok', 'n'] };
    const validate = ajv.compile(schema);
    for (const extra of [{ guided_json: schema }, { json_schema: schema }, { guided_json: JSON.stringify(schema) }]) {
      const { done } = await chatSamples(extra);
      assert.ok(done.length > 0);
      for (const text of done) assert.ok(validate(JSON.parse(text)), `${Object.keys(extra)[0]}: ${text}`);
    }
  });

  test('the completions endpoint takes response_format too', async () => {
    const schema = { type: 'object', properties: { title: { type: 'string', maxLength: 12 }, pages: { type: 'integer', minimum: 1, maximum: 500 } }, required: ['title', 'pages'] };
    const validate = ajv.compile(schema);
    const rs = await pool([1, 2, 3, 4], CONCURRENCY, (seed) => client.completions.create({
      prompt: 'Once upon a time', max_tokens: 100, temperature: 1, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'book', schema, strict: true } },
    }));
    const done = rs.filter((r) => r.choices[0].finish_reason === 'stop');
    assert.ok(done.length > 0, 'no completion finished');
    for (const r of done) assert.ok(validate(JSON.parse(r.choices[0].text)), r.choices[0].text);
  });

  test('chat.completions.parse() returns message.parsed = JSON.parse(content)', async () => {
    const schema = { type: 'object', properties: { word: { type: 'string', maxLength: 6 }, n: { type: 'integer', minimum: 0, maximum: 99 } }, required: ['word', 'n'], additionalProperties: false };
    let parsed = 0;
    for (const seed of [1, 2, 3]) {
      try {
        const r = await client.chat.completions.parse({
          messages: MESSAGES, max_tokens: maxTokens, temperature: 1, seed,
          response_format: { type: 'json_schema', json_schema: { name: 'pair', schema, strict: true } },
        });
        const m = r.choices[0].message;
        assert.deepEqual(m.parsed, JSON.parse(m.content));
        assert.ok(ajv.validate(schema, m.parsed), m.content);
        parsed++;
      } catch (e) {
        // parse() refuses an output cut by max_tokens; nothing else may fail.
        assert.equal(e.constructor.name, 'LengthFinishReasonError', e.message);
      }
    }
    assert.ok(parsed > 0, 'no parse() call finished');
  });

  test('unsupported keywords are a 400 naming the field, the keyword and where it is', async () => {
    const cases = [
      [{ type: 'number', minimum: 1e20 }, '#/minimum', 'minimum'],
      [{ type: 'number', maximum: 0.1234567890123456 }, '#/maximum', 'maximum'],
      [{ type: 'object', properties: { p: { type: 'number', exclusiveMinimum: 1, maximum: 1 } } }, '#/properties/p', 'no number'],
      [{ type: 'integer', multipleOf: 2 }, '#/multipleOf', 'multipleOf'],
      [{ type: 'array', uniqueItems: true }, '#/uniqueItems', 'uniqueItems'],
      [{ type: 'array', contains: { type: 'integer' } }, '#/contains', 'contains'],
      [{ type: 'object', patternProperties: { '^a': {} } }, '#/patternProperties', 'patternProperties'],
      [{ type: 'object', propertyNames: { maxLength: 3 } }, '#/propertyNames', 'propertyNames'],
      [{ type: 'object', minProperties: 1 }, '#/minProperties', 'minProperties'],
      [{ type: 'object', maxProperties: 2 }, '#/maxProperties', 'maxProperties'],
      [{ type: 'object', dependentRequired: { a: ['b'] } }, '#/dependentRequired', 'dependentRequired'],
      [{ type: 'object', unevaluatedProperties: false }, '#/unevaluatedProperties', 'unevaluatedProperties'],
      [{ not: { type: 'string' } }, '#/not', 'not'],
      [{ if: { type: 'string' }, then: { maxLength: 2 }, else: {} }, '#/if', 'if'],
      [{ type: 'string', format: 'ipv4' }, '#/format', 'ipv4'],
      [{ type: 'string', format: 'uri' }, '#/format', 'uri'],
      [{ type: 'string', pattern: '(?=a)b' }, '#/pattern', 'lookaround'],
      [{ type: 'string', pattern: '(a)\\1' }, '#/pattern', 'backreference'],
      [{ $ref: 'https://example.com/schema.json' }, '#/$ref', 'https://example.com/schema.json'],
      [{ $ref: '#/$defs/missing' }, '#/$ref', '#/$defs/missing'],
      [{ type: 'widget' }, '#/type', 'widget'],
      [false, '#', 'false'],
    ];
    const problems = [];
    for (const [schema, pointer, word] of cases) {
      for (const [field, body] of [
        ['response_format', { response_format: { type: 'json_schema', json_schema: { name: 'x', schema, strict: true } } }],
        ['guided_json', { guided_json: schema }],
      ]) {
        const r = await post('/v1/chat/completions', { messages: MESSAGES, max_tokens: 4, ...body });
        const err = r.body.error ?? {};
        if (r.status !== 400 || err.param !== field || !String(err.message).includes(word) || !String(err.message).includes(`'${pointer}'`))
          problems.push(`${field} ${JSON.stringify(schema)}: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
      }
    }
    assert.deepEqual(problems, []);
  });

  test('two constraint fields at once are a 400', async () => {
    const schema = { type: 'boolean' };
    const pairs = [
      [{ response_format: { type: 'json_object' } }, { guided_json: schema }],
      [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } }, { guided_regex: 'a+' }],
      [{ guided_regex: 'a+' }, { guided_choice: ['a', 'b'] }],
      [{ guided_grammar: 'root ::= "a"' }, { grammar: 'root ::= "b"' }],
      [{ json_schema: schema }, { guided_json: schema }],
      [{ guided_choice: ['x'] }, { grammar: 'root ::= "x"' }],
    ];
    for (const [a, b] of pairs) {
      for (const route of ['/v1/chat/completions', '/v1/completions']) {
        const base = route === '/v1/completions' ? { prompt: 'Once' } : { messages: MESSAGES };
        const r = await post(route, { ...base, max_tokens: 4, ...a, ...b });
        const names = [Object.keys(a)[0], Object.keys(b)[0]];
        assert.equal(r.status, 400, `${route} ${names}: ${JSON.stringify(r.body)}`);
        assert.ok(names.includes(r.body.error.param), JSON.stringify(r.body));
        for (const n of names) assert.ok(r.body.error.message.includes(n), JSON.stringify(r.body));
      }
    }
    // response_format {type: "text"} constrains nothing, so it goes with another.
    const r = await post('/v1/chat/completions', { messages: MESSAGES, max_tokens: 4, response_format: { type: 'text' }, guided_choice: ['a'] });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.choices[0].message.content, 'a');
  });
});
