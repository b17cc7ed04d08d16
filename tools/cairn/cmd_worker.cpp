// `cairn worker`: being built (issue 5); until then it says so and exits non-zero.
#include "commands.h"

namespace cairn::cli {

void register_worker(CLI::App& app, CommandResult& result) {
  auto* cmd = app.add_subcommand("worker", "serve a model to a controller over gRPC (not built yet)");
  cmd->allow_extras();
  cmd->callback([&result] { result.status = Status::error("cairn worker is not built yet"); });
}

}  // namespace cairn::cli
