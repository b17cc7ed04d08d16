// distributed/distributed_llm.h — the distributed worker's view of an LLM
// cut over agents: a model::Model whose forward sends the engine's batch and
// the sequences' block tables (from the worker's tables-only PagedKvCache)
// to the agents and returns the last stage's logits. The engine, scheduler,
// sampler and block allocation stay on the worker, as with a local model.
// A sequence started before the agents' group last re-formed has lost its
// K/V: a batch holding one fails (Unavailable) rather than compute on rows
// that are not there.
#pragma once

#include <memory>

#include "distributed/coordinator.h"
#include "model/model.h"

namespace cairn::distributed {

// `hp`: the whole model's, read from the same GGUF file the agents map.
std::unique_ptr<model::Model> make_distributed_llm(std::shared_ptr<Coordinator> coordinator,
                                                   model::HParams hp);

}  // namespace cairn::distributed
