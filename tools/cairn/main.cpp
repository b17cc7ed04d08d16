// cairn — the command-line entry point: parses the subcommand, sets up logging
// on stderr, and turns any failure into exactly one line on stderr plus a
// non-zero exit status.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>
#include <exception>
#include <string>

#include "commands.h"

namespace {

// Keeps the error one line even when a message carries a newline.
void print_error(std::string msg) {
  for (char& c : msg)
    if (c == '\n' || c == '\r') c = ' ';
  std::fprintf(stderr, "cairn: error: %s\n", msg.c_str());
}

void setup_logging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("cairn");
  logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace

int main(int argc, char** argv) {
  // A closed pipe (`cairn run ... | head`) ends generation through a failed
  // write instead of killing the process mid-line.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    CLI::App app{"cairn: load GGUF models and generate text", "cairn"};
    app.require_subcommand(1);
    app.fallthrough();  // global options (--log-level) also work after the subcommand
    std::string log_level = "info";
    app.add_option("--log-level", log_level,
                   "stderr log level: trace, debug, info, warn, error, off")
        ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
    cairn::cli::CommandResult result;
    cairn::cli::register_run(app, result);
    cairn::cli::register_gguf(app, result);
    cairn::cli::register_make_model(app, result);
    cairn::cli::register_make_lora(app, result);
    cairn::cli::register_serve(app, result);
    cairn::cli::register_bench(app, result);
    cairn::cli::register_bench_model(app, result);
    cairn::cli::register_controller(app, result);
    cairn::cli::register_worker(app, result);
    cairn::cli::register_client(app, result);
    cairn::cli::register_run_onnx(app, result);
    cairn::cli::register_bench_onnx(app, result);
    cairn::cli::register_agent(app, result);
    // Logging must be up before a subcommand's callback runs.
    app.parse_complete_callback([&] { setup_logging(log_level); });
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::Success& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      print_error(std::string(e.what()) + " (see cairn --help)");
      return 2;  // usage error, whatever CLI11's internal code
    }
    if (!result.status.is_ok()) {
      print_error(result.status.message());
      return result.exit_code != 0 ? result.exit_code : 1;
    }
    return result.exit_code;
  } catch (const std::exception& e) {
    print_error(e.what());
    return 1;
  }
}
