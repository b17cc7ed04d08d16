// `cairn client`: being built (issue 5); until then it says so and exits non-zero.
#include "commands.h"

namespace cairn::cli {

void register_client(CLI::App& app, CommandResult& result) {
  auto* cmd = app.add_subcommand("client", "call a Serving endpoint over gRPC (not built yet)");
  cmd->allow_extras();
  cmd->callback([&result] { result.status = Status::error("cairn client is not built yet"); });
}

}  // namespace cairn::cli
