// tokenizer/normalizer.h — the Unicode normalization a tokenizer family's own
// tokenizer.json applies before pre-tokenizing. GGUF does not carry the
// normalizer, so it is chosen by `tokenizer.ggml.model` and
// `tokenizer.ggml.pre`. Internal to the tokenizer layer; Unicode data comes
// from utf8proc.
#pragma once

#include <string>
#include <string_view>

namespace cairn::tok {

enum class Normalization { None, Nfc };

// The normalizer of a byte-level BPE vocabulary by its pre-tokenizer name (the
// raw tokenizer.ggml.pre value). Only families whose tokenizer.json declares
// one get it: Qwen2/2.5/3 ("qwen2") declare NFC. Llama 3, GPT-2, DeepSeek
// (V3, LLM, coder), StarCoder and Falcon declare none. SentencePiece
// families (Llama 2, Gemma) only replace spaces, which SPM encoding already
// does, and BERT's normalizer lives in the WordPiece model.
Normalization bpe_normalization(std::string_view pre);

// NFC of `text` (canonical composition, utf8proc's UTF8PROC_STABLE |
// UTF8PROC_COMPOSE). ASCII text is returned as it is without calling
// utf8proc. Invalid UTF-8 is kept byte for byte: each maximal valid run
// between invalid bytes is normalized on its own.
std::string nfc(std::string_view text);

// True when nfc(text) == text is certain without computing it (all ASCII).
bool is_ascii(std::string_view text);

}  // namespace cairn::tok
