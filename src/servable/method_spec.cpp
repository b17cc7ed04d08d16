// servable/method_spec.cpp — the checks a recorded pipeline must pass before it is served.
#include "servable/method_spec.h"

#include <filesystem>
#include <set>

namespace cairn::servable {
namespace {

std::string where(const ServableConfig& c, const MethodSpec& m, int stage) {
  std::string s = "servable '" + c.name + "' method '" + m.name + "'";
  if (stage >= 0) s += " stage " + std::to_string(stage + 1) + " ('" + m.stages[stage].name + "')";
  return s;
}

// `ref` as read by stage `reader` (or by the outputs when reader == stages).
Status check_ref(const ServableConfig& c, const MethodSpec& m, int reader, const ValueRef& ref,
                 const std::string& what) {
  const int here = reader < static_cast<int>(m.stages.size()) ? reader : -1;
  switch (ref.source) {
    case ValueRef::Source::Input:
      if (ref.index < 0 || ref.index >= static_cast<int>(m.inputs.size()))
        return Status::invalid_argument(where(c, m, here) + ": " + what +
                                        " reads an input the method does not have");
      return Status::ok();
    case ValueRef::Source::Stage: {
      if (ref.index < 0 || ref.index >= reader)
        return Status::invalid_argument(where(c, m, here) + ": " + what +
                                        " reads a stage that does not run before it");
      const auto& src = m.stages[ref.index];
      if (ref.output < 0 || ref.output >= src.outputs_count)
        return Status::invalid_argument(where(c, m, here) + ": " + what + " reads output " +
                                        std::to_string(ref.output + 1) + " of stage " +
                                        std::to_string(ref.index + 1) + " ('" + src.name +
                                        "'), which has outputs_count=" +
                                        std::to_string(src.outputs_count));
      return Status::ok();
    }
    case ValueRef::Source::Constant:
      return Status::ok();
  }
  return Status::internal("unknown value source");
}

}  // namespace

Status validate(const ServableConfig& c) {
  if (c.methods.empty())
    return Status::invalid_argument("servable '" + c.name + "' registers no method");
  std::set<std::string> method_names;
  for (const auto& m : c.methods) {
    if (!method_names.insert(m.name).second)
      return Status::invalid_argument("servable '" + c.name + "' registers method '" + m.name +
                                      "' twice");
    std::set<std::string> inputs(m.inputs.begin(), m.inputs.end());
    if (inputs.size() != m.inputs.size())
      return Status::invalid_argument(where(c, m, -1) + " has two inputs of the same name");
    if (m.output_names.size() != m.outputs.size())
      return Status::invalid_argument(where(c, m, -1) + " declares " +
                                      std::to_string(m.output_names.size()) +
                                      " output names but returns " +
                                      std::to_string(m.outputs.size()) + " values");
    std::set<std::string> outputs(m.output_names.begin(), m.output_names.end());
    if (outputs.size() != m.output_names.size())
      return Status::invalid_argument(where(c, m, -1) + " has two outputs of the same name");
    const int n = static_cast<int>(m.stages.size());
    for (int s = 0; s < n; ++s) {
      const auto& st = m.stages[s];
      if (st.outputs_count < 1)
        return Status::invalid_argument(where(c, m, s) + ": outputs_count must be at least 1");
      if (st.kind == StageSpec::Kind::Python && !st.function)
        return Status::invalid_argument(where(c, m, s) + ": the stage is not callable");
      if (st.kind == StageSpec::Kind::Model &&
          (st.model < 0 || st.model >= static_cast<int>(c.models.size())))
        return Status::invalid_argument(where(c, m, s) + ": the model was not declared");
      if (st.kind == StageSpec::Kind::Python && st.batch_size < StageSpec::kOneInstance)
        return Status::invalid_argument(where(c, m, s) + ": batch_size must be None or >= 0");
      for (size_t a = 0; a < st.args.size(); ++a)
        CAIRN_RETURN_IF_ERROR(check_ref(c, m, s, st.args[a], "argument " + std::to_string(a + 1)));
      for (const auto& [name, ref] : st.kwargs)
        CAIRN_RETURN_IF_ERROR(check_ref(c, m, s, ref, "option '" + name + "'"));
    }
    for (size_t o = 0; o < m.outputs.size(); ++o)
      CAIRN_RETURN_IF_ERROR(check_ref(c, m, n, m.outputs[o], "output '" + m.output_names[o] + "'"));
  }
  return Status::ok();
}

void add_embed_methods(ServableConfig& config) {
  std::vector<int> gguf;
  for (size_t i = 0; i < config.models.size(); ++i)
    if (config.models[i].format == "GGUF") gguf.push_back(static_cast<int>(i));
  for (int model : gguf) {
    MethodSpec m;
    m.name = "embed";
    if (gguf.size() > 1) m.name += "_" + std::filesystem::path(config.models[model].file).stem().string();
    bool taken = false;
    for (const auto& existing : config.methods) taken |= existing.name == m.name;
    if (taken) continue;
    m.inputs = {"text"};
    m.output_names = {"embedding"};
    StageSpec st;
    st.kind = StageSpec::Kind::Model;
    st.name = config.models[model].file;
    st.model = model;
    st.args = {ValueRef{ValueRef::Source::Input, 0, 0, {}}};
    st.kwargs["task"] = ValueRef{ValueRef::Source::Constant, 0, 0, Value(std::string("embed"))};
    st.outputs_count = 1;
    m.stages.push_back(std::move(st));
    m.outputs = {ValueRef{ValueRef::Source::Stage, 0, 0, {}}};
    config.methods.push_back(std::move(m));
  }
}

}  // namespace cairn::servable
