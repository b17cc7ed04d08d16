// A generated corpus for tokenizer parity: ordinary text that stresses what
// tokenizers disagree on (mixed scripts, combining marks in any order and
// both composed and decomposed, Hangul jamo, emoji with modifiers and ZWJ,
// whitespace runs, code, numbers with separators, compatibility characters),
// and a second set with special-token text in it. Deterministic: a seeded
// PRNG, so a failure names a string that the next run makes again.

export function rng(seed) {
  let a = seed >>> 0;
  return () => {  // mulberry32
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const words = [
  // Latin with accents, composed and (through .normalize('NFD')) decomposed
  'hello', 'World', "don't", "I'LL", 'café', 'naïve', 'Ångström', 'façade', 'Straße', 'œuvre',
  'jalapeño', 'São', 'Việt', 'Nguyễn', 'Łódź', 'Dvořák', 'ﬁle', 'x²', 'ＡＢＣ', 'Ⅻ', 'Å',
  // Greek, Cyrillic, Armenian, Georgian
  'καλημέρα', 'ἀλήθεια', 'Ελλάδα', 'привет', 'Ёлка', 'йогурт', 'բարեւ', 'გამარჯობა',
  // Hebrew and Arabic with points, Devanagari, Bengali, Tamil, Thai
  'שָׁלוֹם', 'مرحبا', 'اَلسَّلَامُ', 'नमस्ते', 'क़िला', 'বাংলা', 'தமிழ்', 'สวัสดี', 'ภาษาไทย',
  // CJK, kana (with dakuten), Hangul syllables
  '你好', '世界', '漢字', 'こんにちは', 'ガギグ', 'パピプ', 'カタカナ', '한국어', '각', '안녕하세요',
  // emoji: modifiers, ZWJ sequences, flags, keycaps, variation selectors
  '👍', '👍🏽', '👩‍💻', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇩🇪', '🇯🇵', '1️⃣', '❤️', '☺︎', '🤷🏿‍♀️',
  // code and symbols
  'fn main() {', 'return x != 0;', '=>', '&&', '::', '#include <stdio.h>', 'a_b_c', 'camelCase',
  '$HOME', '~/.ssh', '{"k": [1, 2]}', '</div>', '0x1F', '@user', 'C++20', '½', '→', '€', '©',
];
const numbers = ['1,234,567.89', '1 000 000', '12\'345', '3.14159', '-42', '1e-9', '2026-12-04',
  '١٢٣', '१२३', '１２３', '00:00', '99.9%', '10,5 €', '1_000_000'];
const spaces = [' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', ' \n ', '\u00a0', '\u3000', '\u2003',
  '\t\t', '    \n'];
const marks = [0x300, 0x301, 0x302, 0x303, 0x308, 0x30a, 0x30c, 0x323, 0x327, 0x328, 0x331, 0x345,
  0x3099, 0x309a];
const bases = 'aeiouAEIOUcnsyzgkαωиуこか';
// Conjoining jamo: leading U+1100.., vowel U+1161.., trailing U+11A8..
const jamo = (r) => String.fromCodePoint(0x1100 + Math.floor(r() * 19), 0x1161 + Math.floor(r() * 21))
  + (r() < 0.5 ? String.fromCodePoint(0x11a8 + Math.floor(r() * 27)) : '');

function pick(r, list) { return list[Math.floor(r() * list.length)]; }

function piece(r) {
  const k = r();
  if (k < 0.40) {
    const w = pick(r, words);
    const f = r();
    return f < 0.3 ? w.normalize('NFD') : f < 0.4 ? w.normalize('NFKD') : w;
  }
  if (k < 0.50) return pick(r, numbers);
  if (k < 0.62) {  // a base with one to three marks in any order (canonical reordering)
    let s = bases[Math.floor(r() * bases.length)];
    const n = 1 + Math.floor(r() * 3);
    for (let i = 0; i < n; ++i) s += String.fromCodePoint(pick(r, marks));
    return s;
  }
  if (k < 0.68) return jamo(r);
  if (k < 0.72) return String.fromCodePoint(pick(r, marks));  // a mark with nothing to attach to
  if (k < 0.76) return String.fromCodePoint(0xac00 + Math.floor(r() * 11172)).normalize('NFD');
  if (k < 0.80) return "'" + pick(r, ['s', 't', 're', 'VE', 'm', 'll', 'D']);
  return pick(r, spaces);
}

// `n` ordinary strings (no special-token text).
export function ordinaryCorpus(n, seed = 43) {
  const r = rng(seed);
  const out = [];
  for (let i = 0; i < n; ++i) {
    const len = 1 + Math.floor(r() * 12);
    let s = '';
    for (let j = 0; j < len; ++j) {
      s += piece(r);
      if (r() < 0.5) s += ' ';
    }
    out.push(s);
  }
  return out;
}

// Strings that hold special-token text (`specials`, the vocabulary's own)
// between ordinary pieces, against and apart from neighbouring text.
export function specialCorpus(n, specials, seed = 4343) {
  const r = rng(seed);
  const out = [];
  for (let i = 0; i < n; ++i) {
    let s = '';
    const len = 1 + Math.floor(r() * 6);
    for (let j = 0; j < len; ++j) {
      s += r() < 0.4 ? pick(r, specials) : piece(r);
      if (r() < 0.3) s += pick(r, [' ', '\n', '']);
    }
    out.push(s);
  }
  return out;
}

// "U+0065 U+0301 ..." for a failure message.
export function codePoints(s) {
  return [...s].map((c) => 'U+' + c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')).join(' ');
}
