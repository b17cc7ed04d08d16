// Golden parity of LoRA adapters against llama.cpp's llama-server of
// September 2026 (--lora-scaled, applied at run time). Each
// tests/model/golden-lora/<name>.json holds the reference's answers, the
// make-model and make-lora specs that wrote the base model and the adapter
// it answered for, and both files' sha256: the test writes both again
// (the vocabulary from ../shared/models/stories260K.gguf), fails loudly if
// the bytes changed, then scores cairn's run-time adapter and the adapter
// merged at load (an adapter of mixture-of-experts tensors is merged only:
// its run-time load must be refused). How the files were made:
// scripts/reference-oracle/lora_golden.sh.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "golden_eval.h"
#include "model/load.h"
#include "model/lora.h"
#include "modelgen/lora_builder.h"
#include "modelgen/model_builder.h"
#include "sha256.h"
#include "test_util.h"

namespace cairn::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

modelgen::RandomLoraSpec lora_spec(const json& j) {
  modelgen::RandomLoraSpec s;
  s.rank = j.at("rank").get<int64_t>();
  s.alpha = j.at("alpha").get<float>();
  s.targets = j.at("targets").get<std::vector<std::string>>();
  const auto type = type_from_name(j.at("type").get<std::string>());
  s.type = type ? *type : TensorType::F32;
  s.a_scale = j.at("a_scale").get<float>();
  s.b_scale = j.at("b_scale").get<float>();
  s.seed = j.at("seed").get<uint64_t>();
  return s;
}

TEST(LoraGolden, RunTimeAndMergedMatchTheReference) {
  auto shared = test::shared_dir();
  if (!shared || !fs::exists(*shared / "models" / "stories260K.gguf"))
    GTEST_SKIP() << "skipped: ../shared/models/stories260K.gguf (the vocabulary of the generated "
                    "golden models) is not available";
  const auto files = test::golden_files("golden-lora");
  ASSERT_FALSE(files.empty()) << "no golden files in tests/model/golden-lora";
  auto vfile = gguf::File::open((*shared / "models" / "stories260K.gguf").string());
  ASSERT_TRUE(vfile) << vfile.status().message();
  auto vocab = modelgen::vocab_from_gguf(std::shared_ptr<const gguf::File>(std::move(*vfile)));
  ASSERT_TRUE(vocab) << vocab.status().message();
  const fs::path dir = test::temp_dir("lora-golden");
  std::printf("  %-22s %-8s %5s %9s %9s %9s %s\n", "model", "adapter", "steps", "argmax", "median",
              "max", "greedy");
  for (const fs::path& p : files) {
    const std::string name = p.stem().string();
    SCOPED_TRACE(name);
    std::ifstream in(p);
    const json g = json::parse(in, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(g.is_discarded()) << p << " is not JSON";
    const modelgen::RandomModelSpec spec = test::golden_model_spec(g["make_model"]["spec"]);
    const std::string base_path = (dir / (name + ".gguf")).string();
    auto written = modelgen::write_random_model(spec, *vocab, base_path, 1);
    ASSERT_TRUE(written) << written.status().message();
    ASSERT_EQ(test::sha256_file(base_path), g["sha256"].get<std::string>())
        << name << ": make-model no longer writes the bytes the golden file was made from";
    auto base = gguf::File::open(base_path);
    ASSERT_TRUE(base) << base.status().message();
    auto bytes = modelgen::random_lora(**base, lora_spec(g["make_lora"]["spec"]));
    ASSERT_TRUE(bytes) << bytes.status().message();
    const std::string adapter_path = (dir / (name + "-adapter.gguf")).string();
    {
      std::FILE* f = std::fopen(adapter_path.c_str(), "wb");
      ASSERT_NE(f, nullptr);
      ASSERT_EQ(std::fwrite(bytes->data(), 1, bytes->size(), f), bytes->size());
      std::fclose(f);
    }
    ASSERT_EQ(test::sha256_file(adapter_path), g["adapter_sha256"].get<std::string>())
        << name << ": make-lora no longer writes the bytes the golden file was made from";
    const float scale = g["scale"].get<float>();
    const bool f32 = spec.type == TensorType::F32;

    for (const bool merged : {false, true}) {
      AdapterOptions ad;
      (merged ? ad.merged : ad.runtime).push_back(LoraSpec{adapter_path, scale, "adapter"});
      auto m = load_model(base_path, LoadOptions{2, {}}, {}, ad);
      if (!merged && !g.value("run_time", true)) {  // an adapter of experts: merged only
        ASSERT_FALSE(m) << name << ": expected the run-time adapter to be refused";
        std::printf("  %-22s %-8s refused: %s\n", name.c_str(), "run-time",
                    m.status().message().c_str());
        continue;
      }
      ASSERT_TRUE(m) << m.status().message();
      const test::GoldenScore sc =
          test::score_golden(*m->model, *m->tokenizer, g, name, merged ? 0 : 1);
      ASSERT_FALSE(sc.devs.empty());
      std::printf("  %-22s %-8s %5d %4d/%-4d %9.1e %9.1e %d/%d\n", name.c_str(),
                  merged ? "merged" : "run-time", sc.steps, sc.agree, sc.steps, sc.median(),
                  sc.max(), sc.greedy_ok, sc.cases);
      if (f32 && !merged) {
        // The reference's own arithmetic on float weights: its text, and
        // every log-probability within the F32 golden tolerance.
        EXPECT_EQ(sc.greedy_ok, sc.cases) << name << ": greedy tokens differ from the reference";
        EXPECT_EQ(sc.agree, sc.steps);
        EXPECT_LE(sc.max(), 1e-3) << sc.worst;
      } else {
        // Quantized weights, or the sums rounded into the base's type when
        // merged: the quantized criteria.
        EXPECT_GE(sc.agree, 0.95 * sc.steps) << name << (merged ? " merged" : " run-time");
        EXPECT_LE(sc.max(), 0.05) << sc.worst;
      }
    }
  }
}

}  // namespace
}  // namespace cairn::model
