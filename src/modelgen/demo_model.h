// modelgen/demo_model.h — the built-in demo model, so a fresh machine runs end to end.
// Owns the SentencePiece-style vocabulary compiled into the binary (<unk>, <s>,
// </s>, 256 byte-fallback tokens, and a few hundred English word pieces with
// scores, generated in code) and the cache file the demo model lives in. The
// weights are random: its text is gibberish by design. Never downloads.
#pragma once

#include <filesystem>
#include <string>

#include "core/status.h"
#include "modelgen/model_builder.h"

namespace cairn::modelgen {

// Bumped whenever the vocabulary, shape or weight generation changes, so an
// old cached file is never mistaken for the current one.
inline constexpr const char* kDemoModelFile = "demo-llama-v1.gguf";

// The demo vocabulary as tokenizer.* metadata (tokenizer.ggml.model = llama).
VocabSource demo_vocab();

// The demo model's shape: llama, dim 128, 2 layers, 4 heads / 2 KV heads, F32.
RandomModelSpec demo_spec();

// $CAIRN_CACHE_DIR, else $XDG_CACHE_HOME/cairn, else $HOME/.cache/cairn; an
// error when none of them is set.
Result<std::filesystem::path> default_cache_dir();

// Path of the demo model in `cache_dir`, written there first if it is missing
// or unreadable. Safe when several processes do this at once: each writes a
// temp file and renames it over the (identical) target.
Result<std::string> ensure_demo_model(const std::filesystem::path& cache_dir);

// `model` itself when given; otherwise the demo model in default_cache_dir()
// (written on first use), with a log line saying its text is gibberish. What
// every command that takes -m does when -m is left out.
Result<std::string> model_or_demo(const std::string& model);

}  // namespace cairn::modelgen
