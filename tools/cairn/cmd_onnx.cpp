// `cairn run-onnx` and `cairn bench-onnx`: ONNX tensor models from the command line.
// run-onnx loads a model with onnx::Session, feeds --input NAME=@file.npy for
// every model input, runs one forward, prints each output (name, dtype, shape,
// first values) and writes DIR/<output>.npy. bench-onnx times forwards on
// random inputs for each --batch size and, in the same run, ONNX Runtime on
// the same model through scripts/onnx/ort_bench.mjs (node + onnxruntime-node),
// alternating the two per batch so both see the same host state; without node
// or onnxruntime-node the peer columns are left out with a message.
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "commands.h"
#include "core/npy.h"
#include "core/thread_pool.h"
#include "core/value.h"
#include "onnx/session.h"

namespace cairn::cli {

namespace {

namespace fs = std::filesystem;

constexpr int kMaxBatch = 65536;

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The first few values of a tensor, "[1, 2.5, 3, ...]".
std::string first_values(const values::Tensor& t, int64_t max_values = 8) {
  const int64_t n = t.element_count();
  std::string out = "[";
  char buf[64];
  for (int64_t i = 0; i < std::min(n, max_values); ++i) {
    if (i) out += ", ";
    switch (t.dtype) {
      case values::DType::Float32: std::snprintf(buf, sizeof buf, "%.6g", double(t.as<float>()[i])); break;
      case values::DType::Float64: std::snprintf(buf, sizeof buf, "%.9g", t.as<double>()[i]); break;
      case values::DType::Int64: std::snprintf(buf, sizeof buf, "%lld", (long long)t.as<int64_t>()[i]); break;
      case values::DType::Int32: std::snprintf(buf, sizeof buf, "%d", int(t.as<int32_t>()[i])); break;
      case values::DType::Bool: std::snprintf(buf, sizeof buf, "%s", t.as<uint8_t>()[i] ? "true" : "false"); break;
      default: std::snprintf(buf, sizeof buf, "?"); break;
    }
    out += buf;
  }
  if (n > max_values) out += ", ...";
  return out + "]";
}

// An output name as a file name: anything but [A-Za-z0-9_.-] becomes '_', and
// a leading '.' too, so a model cannot name a path outside DIR.
std::string file_name(const std::string& name) {
  std::string out = name.substr(0, 128);
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '_';
  if (out.empty() || out[0] == '.') out.insert(out.begin(), '_');
  return out;
}

std::string input_names(const onnx::Session& s) {
  std::string out;
  for (const auto& in : s.inputs()) out += (out.empty() ? "" : ", ") + in.name;
  return out;
}

onnx::SessionOptions session_options(int threads) {
  onnx::SessionOptions o;
  o.threads = threads;
  return o;
}

// ---- run-onnx

struct RunOnnxArgs {
  std::string model;
  std::vector<std::string> inputs;
  std::string output_dir = ".";
  int threads = 0;
};

Status run_onnx(const RunOnnxArgs& a) {
  auto loaded = onnx::Session::load(a.model, session_options(a.threads));
  if (!loaded.is_ok()) return loaded.status();
  onnx::Session& session = **loaded;
  std::map<std::string, values::Tensor> given;
  for (const auto& spec : a.inputs) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 >= spec.size() || spec[eq + 1] != '@' || eq + 2 >= spec.size())
      return Status::error("--input '" + spec + "': expected NAME=@file.npy");
    const std::string name = spec.substr(0, eq);
    const bool known = std::any_of(session.inputs().begin(), session.inputs().end(),
                                   [&](const onnx::ValueInfo& v) { return v.name == name; });
    if (!known)
      return Status::error("--input '" + name + "': the model has no input '" + name + "' (its inputs: " +
                           input_names(session) + ")");
    if (given.count(name)) return Status::error("--input '" + name + "' is given twice");
    auto t = values::read_npy_file(spec.substr(eq + 2));
    if (!t.is_ok()) return Status::error("--input '" + name + "': " + t.status().message());
    given.emplace(name, std::move(*t));
  }
  std::vector<const values::Tensor*> ptrs;
  for (const auto& in : session.inputs()) {
    auto it = given.find(in.name);
    if (it == given.end())
      return Status::error("input '" + in.name + "' is not given (--input " + in.name + "=@file.npy)");
    ptrs.push_back(&it->second);
  }
  auto result = session.run(ptrs);
  if (!result.is_ok()) return result.status();
  std::error_code ec;
  fs::create_directories(a.output_dir, ec);
  if (ec) return Status::error("--output-dir " + a.output_dir + ": " + ec.message());
  const auto& outs = session.outputs();
  for (size_t i = 0; i < result->size() && i < outs.size(); ++i) {
    const values::Tensor& t = (*result)[i];
    std::printf("%s: %s %s %s\n", outs[i].name.c_str(), values::dtype_name(t.dtype), shape_text(t.shape).c_str(),
                first_values(t).c_str());
    const fs::path path = fs::path(a.output_dir) / (file_name(outs[i].name) + ".npy");
    CAIRN_RETURN_IF_ERROR(values::write_npy_file(path.string(), t));
  }
  std::fflush(stdout);
  return Status::ok();
}

