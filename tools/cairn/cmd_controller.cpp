// `cairn controller`: being built (issue 5); until then it says so and exits non-zero.
#include "commands.h"

namespace cairn::cli {

void register_controller(CLI::App& app, CommandResult& result) {
  auto* cmd = app.add_subcommand("controller", "route requests to registered workers (gRPC + OpenAI HTTP) (not built yet)");
  cmd->allow_extras();
  cmd->callback([&result] { result.status = Status::error("cairn controller is not built yet"); });
}

}  // namespace cairn::cli
