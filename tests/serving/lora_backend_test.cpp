// LoRA adapters through the whole serving stack: adapters listed beside the
// base model, picked by a request's model field, running in the same batches
// as base-model requests with the outputs each gets alone, their prompts'
// cached prefixes kept apart, and the refusals of bad adapter options.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "modelgen/demo_model.h"
#include "modelgen/lora_builder.h"
#include "serving/local_backend.h"
#include "serving_test_util.h"
#include "test_util.h"

namespace cairn::serving {
namespace {

using cairn::test::RecordingSink;

struct Files {
  std::string base, adapter_a, adapter_b;
};

const Files& files() {
  static Files f = [] {
    Files out;
    auto dir = test::temp_dir("lora-serving");
    auto path = modelgen::ensure_demo_model(dir);
    EXPECT_TRUE(path.is_ok()) << path.status().message();
    out.base = path.is_ok() ? *path : "";
    auto base = gguf::File::open(out.base);
    EXPECT_TRUE(base.is_ok());
    const auto write = [&](const std::string& name, modelgen::RandomLoraSpec spec) {
      auto bytes = modelgen::random_lora(**base, spec);
      EXPECT_TRUE(bytes.is_ok()) << bytes.status().message();
      const std::string p = (dir / name).string();
      std::FILE* fp = std::fopen(p.c_str(), "wb");
      std::fwrite(bytes->data(), 1, bytes->size(), fp);
      std::fclose(fp);
      return p;
    };
    modelgen::RandomLoraSpec a;
    a.targets = {"attn_q", "attn_v", "ffn_down", "output"};
    a.b_scale = 2.0f;
    a.seed = 1;
    out.adapter_a = write("a.gguf", a);
    modelgen::RandomLoraSpec b = a;
    b.targets = {"attn_k", "attn_output", "ffn_up"};
    b.seed = 2;
    out.adapter_b = write("b.gguf", b);
    return out;
  }();
  return f;
}

std::unique_ptr<LocalBackend> make(model::AdapterOptions ad, std::string name = "base") {
  LocalBackendOptions o;
  o.model_path = files().base;
  o.model_name = std::move(name);
  o.n_ctx = 128;
  o.threads = 2;
  o.adapters = std::move(ad);
  auto b = LocalBackend::create(o);
  EXPECT_TRUE(b.is_ok()) << b.status().message();
  return b.is_ok() ? std::move(*b) : nullptr;
}

GenerateRequest greedy(const std::string& model, const std::string& prompt) {
  GenerateRequest r;
  r.model = model;
  r.prompt = prompt;
  r.max_tokens = 12;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  return r;
}

std::shared_ptr<RecordingSink> submit(Backend& b, GenerateRequest r) {
  auto sink = std::make_shared<RecordingSink>();
  auto id = b.submit(std::move(r), sink);
  EXPECT_TRUE(id.is_ok()) << id.status().message();
  return sink;
}

const std::string kPrompt =
    "The quick brown fox jumps over the lazy dog while the cat sleeps in the warm sun";

TEST(LoraBackend, AdaptersAreModelsThatBatchWithTheBase) {
  auto b = make({{}, {{files().adapter_a, 1.0f, "alpha"}, {files().adapter_b, 1.0f, "beta"}}});
  ASSERT_TRUE(b);
  const auto models = b->models();
  ASSERT_EQ(models.size(), 3u);
  EXPECT_EQ(models[0].id, "base");
  EXPECT_TRUE(models[0].parent.empty());
  EXPECT_EQ(models[1].id, "alpha");
  EXPECT_EQ(models[1].parent, "base");
  EXPECT_EQ(models[1].root, files().adapter_a);
  EXPECT_EQ(models[2].id, "beta");

  // Each alone on a fresh server (nothing cached): three continuations.
  std::vector<std::vector<Token>> alone;
  for (const char* m : {"base", "alpha", "beta"}) {
    auto fresh = make({{}, {{files().adapter_a, 1.0f, "alpha"}, {files().adapter_b, 1.0f, "beta"}}});
    ASSERT_TRUE(fresh);
    auto s = submit(*fresh, greedy(m, kPrompt));
    ASSERT_TRUE(s->wait());
    alone.push_back(s->ids());
  }
  // The base model's blocks of the prompt cached first: the adapters' must
  // not reuse them (the same tokens, other K/V).
  {
    auto s = submit(*b, greedy("base", kPrompt));
    ASSERT_TRUE(s->wait());
    EXPECT_EQ(s->ids(), alone[0]);
  }
  EXPECT_NE(alone[0], alone[1]);
  EXPECT_NE(alone[0], alone[2]);
  EXPECT_NE(alone[1], alone[2]);
  // All at once, twice each: they share steps, and each finds only its own
  // model's cached prefix.
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int rep = 0; rep < 2; ++rep)
    for (const char* m : {"beta", "base", "alpha"}) sinks.push_back(submit(*b, greedy(m, kPrompt)));
  const int want[] = {2, 0, 1, 2, 0, 1};
  for (size_t i = 0; i < sinks.size(); ++i) {
    ASSERT_TRUE(sinks[i]->wait());
    EXPECT_EQ(sinks[i]->ids(), alone[(size_t)want[i]]) << "request " << i;
  }
  // An unknown model is refused by name.
  auto sink = std::make_shared<RecordingSink>();
  auto id = b->submit(greedy("gamma", kPrompt), sink);
  ASSERT_FALSE(id.is_ok());
  EXPECT_NE(id.status().message().find("gamma"), std::string::npos);
}

TEST(LoraBackend, MergedAtLoadEqualsTheAdapterAtRunTimeInText) {
  auto runtime = make({{}, {{files().adapter_a, 1.0f, "alpha"}}});
  auto merged = make({{{files().adapter_a, 1.0f, ""}}, {}});
  ASSERT_TRUE(runtime && merged);
  auto a = submit(*runtime, greedy("alpha", kPrompt));
  auto m = submit(*merged, greedy("base", kPrompt));
  ASSERT_TRUE(a->wait() && m->wait());
  // The demo model is F32: merging rounds nothing the greedy path can see.
  EXPECT_EQ(a->ids(), m->ids());
}

TEST(LoraBackend, BadAdapterOptionsAreRefused) {
  LocalBackendOptions o;
  o.model_path = files().base;
  o.model_name = "base";
  o.n_ctx = 64;
  o.threads = 1;
  o.adapters.runtime = {{files().adapter_a, 1.0f, "base"}};  // the model's own name
  auto same = LocalBackend::create(o);
  ASSERT_FALSE(same.is_ok());
  EXPECT_NE(same.status().message().find("own name"), std::string::npos);
  o.adapters.runtime = {{files().base, 1.0f, "x"}};  // a model, not an adapter
  auto notadapter = LocalBackend::create(o);
  ASSERT_FALSE(notadapter.is_ok());
  EXPECT_NE(notadapter.status().message().find("general.type"), std::string::npos);
  o.adapters.runtime.clear();
  o.adapters.merged = {{"/nonexistent/adapter.gguf", 1.0f, ""}};
  EXPECT_FALSE(LocalBackend::create(o).is_ok());
}

}  // namespace
}  // namespace cairn::serving
