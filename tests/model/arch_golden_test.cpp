// Golden parity of the architectures the shared golden files lack, against
// llama.cpp's llama-server of September 2026. Each tests/model/golden/<model>.json holds the
// reference's answers, the make-model spec that wrote the model it answered
// for, and that file's sha256: the test writes the model again through the
// modelgen API (the vocabulary from ../shared/models/stories260K.gguf),
// fails loudly if the bytes changed, then compares greedy decoding and
// teacher-forced top-5 log-probabilities. How the files were made:
// scripts/reference-oracle/arch_golden.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kv/contiguous_kv.h"
#include "model/model.h"
#include "modelgen/model_builder.h"
#include "sha256.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "logprobs.h"

namespace cairn::model {
namespace {

using cairn::test::log_softmax;
using cairn::test::argmax;

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<fs::path> golden_files() {
  std::vector<fs::path> out;
  const fs::path dir = fs::path(CAIRN_TESTS_DIR) / "model" / "golden";
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

modelgen::RandomModelSpec spec_of(const json& j) {
  modelgen::RandomModelSpec s;
  s.arch = j.at("arch").get<std::string>();
  s.dim = j.at("dim").get<int64_t>();
  s.layers = j.at("layers").get<int64_t>();
  s.heads = j.at("heads").get<int64_t>();
  s.kv_heads = j.at("kv_heads").get<int64_t>();
  s.ffn = j.at("ffn").get<int64_t>();
  s.ctx = j.at("ctx").get<int64_t>();
  s.head_dim = j.value("head_dim", int64_t{0});
  s.rope_freqs = j.value("rope_freqs", std::string());
  s.experts = j.value("experts", int64_t{0});  // the MoE sizes (0: make-model's defaults)
  s.experts_used = j.value("experts_used", int64_t{0});
  s.expert_ffn = j.value("expert_ffn", int64_t{0});
  s.shared_ffn = j.value("shared_ffn", int64_t{0});
  s.sliding_window = j.value("sliding_window", int64_t{0});  // gemma (0: make-model's defaults)
  s.attn_softcap = j.value("attn_softcap", 0.0f);
  s.final_softcap = j.value("final_softcap", 0.0f);
  s.rope_scaling = j.value("rope_scaling", std::string());  // RoPE scaling keys (none unless set)
  s.rope_scaling_factor = j.value("rope_scaling_factor", 0.0f);
  s.rope_orig_ctx = j.value("rope_orig_ctx", int64_t{0});
  s.seed = j.at("seed").get<uint64_t>();
  s.name = j.value("name", std::string());
  s.type = TensorType::F32;
  return s;
}

std::vector<Token> ids(const json& a) { return a.get<std::vector<Token>>(); }

TEST(ArchGolden, ReferenceParityOfGeneratedModels) {
  auto shared = test::shared_dir();
  if (!shared || !fs::exists(*shared / "models" / "stories260K.gguf"))
    GTEST_SKIP() << "skipped: ../shared/models/stories260K.gguf (the vocabulary of the generated "
                    "golden models) is not available";
  const auto files = golden_files();
  ASSERT_FALSE(files.empty()) << "no golden files in tests/model/golden";
  auto vfile = gguf::File::open((*shared / "models" / "stories260K.gguf").string());
  ASSERT_TRUE(vfile) << vfile.status().message();
  auto vocab = modelgen::vocab_from_gguf(std::shared_ptr<const gguf::File>(std::move(*vfile)));
  ASSERT_TRUE(vocab) << vocab.status().message();
  const fs::path dir = test::temp_dir("arch-golden");
  constexpr double kTol = 1e-3;  // F32: every top-5 logprob (the criterion)
  std::printf("  %-22s %5s %8s %9s %9s %s\n", "model", "steps", "argmax", "median", "max",
              "greedy");
  for (const fs::path& p : files) {
    SCOPED_TRACE(p.filename().string());
    std::ifstream in(p);
    const json g = json::parse(in, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(g.is_discarded()) << p << " is not JSON";
    ASSERT_TRUE(g.contains("make_model") && g.contains("sha256") && g.contains("cases")) << p;
    const modelgen::RandomModelSpec spec = spec_of(g["make_model"]["spec"]);
    const std::string name = p.stem().string();
    const fs::path model_path = dir / (name + ".gguf");
    auto written = modelgen::write_random_model(spec, *vocab, model_path.string(), 1);
    ASSERT_TRUE(written) << written.status().message();
    ASSERT_EQ(test::sha256_file(model_path.string()), g["sha256"].get<std::string>())
        << name << ": make-model no longer writes the bytes the golden file was made from ("
        << g["make_model"]["command"].get<std::string>()
        << "); if that change is intended, make the golden file again";

    auto f = gguf::File::open(model_path.string());
    ASSERT_TRUE(f) << f.status().message();
    auto file = std::shared_ptr<const gguf::File>(std::move(*f));
    auto m = Model::load(file, LoadOptions{2, {}});
    ASSERT_TRUE(m) << m.status().message();
    Model& model = **m;
    auto tok = Tokenizer::from_gguf(*file);
    ASSERT_TRUE(tok) << tok.status().message();

    int greedy_ok = 0, n_cases = 0, steps = 0, agree = 0;
    std::vector<double> devs;
    std::string worst;
    for (const json& c : g["cases"]) {
      ++n_cases;
      const std::vector<Token> prompt = ids(c["prompt_tokens"]);
      const std::vector<Token> want = ids(c["tokens"]);
      EXPECT_EQ((*tok)->encode(c["prompt"].get<std::string>(), true), prompt);
      // Greedy, one token per forward after the prompt (the decode path).
      {
        auto kv = kv::ContiguousKvCache::create(model.hparams().kv_shape(), 1,
                                                (int64_t)(prompt.size() + want.size() + 1));
        ASSERT_TRUE(kv) << kv.status().message();
        Batch b;
        for (size_t i = 0; i < prompt.size(); ++i)
          b.add(prompt[i], (int32_t)i, 0, i + 1 == prompt.size());
        Logits lg;
        std::vector<Token> got;
        int32_t pos = (int32_t)prompt.size();
        while (got.size() < want.size()) {
          Status s = model.forward(b, **kv, lg);
          ASSERT_TRUE(s.is_ok()) << s.message();
          got.push_back(argmax(lg.row(0)));
          b.clear();
          b.add(got.back(), pos++, 0, true);
        }
        std::string text;
        for (Token t : got) text += (*tok)->token_to_piece(t);
        EXPECT_EQ(got, want) << name << ": prompt " << c["prompt"];
        EXPECT_EQ(text, c["text"].get<std::string>()) << name << ": prompt " << c["prompt"];
        greedy_ok += got == want;
      }
      // Teacher forcing: the prompt in one batch, then each reference token alone.
      std::vector<Token> seq = prompt;
      seq.insert(seq.end(), want.begin(), want.end() - 1);
      auto kv = kv::ContiguousKvCache::create(model.hparams().kv_shape(), 1, (int64_t)seq.size());
      ASSERT_TRUE(kv) << kv.status().message();
      const json& ref_steps = c["steps"];
      ASSERT_EQ(ref_steps.size(), want.size());
      size_t step = 0;
      for (size_t start = 0; start < seq.size(); ++step) {
        const size_t end = start == 0 ? prompt.size() : start + 1;
        Batch b;
        for (size_t i = start; i < end; ++i) b.add(seq[i], (int32_t)i, 0, i + 1 == end);
        Logits one;
        Status s = model.forward(b, **kv, one);
        ASSERT_TRUE(s.is_ok()) << s.message();
        ASSERT_EQ(one.rows(), 1u);
        ++steps;
        agree += argmax(one.row(0)) == want[step];
        const std::vector<double> lp = log_softmax(one.row(0));
        for (const json& top : ref_steps[step]["top"]) {
          const Token id = top[0].get<Token>();
          ASSERT_TRUE(id >= 0 && (size_t)id < lp.size());
          const double dev = std::fabs(lp[(size_t)id] - top[2].get<double>());
          if (devs.empty() || dev > *std::max_element(devs.begin(), devs.end()))
            worst = "prompt " + c["prompt"].dump() + " step " + std::to_string(step) + " token " +
                    std::to_string(id) + ": ours " + std::to_string(lp[(size_t)id]) + ", ref " +
                    std::to_string(top[2].get<double>());
          devs.push_back(dev);
        }
        start = end;
      }
    }
    ASSERT_FALSE(devs.empty());
    std::vector<double> sorted = devs;
    std::sort(sorted.begin(), sorted.end());
    std::printf("  %-22s %5d %4d/%-4d %9.1e %9.1e %d/%d\n", name.c_str(), steps, agree, steps,
                sorted[sorted.size() / 2], sorted.back(), greedy_ok, n_cases);
    EXPECT_EQ(agree, steps) << name << ": teacher-forced argmax differs from the reference";
    EXPECT_LE(sorted.back(), kTol) << name << " worst: " << worst;
  }
}

}  // namespace
}  // namespace cairn::model
