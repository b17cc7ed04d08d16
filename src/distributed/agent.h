// distributed/agent.h — one shard of a distributed model (`cairn agent`):
// loads its model file (an ONNX graph whose cairn.AllGather / AllReduce /
// Broadcast nodes join the shards of its stage, or its slice of a GGUF
// LLM once the worker has said the layout: llm_shard.h), joins the distributed
// worker, forms the groups the worker asks for (its stage's, for the
// collectives, and all ranks', for passing activations from stage to
// stage), and runs the forwards it is sent until the worker goes away.
#pragma once

#include <string>

#include "core/status.h"

namespace cairn::distributed {

struct AgentOptions {
  std::string distributed_address;  // HOST:PORT of the worker's Agents service
  int rank = 0;
  std::string model_file;
  int threads = 0;                  // kernel threads; 0: one per physical core
  std::string host = "127.0.0.1";   // the address this agent's group transport listens on
  double join_timeout_s = 60;       // how long to keep trying to reach the worker
};

// Runs until the worker ends the session (ok) or something fails (the error).
Status run_agent(const AgentOptions& options);

}  // namespace cairn::distributed
