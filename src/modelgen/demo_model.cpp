// modelgen/demo_model.cpp — the demo vocabulary (built in code), the demo shape, its cache file.
#include "modelgen/demo_model.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <system_error>
#include <unordered_set>

namespace cairn::modelgen {

namespace {

// Common English words; each becomes "▁word" (SentencePiece marks a preceding
// space with U+2581), and every prefix of every piece is added too so the
// merge-by-score tokenizer can build each word from its characters.
constexpr std::string_view kWords =
    "the of and to a in is it you that he was for on are with as I his they be at one have this "
    "from or had by not word but what some we can out other were all there when up use your how "
    "said an each she which do their time if will way about many then them write would like so "
    "these her long make thing see him two has look more day could go come did number sound no "
    "most people my over know water than call first who may down side been now find any new work "
    "part take get place made live where after back little only round man year came show every "
    "good me give our under name very through just form sentence great think say help low line "
    "differ turn cause much mean before move right boy old too same tell does set three want air "
    "well also play small end put home read hand port large spell add even land here must big "
    "high such follow act why ask men change went light kind off need house picture try us again "
    "animal point mother world near build self earth father head stand own page should country "
    "found answer school grow study still learn plant cover food sun four between state keep eye "
    "never last let thought city tree cross farm hard start might story saw far sea draw left late "
    "run while press close night real life few north open seem together next white children begin "
    "got walk example ease paper group always music those both mark often letter until mile river "
    "car feet care second book carry took science eat room friend began idea fish mountain stop "
    "once base hear horse cut sure watch color face wood main enough plain girl usual young ready "
    "above ever red list though feel talk bird soon body dog family direct pose leave song measure "
    "door product black short numeral class wind question happen complete ship area half rock "
    "order fire south problem piece told knew pass since top whole king space heard best hour "
    "better true during hundred five remember step early hold west ground interest reach fast "
    "The He She It They We Once upon Lily Tom Ben happy sad love loved toy ball park";

// Pieces used inside words (no leading space).
constexpr std::string_view kSuffixes = "ing ed er ly s es est ion ment ness";

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581

// llama.cpp's token types.
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kByte = 6;

struct VocabBuilder {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  std::unordered_set<std::string> seen;

  void add(const std::string& piece, int32_t type) {
    if (!seen.insert(piece).second) return;
    tokens.push_back(piece);
    // Earlier pieces win merges: prefixes precede the words they build.
    scores.push_back(type == kNormal ? -static_cast<float>(tokens.size()) : 0.0f);
    types.push_back(type);
  }
  // The piece and all its prefixes, shortest first, cut only at UTF-8
  // character boundaries.
  void add_with_prefixes(const std::string& piece, size_t first_len) {
    for (size_t n = first_len; n <= piece.size(); ++n) {
      if (n < piece.size() && (static_cast<unsigned char>(piece[n]) & 0xC0) == 0x80) continue;
      add(piece.substr(0, n), kNormal);
    }
  }
};

template <typename F>
void for_each_word(std::string_view list, F f) {
  size_t i = 0;
  while (i < list.size()) {
    size_t j = list.find(' ', i);
    if (j == std::string_view::npos) j = list.size();
    if (j > i) f(std::string(list.substr(i, j - i)));
    i = j + 1;
  }
}

}  // namespace

VocabSource demo_vocab() {
  VocabBuilder b;
  b.add("<unk>", kUnknown);
  b.add("<s>", kControl);
  b.add("</s>", kControl);
  for (int i = 0; i < 256; ++i) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", i);
    b.add(name, kByte);
  }
  b.add(std::string(kSpace), kNormal);
  for (char c = 'a'; c <= 'z'; ++c) b.add(std::string(1, c), kNormal);
  for (char c = 'A'; c <= 'Z'; ++c) b.add(std::string(1, c), kNormal);
  for (char c : std::string_view("0123456789.,!?'\"-:;()")) b.add(std::string(1, c), kNormal);
  for (char c : std::string_view(".,!?'\"")) b.add(std::string(kSpace) + c, kNormal);
  for_each_word(kWords, [&](const std::string& w) {
    b.add_with_prefixes(std::string(kSpace) + w, kSpace.size() + 1);
  });
  for_each_word(kSuffixes, [&](const std::string& w) { b.add_with_prefixes(w, 2); });

  VocabSource v;
  v.n_vocab = static_cast<int64_t>(b.tokens.size());
  v.is_byte_token.resize(b.types.size());
  for (size_t i = 0; i < b.types.size(); ++i) v.is_byte_token[i] = b.types[i] == kByte;
  v.write_metadata = [tokens = b.tokens, scores = b.scores, types = b.types](gguf::Writer& w) {
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_float32_array("tokenizer.ggml.scores", scores);
    w.set_int32_array("tokenizer.ggml.token_type", types);
    w.set_uint32("tokenizer.ggml.unknown_token_id", 0);
    w.set_uint32("tokenizer.ggml.bos_token_id", 1);
    w.set_uint32("tokenizer.ggml.eos_token_id", 2);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    w.set_bool("tokenizer.ggml.add_eos_token", false);
  };
  return v;
}

RandomModelSpec demo_spec() {
  RandomModelSpec s;
  s.arch = "llama";
  s.name = "cairn-demo (random weights)";
  s.dim = 128;
  s.layers = 2;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 384;
  s.ctx = 1024;
  s.type = TensorType::F32;
  s.seed = 20240601;
  return s;
}

Result<std::filesystem::path> default_cache_dir() {
  auto env = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return (v && *v) ? v : nullptr;
  };
  if (const char* d = env("CAIRN_CACHE_DIR")) return std::filesystem::path(d);
  if (const char* d = env("XDG_CACHE_HOME")) return std::filesystem::path(d) / "cairn";
  if (const char* d = env("HOME")) return std::filesystem::path(d) / ".cache" / "cairn";
  return Status::error("no cache folder for the demo model: set CAIRN_CACHE_DIR or HOME");
}

Result<std::string> ensure_demo_model(const std::filesystem::path& cache_dir) {
  namespace fs = std::filesystem;
  const fs::path path = cache_dir / kDemoModelFile;
  // An existing file is trusted only if it parses; a damaged one is rewritten.
  if (fs::exists(path) && gguf::File::open(path.string()).is_ok()) return path.string();
  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  if (ec)
    return Status::error("cannot create cache folder " + cache_dir.string() + ": " + ec.message());
  auto written = write_random_model(demo_spec(), demo_vocab(), path.string());
  if (!written.is_ok()) return written.status().with_context("writing the demo model");
  return path.string();
}

Result<std::string> model_or_demo(const std::string& model) {
  if (!model.empty()) return model;
  auto dir = default_cache_dir();
  if (!dir.is_ok()) return dir.status();
  auto demo = ensure_demo_model(*dir);
  if (!demo.is_ok()) return demo.status();
  spdlog::info("no -m given: using the built-in demo model {} (random weights: its text is gibberish)",
               *demo);
  return *demo;
}

}  // namespace cairn::modelgen
