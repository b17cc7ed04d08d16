// Embedding parity with llama.cpp's llama-server of September 2026. Each
// tests/model/golden-embd/<model>.json holds texts, the reference's token ids
// for them, its unnormalized pooled vectors per pooling type and, for a
// reranker, its scores of query/document pairs. Generated models are written
// again from their make-model spec (the bytes checked by sha256); shared ones
// are read from ../shared. How the files were made:
// scripts/reference-oracle/embedding_golden.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "golden_eval.h"
#include "gguf/gguf.h"
#include "kv/contiguous_kv.h"
#include "model/model.h"
#include "model/pooling.h"
#include "modelgen/model_builder.h"
#include "sha256.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace cairn::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

Pooling pooling_of(const std::string& s) {
  return s == "mean" ? Pooling::Mean
         : s == "cls" ? Pooling::Cls
         : s == "last" ? Pooling::Last
         : s == "rank" ? Pooling::Rank
                       : Pooling::Unspecified;
}

double cosine(const std::vector<float>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    ab += a[i] * b[i];
    aa += (double)a[i] * a[i];
    bb += b[i] * b[i];
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 0.0;
}

// One sequence's pooled embedding (or, for Rank, its pooled first row).
Status embed(Model& m, const std::vector<Token>& toks, Pooling pooling, std::vector<float>& out) {
  Batch b;
  for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], (int32_t)i, 0, true);
  auto kv = kv::ContiguousKvCache::create(m.kv_shape(), 1, 512, TensorType::F32);
  if (!kv) return kv.status();
  Logits h;
  CAIRN_RETURN_IF_ERROR(m.forward_hidden(b, **kv, h));
  return pool_rows(pooling, h.data.data(), (int64_t)h.rows(), h.n_vocab, out);
}

// The model a golden file was made for: written again, or the shared file.
Result<std::shared_ptr<const gguf::File>> golden_model(const json& g, const fs::path& shared,
                                                       const fs::path& dir) {
  fs::path path;
  if (g.contains("make_model")) {
    auto vfile = gguf::File::open((shared / g["make_model"]["vocab"].get<std::string>()).string());
    if (!vfile) return vfile.status();
    auto vocab = modelgen::vocab_from_gguf(std::shared_ptr<const gguf::File>(std::move(*vfile)));
    if (!vocab) return vocab.status();
    const modelgen::RandomModelSpec spec = test::golden_model_spec(g["make_model"]["spec"]);
    path = dir / g["model"].get<std::string>();
    auto written = modelgen::write_random_model(spec, *vocab, path.string(), 1);
    if (!written) return written.status();
  } else {
    path = shared / g["shared_model"].get<std::string>();
  }
  if (test::sha256_file(path.string()) != g["sha256"].get<std::string>())
    return Status::error(path.string() + " is not the file the golden answers were made for" +
                         (g.contains("make_model")
                              ? " (make-model no longer writes the same bytes for " +
                                    g["make_model"]["command"].get<std::string>() + ")"
                              : std::string()));
  auto f = gguf::File::open(path.string());
  if (!f) return f.status();
  return std::shared_ptr<const gguf::File>(std::move(*f));
}

