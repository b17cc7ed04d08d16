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
#include "golden_eval.h"

namespace cairn::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(ArchGolden, ReferenceParityOfGeneratedModels) {
  auto shared = test::shared_dir();
  if (!shared || !fs::exists(*shared / "models" / "stories260K.gguf"))
    GTEST_SKIP() << "skipped: ../shared/models/stories260K.gguf (the vocabulary of the generated "
                    "golden models) is not available";
  const auto files = test::golden_files("golden");
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
    const modelgen::RandomModelSpec spec = test::golden_model_spec(g["make_model"]["spec"]);
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

    const test::GoldenScore sc = test::score_golden(model, **tok, g, name);
    ASSERT_FALSE(sc.devs.empty());
    std::printf("  %-22s %5d %4d/%-4d %9.1e %9.1e %d/%d\n", name.c_str(), sc.steps, sc.agree,
                sc.steps, sc.median(), sc.max(), sc.greedy_ok, sc.cases);
    EXPECT_EQ(sc.greedy_ok, sc.cases) << name << ": greedy tokens differ from the reference";
    EXPECT_EQ(sc.agree, sc.steps) << name << ": teacher-forced argmax differs from the reference";
    EXPECT_LE(sc.max(), kTol) << name << " worst: " << sc.worst;
  }
}

}  // namespace
}  // namespace cairn::model