// ---- bench-onnx

struct BenchOnnxArgs {
  std::string model;
  std::string batch = "1,8,32";
  int threads = 0;
  double seconds = 6;
  int rounds = 3;
  std::vector<std::string> dims;
  bool no_peer = false;
};

struct Timing {
  double p50_ms = 0;
  double p90_ms = 0;
  double instances_per_s = 0;
  int runs = 0;
};

Result<std::vector<int>> parse_batches(const std::string& text) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > kMaxBatch)
      return Status::error("--batch: '" + item + "' is not a batch size in 1.." + std::to_string(kMaxBatch));
    out.push_back(int(v));
    pos = comma + 1;
  }
  return out;
}

// Random inputs for one batch size: the first dim is the batch, other dynamic
// dims come from --dim; floats in [-1, 1), integers in [0, 100) except inputs
// named *mask* (all 1, a mask that keeps every token), bools at random.
Result<std::vector<values::Tensor>> make_inputs(const onnx::Session& s, int batch,
                                                const std::map<std::string, int64_t>& dims) {
  std::mt19937 rng(1234);
  std::vector<values::Tensor> out;
  for (const auto& in : s.inputs()) {
    if (!in.has_shape) return Status::error("input '" + in.name + "' declares no shape; cannot make one up");
    std::vector<int64_t> shape = in.dims;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (d == 0) {
        shape[d] = batch;
        continue;
      }
      if (shape[d] >= 0) continue;
      const std::string& name = d < in.dim_names.size() ? in.dim_names[d] : std::string();
      auto it = dims.find(name);
      if (name.empty() || it == dims.end())
        return Status::error("input '" + in.name + "': dim " + std::to_string(d) + " is dynamic" +
                             (name.empty() ? "" : " ('" + name + "')") + ": give --dim " +
                             (name.empty() ? "NAME" : name) + "=N");
      shape[d] = it->second;
    }
    auto count = values::Tensor::count_of(in.dtype, shape);
    if (!count.is_ok()) return Status::error("input '" + in.name + "': " + count.status().message());
    const size_t n = size_t(*count);
    const bool mask = in.name.find("mask") != std::string::npos;
    std::string data(n * values::dtype_size(in.dtype), '\0');
    std::uniform_real_distribution<float> uf(-1.0f, 1.0f);
    std::uniform_int_distribution<int> ui(0, 99);
    switch (in.dtype) {
      case values::DType::Float32:
        for (size_t i = 0; i < n; ++i) reinterpret_cast<float*>(data.data())[i] = uf(rng);
        break;
      case values::DType::Int64:
        for (size_t i = 0; i < n; ++i) reinterpret_cast<int64_t*>(data.data())[i] = mask ? 1 : ui(rng);
        break;
      case values::DType::Int32:
        for (size_t i = 0; i < n; ++i) reinterpret_cast<int32_t*>(data.data())[i] = mask ? 1 : ui(rng);
        break;
      case values::DType::Bool:
        for (size_t i = 0; i < n; ++i) data[i] = char(ui(rng) & 1);
        break;
      default:
        return Status::error("input '" + in.name + "': dtype " + values::dtype_name(in.dtype) +
                             " is not generated by bench-onnx");
    }
    auto t = values::Tensor::make(in.dtype, shape, std::move(data));
    if (!t.is_ok()) return t.status();
    out.push_back(std::move(*t));
  }
  return out;
}

Timing summarize(std::vector<double> lat_ms, double total_s, int batch) {
  Timing t;
  std::sort(lat_ms.begin(), lat_ms.end());
  auto pct = [&](double p) { return lat_ms[std::min(lat_ms.size() - 1, size_t(p * double(lat_ms.size())))]; };
  t.p50_ms = pct(0.5);
  t.p90_ms = pct(0.9);
  t.runs = int(lat_ms.size());
  t.instances_per_s = double(batch) * double(lat_ms.size()) / total_s;
  return t;
}

