// model/load.h's up-front check: a file with tensors cairn cannot compute is
// refused at once, with every such tensor's type named, before anything is built.
#include <gtest/gtest.h>

#include "model/load.h"
#include "synth_model.h"

namespace cairn::model {
namespace {

using test::SynthSpec;
using test::synth_file;

TEST(CheckComputable, ListsEveryTypeCairnCannotCompute) {
  SynthSpec ok;
  auto good = synth_file(ok);
  ASSERT_TRUE(good) << good.status().message();
  EXPECT_TRUE(check_computable(**good).is_ok());
  for (const gguf::TensorInfo& t : (*good)->tensors()) EXPECT_TRUE(tensor_computable(t)) << t.name;

  SynthSpec bad;
  bad.type_override["blk.0.attn_q.weight"] = TensorType::Q2_0;
  bad.type_override["blk.1.attn_q.weight"] = TensorType::Q2_0;
  bad.type_override["blk.1.ffn_up.weight"] = TensorType::NVFP4;
  bad.type_override["blk.0.ffn_gate.weight"] = TensorType::I32;
  auto file = synth_file(bad);
  ASSERT_TRUE(file) << file.status().message();
  const Status st = check_computable(**file);
  ASSERT_FALSE(st.is_ok());
  const std::string& m = st.message();
  EXPECT_NE(m.find("4 tensors in types cairn cannot compute"), std::string::npos) << m;
  EXPECT_NE(m.find("q2_0 (2: blk.0.attn_q.weight, blk.1.attn_q.weight)"), std::string::npos) << m;
  EXPECT_NE(m.find("nvfp4 (1: blk.1.ffn_up.weight)"), std::string::npos) << m;
  EXPECT_NE(m.find("i32 (1: blk.0.ffn_gate.weight)"), std::string::npos) << m;
  // ... and what it does compute, the new types included.
  for (const char* t : {"q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q5_k", "iq4_nl", "iq4_xs", "mxfp4"})
    EXPECT_NE(m.find(t), std::string::npos) << t << " in " << m;
  EXPECT_FALSE(tensor_computable(*(*file)->find_tensor("blk.1.ffn_up.weight")));
  EXPECT_TRUE(tensor_computable(*(*file)->find_tensor("blk.1.ffn_gate.weight")));
}

}  // namespace
}  // namespace cairn::model
