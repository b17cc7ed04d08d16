// tools/cairn/server_flags.h — the HTTP server flags `cairn serve` and
// `cairn controller` share (address, API key, CORS, body and header limits,
// queue, timeouts, drain, I/O threads), declared once so both commands accept
// and check them the same way. Only declares flags; never starts anything.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "api/http_server.h"
#include "serving/local_backend.h"

namespace cairn::cli {

// Adds the shared flags to `cmd`, writing into `server` and `max_queue`.
// `port_flag` names the HTTP port flag ("--port" for serve, "--http-port" for
// the controller).
void add_http_server_flags(CLI::App* cmd, api::ServerOptions& server, int32_t& max_queue,
                           const std::string& port_flag);

// Adds the flags of a model served in this process (`cairn serve`, `cairn
// worker`): --model-name, --threads, --ctx, --kv-cache-mb, --kv-type, --max-batch-tokens,
// --max-seqs, --spec-lookup, --draft-model, --draft-max, --draft-p-min. `kv_cache_mb` is turned
// into backend.kv_pool_bytes by the caller.
void add_engine_flags(CLI::App* cmd, serving::LocalBackendOptions& backend, int64_t& kv_cache_mb);
// --spec-lookup, --draft-model, --draft-max, --draft-p-min (also `cairn run`'s).
void add_speculative_flags(CLI::App* cmd, int32_t& lookup_max, std::string& draft_model,
                           int32_t& draft_max, float& p_min);
// --kv-type f16|q8_0 into `type` (also `cairn run`'s).
void add_kv_type_flag(CLI::App* cmd, TensorType& type);
// --lora (merged at load) and, with `runtime`, --lora-modules (served by name).
void add_lora_flags(CLI::App* cmd, model::AdapterOptions& adapters, bool runtime);

// Adds `--grpc-port`: -1 (the default) leaves the gRPC server off; 0 picks any free port.
void add_grpc_port_flag(CLI::App* cmd, int& grpc_port, const std::string& help);

}  // namespace cairn::cli