Result<Timing> time_cairn(onnx::Session& s, const std::vector<values::Tensor>& inputs, int batch, double seconds) {
  using clock = std::chrono::steady_clock;
  std::vector<const values::Tensor*> ptrs;
  for (const auto& t : inputs) ptrs.push_back(&t);
  // Warm-up: at least 2 runs and 10% of the measured time (at most 1 s):
  // the plan, its arena and the packed weights are made on the first run.
  const auto warm_end = clock::now() + std::chrono::duration<double>(std::min(seconds * 0.1, 1.0));
  for (int i = 0; i < 2 || clock::now() < warm_end; ++i) {
    auto r = s.run(ptrs);
    if (!r.is_ok()) return Status::error("batch " + std::to_string(batch) + ": " + r.status().message());
  }
  std::vector<double> lat;
  const auto start = clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  while (clock::now() < end || lat.size() < 3) {
    const auto t0 = clock::now();
    auto r = s.run(ptrs);
    if (!r.is_ok()) return Status::error("batch " + std::to_string(batch) + ": " + r.status().message());
    lat.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
  }
  return summarize(std::move(lat), std::chrono::duration<double>(clock::now() - start).count(), batch);
}

// scripts/onnx/ort_bench.mjs: $CAIRN_ORT_BENCH, else in the source tree this
// binary was built from, else beside the binary's folder (an installed tree).
std::string find_peer_script() {
  if (const char* env = std::getenv("CAIRN_ORT_BENCH"); env && *env) return env;
  const fs::path rel = fs::path("scripts") / "onnx" / "ort_bench.mjs";
#ifdef CAIRN_SOURCE_DIR
  if (fs::exists(fs::path(CAIRN_SOURCE_DIR) / rel)) return (fs::path(CAIRN_SOURCE_DIR) / rel).string();
#endif
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = self.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path())
      if (fs::exists(dir / rel)) return (dir / rel).string();
  }
  return "";
}

struct PeerRun {
  int exit_code = -1;
  std::string out;
};

// Runs `node script args...` with stdout through a pipe; its stderr is ours.
PeerRun run_node(const std::vector<std::string>& args) {
  PeerRun r;
  int fds[2];
  if (pipe(fds) != 0) return r;
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return r;
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>("node"));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp("node", argv.data());
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) r.out.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

Result<Timing> time_peer(const std::string& script, const BenchOnnxArgs& a, int batch, int threads,
                         double seconds) {
  std::vector<std::string> args = {script,      a.model,  "--batch", std::to_string(batch), "--threads",
                                   std::to_string(threads), "--seconds", std::to_string(seconds)};
  for (const auto& d : a.dims) {
    args.push_back("--dim");
    args.push_back(d);
  }
  const PeerRun r = run_node(args);
  if (r.exit_code == 127) return Status::error("node is not installed");
  if (r.exit_code == 3) return Status::error("onnxruntime-node is not installed (scripts/install-node-deps.sh)");
  if (r.exit_code != 0) return Status::error("ort_bench.mjs exited with status " + std::to_string(r.exit_code));
  try {
    const auto j = nlohmann::json::parse(r.out);
    Timing t;
    t.p50_ms = j.at("latency_ms_p50").get<double>();
    t.p90_ms = j.at("latency_ms_p90").get<double>();
    t.instances_per_s = j.at("instances_per_s").get<double>();
    t.runs = j.value("runs", 0);
    return t;
  } catch (const std::exception& e) {
    return Status::error(std::string("ort_bench.mjs printed no result line: ") + e.what());
  }
}

