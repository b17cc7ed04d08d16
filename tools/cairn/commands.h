// tools/cairn/commands.h — the subcommands of the cairn binary.
// Each register_* adds one CLI11 subcommand whose callback stores its exit
// status in the shared CommandResult. Commands print results to stdout and
// logs (spdlog) to stderr; a failure is one line on stderr and a non-zero exit,
// printed by main. Commands never call exit() themselves.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "core/status.h"

namespace cairn::cli {

struct CommandResult {
  Status status;  // a failure: main prints its message as the one error line
  int exit_code = 0;
};

void register_run(CLI::App& app, CommandResult& result);
void register_gguf(CLI::App& app, CommandResult& result);
void register_make_model(CLI::App& app, CommandResult& result);
void register_make_lora(CLI::App& app, CommandResult& result);
void register_serve(CLI::App& app, CommandResult& result);
void register_bench(CLI::App& app, CommandResult& result);
void register_bench_model(CLI::App& app, CommandResult& result);
void register_controller(CLI::App& app, CommandResult& result);
void register_worker(CLI::App& app, CommandResult& result);
void register_client(CLI::App& app, CommandResult& result);
void register_run_onnx(CLI::App& app, CommandResult& result);
void register_bench_onnx(CLI::App& app, CommandResult& result);
void register_agent(CLI::App& app, CommandResult& result);

}  // namespace cairn::cli