TEST(EmbeddingGolden, ReferenceParity) {
  auto shared = test::shared_dir();
  if (!shared || !fs::exists(*shared / "tokenizer" / "ggml-vocab-bert-bge.gguf") ||
      !fs::exists(*shared / "models" / "syn-llama-gqa-f32.gguf"))
    GTEST_SKIP() << "skipped: ../shared (the bert-bge vocabulary and the synthetic decoders the "
                    "embedding goldens were made with) is not available";
  const auto files = test::golden_files("golden-embd");
  ASSERT_FALSE(files.empty()) << "no golden files in tests/model/golden-embd";
  const fs::path dir = test::temp_dir("embd-golden");
  constexpr double kMinCosine = 0.9999;
  constexpr double kRankRel = 1e-3;
  for (const fs::path& p : files) {
    SCOPED_TRACE(p.filename().string());
    std::ifstream in(p);
    const json g = json::parse(in, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(g.is_discarded()) << p << " is not JSON";
    auto file = golden_model(g, *shared, dir);
    ASSERT_TRUE(file) << file.status().message();
    auto m = Model::load(*file, LoadOptions{2, {}});
    ASSERT_TRUE(m) << m.status().message();
    Model& model = **m;
    auto tok = Tokenizer::from_gguf(**file);
    ASSERT_TRUE(tok) << tok.status().message();
    const std::string name = p.stem().string();

    const auto& texts = g["texts"];
    const std::vector<std::vector<Token>> ref_tokens =
        g.value("tokens", std::vector<std::vector<Token>>{});
    for (size_t i = 0; i < ref_tokens.size(); ++i)
      EXPECT_EQ((*tok)->encode(texts[i].get<std::string>(), true), ref_tokens[i])
          << name << " text #" << i;

    for (const auto& [pname, vectors] : g["poolings"].items()) {
      const Pooling pooling = pooling_of(pname);
      double worst = 1.0;
      for (size_t i = 0; i < ref_tokens.size(); ++i) {
        std::vector<float> got;
        Status st = embed(model, ref_tokens[i], pooling, got);
        ASSERT_TRUE(st.is_ok()) << st.message();
        const std::vector<double> want = vectors[i].get<std::vector<double>>();
        ASSERT_EQ(got.size(), want.size());
        const double c = cosine(got, want);
        worst = std::min(worst, c);
        EXPECT_GE(c, kMinCosine) << name << " " << pname << " text #" << i;
      }
      std::printf("  %-20s %-5s %zu texts, worst cosine %.7f\n", name.c_str(), pname.c_str(),
                  ref_tokens.size(), worst);
    }

    if (g.contains("rerank")) {
      // The reference's pair: bos (add_bos), query, eos (add_eos; for BERT
      // the [SEP] it adds as add_sep), document, and no closing token.
      const auto& r = g["rerank"];
      const std::vector<Token> q = r["query_tokens"].get<std::vector<Token>>();
      EXPECT_EQ((*tok)->encode(r["query"].get<std::string>(), false), q);
      double worst = 0;
      for (const auto& pair : r["pairs"]) {
        const std::vector<Token> d = pair["doc_tokens"].get<std::vector<Token>>();
        EXPECT_EQ((*tok)->encode(pair["document"].get<std::string>(), false), d);
        std::vector<Token> toks = {(*tok)->bos()};
        toks.insert(toks.end(), q.begin(), q.end());
        toks.push_back((*tok)->eos());
        toks.insert(toks.end(), d.begin(), d.end());
        // The server's pairing (LocalBackend's rerank) builds the same.
        EXPECT_EQ((*tok)->encode_pair(r["query"].get<std::string>(), pair["document"].get<std::string>()),
                  toks);
        ASSERT_EQ((int64_t)toks.size(), pair["n_tokens"].get<int64_t>())
            << "the reference built the pair otherwise";
        std::vector<float> pooled, scores;
        Status st = embed(model, toks, Pooling::Rank, pooled);
        ASSERT_TRUE(st.is_ok()) << st.message();
        st = model.classify(pooled, scores);
        ASSERT_TRUE(st.is_ok()) << st.message();
        const double want = pair["score"].get<double>();
        const double rel = std::fabs(scores[0] - want) / std::max(1e-6, std::fabs(want));
        worst = std::max(worst, rel);
        EXPECT_LE(rel, kRankRel) << name << ": score " << scores[0] << ", reference " << want;
      }
      std::printf("  %-20s rank  %zu pairs, worst relative error %.1e\n", name.c_str(),
                  r["pairs"].size(), worst);
    }
  }
}

}  // namespace
}  // namespace cairn::model