Status bench_onnx(const BenchOnnxArgs& a, int threads) {
  if (!(a.seconds > 0) || a.seconds > 3600) return Status::error("--seconds must be in (0, 3600]");
  if (a.rounds < 1 || a.rounds > 100) return Status::error("--rounds must be in 1..100");
  auto batches = parse_batches(a.batch);
  if (!batches.is_ok()) return batches.status();
  std::map<std::string, int64_t> dims;
  for (const auto& d : a.dims) {
    const auto eq = d.find('=');
    char* end = nullptr;
    const long long v = eq == std::string::npos ? -1 : std::strtoll(d.c_str() + eq + 1, &end, 10);
    if (eq == std::string::npos || eq == 0 || eq + 1 >= d.size() || *end != '\0' || v < 1 || v > (1 << 20))
      return Status::error("--dim '" + d + "': expected NAME=N with N in 1..1048576");
    dims[d.substr(0, eq)] = v;
  }
  auto loaded = onnx::Session::load(a.model, session_options(threads));
  if (!loaded.is_ok()) return loaded.status();
  onnx::Session& session = **loaded;

  std::string script, no_peer_why;
  if (a.no_peer) {
    no_peer_why = "--no-peer";
  } else {
    script = find_peer_script();
    if (script.empty()) no_peer_why = "scripts/onnx/ort_bench.mjs not found (set CAIRN_ORT_BENCH)";
  }
  std::printf("model: %s  threads: %d  seconds per batch size and runtime: %g in %d alternating rounds (median shown)\n",
              a.model.c_str(), threads, a.seconds, a.rounds);
  std::printf("%6s %14s %14s %12s %14s %10s\n", "batch", "cairn p50 ms", "cairn inst/s", "ORT p50 ms",
              "ORT inst/s", "cairn/ORT");
  std::fflush(stdout);
  // Rounds alternate cairn and ORT on the same batch size and each column
  // shows the round with the median throughput: a shared host's neighbours
  // come and go within seconds, and alternating gives both runtimes the same
  // share of the quiet and the busy spells.
  auto median_of = [](std::vector<Timing> v) {
    std::sort(v.begin(), v.end(), [](const Timing& x, const Timing& y) { return x.instances_per_s < y.instances_per_s; });
    return v[v.size() / 2];
  };
  const double round_seconds = a.seconds / a.rounds;
  for (int batch : *batches) {
    auto inputs = make_inputs(session, batch, dims);
    if (!inputs.is_ok()) return inputs.status();
    std::vector<Timing> mine, theirs;
    for (int r = 0; r < a.rounds; ++r) {
      auto t = time_cairn(session, *inputs, batch, round_seconds);
      if (!t.is_ok()) return t.status();
      mine.push_back(*t);
      if (!no_peer_why.empty()) continue;
      auto peer = time_peer(script, a, batch, threads, round_seconds);
      if (!peer.is_ok()) {
        // Missing tools skip the peer for the rest of the run, with one message.
        no_peer_why = peer.status().message();
        spdlog::warn("ONNX Runtime peer skipped: {}", no_peer_why);
        theirs.clear();
        continue;
      }
      theirs.push_back(*peer);
    }
    const Timing m = median_of(mine);
    if (!theirs.empty()) {
      const Timing p = median_of(theirs);
      std::printf("%6d %14.3f %14.1f %12.3f %14.1f %10.2f\n", batch, m.p50_ms, m.instances_per_s, p.p50_ms,
                  p.instances_per_s, m.instances_per_s / p.instances_per_s);
    } else {
      std::printf("%6d %14.3f %14.1f %12s %14s %10s\n", batch, m.p50_ms, m.instances_per_s, "-", "-", "-");
    }
    std::fflush(stdout);
  }
  if (!no_peer_why.empty()) std::printf("ONNX Runtime columns left out: %s\n", no_peer_why.c_str());
  return Status::ok();
}

}  // namespace

void register_run_onnx(CLI::App& app, CommandResult& result) {
  auto* cmd = app.add_subcommand("run-onnx", "run an ONNX model once on .npy inputs; print and save its outputs");
  auto a = std::make_shared<RunOnnxArgs>();
  cmd->add_option("-m,--model", a->model, "ONNX model file")->required();
  cmd->add_option("--input", a->inputs, "NAME=@file.npy for each model input (repeat)");
  cmd->add_option("--output-dir", a->output_dir, "write each output as DIR/NAME.npy")->capture_default_str();
  cmd->add_option("-t,--threads", a->threads, "compute threads (default: one per physical core)");
  cmd->callback([&result, a] {
    result.status = a->threads < 0 ? Status::error("--threads must be positive") : run_onnx(*a);
  });
}

void register_bench_onnx(CLI::App& app, CommandResult& result) {
  auto* cmd = app.add_subcommand(
      "bench-onnx", "time an ONNX model per batch size on random inputs, beside ONNX Runtime (onnxruntime-node)");
  auto a = std::make_shared<BenchOnnxArgs>();
  cmd->add_option("-m,--model", a->model, "ONNX model file")->required();
  cmd->add_option("--batch", a->batch, "batch sizes, comma-separated")->capture_default_str();
  cmd->add_option("-t,--threads", a->threads, "compute threads for both runtimes (default: one per physical core)");
  cmd->add_option("--seconds", a->seconds, "measured seconds per batch size and runtime")->capture_default_str();
  cmd->add_option("--rounds", a->rounds, "alternating cairn/ORT rounds the seconds are split into")
      ->capture_default_str();
  cmd->add_option("--dim", a->dims, "NAME=N for a dynamic dim other than the batch (repeat)");
  cmd->add_flag("--no-peer", a->no_peer, "skip ONNX Runtime");
  cmd->callback([&result, a, cmd] {
    int threads = a->threads;
    if (cmd->count("--threads") == 0) threads = ThreadPool::default_size();
    if (threads < 1) {
      result.status = Status::error("--threads must be positive");
      return;
    }
    result.status = bench_onnx(*a, threads);
  });
}

}  // namespace cairn::cli
