// `cairn agent`: one shard of a distributed model. Loads its ONNX file (or,
// given the LLM's GGUF file, the slice the worker assigns to its rank),
// joins the distributed worker (`cairn serve --servable-dir ...
// --distributed-address`) and runs the forwards it is sent until the
// worker goes away.
#include "commands.h"
#include "distributed/agent.h"

namespace cairn::cli {

void register_agent(CLI::App& app, CommandResult& result) {
  auto* cmd = app.add_subcommand("agent", "serve one shard of a distributed model for a distributed worker");
  auto a = std::make_shared<distributed::AgentOptions>();
  cmd->add_option("--distributed-address", a->distributed_address,
                  "HOST:PORT of the worker's --distributed-address")
      ->required();
  cmd->add_option("--rank", a->rank, "this shard's rank (0 .. rank_size-1)")->required()->check(CLI::Range(0, 4095));
  cmd->add_option("-m,--model", a->model_file,
                  "this rank's ONNX model file, or the distributed LLM's GGUF file (every rank maps the same one)")
      ->required();
  cmd->add_option("-t,--threads", a->threads, "compute threads (default: one per physical core)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--host", a->host, "address this agent's collective transport listens on (reachable by the other agents)")
      ->capture_default_str();
  cmd->add_option("--join-timeout", a->join_timeout_s, "seconds to keep trying to reach the worker")
      ->check(CLI::Range(0.1, 1e6))
      ->capture_default_str();
  cmd->callback([a, &result] { result.status = distributed::run_agent(*a); });
}

}  // namespace cairn::cli
