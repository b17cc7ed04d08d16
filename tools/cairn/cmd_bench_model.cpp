// `cairn bench-model`: how fast the model layer runs on this machine, measured
// without the engine or the network in the way. Prefill is one prompt through
// Model::forward in ubatch-sized chunks, logits for its last token only; decode
// is B sequences stepped together, one forward of B tokens per step, greedy so
// every step depends on the last. The K/V lives in the paged cache the server
// uses, with the prefix cache off so no repetition is served from memory.
// Decode is memory-bound, so the table also states the bytes one decoded token
// reads and the rate plain loads read the model's own weights at, whose ratio
// is the efficiency: each batch-1 decode run against a probe taken just
// before it, and batch-1 decode segments against the probe passes run between
// them. The machine's figure (a fresh buffer) is printed beside it.
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "commands.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/bandwidth_probe.h"
#include "kernels/compute_probe.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/tensor_names.h"

namespace cairn::cli {

namespace {

// The biggest batch the flag accepts: far beyond what one CPU step serves, and
// small enough that sizes derived from it never overflow.
constexpr int kMaxBatch = 4096;

struct BenchArgs {
  std::string model;
  int prompt = 512;
  int n_decode = 128;
  std::string batch = "1,4,16";
  int threads = 0;
  int reps = 2;
  int ubatch = 512;
  int decode_ctx = 16;
  int probe_mib = 1024;
  int probe_passes = 10;
  int paired_segment = 16;
  std::string kv_type = "f16";
};

// Wall time and the CPU time all of this process's threads got meanwhile: on
// a shared machine their ratio says how much of the cores a run really had.
struct Span {
  double wall_s = 0;
  double cpu_s = 0;
};

double process_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& t) { return (double)t.tv_sec + (double)t.tv_usec * 1e-6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

class Stopwatch {
 public:
  Stopwatch() : wall0_(std::chrono::steady_clock::now()), cpu0_(process_cpu_seconds()) {}
  Span elapsed() const {
    return {std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0_).count(),
            process_cpu_seconds() - cpu0_};
  }

 private:
  std::chrono::steady_clock::time_point wall0_;
  double cpu0_;
};

struct Timing {
  int64_t tokens = 0;
  int threads = 1;
  double best_s = 0;
  double best_cpu_share = 0;  // of the best run: CPU time / (wall time x threads)
  double sum_tps = 0;
  int runs = 0;
  void add(const Span& s) {
    if (runs == 0 || s.wall_s < best_s) {
      best_s = s.wall_s;
      best_cpu_share = s.wall_s > 0 ? s.cpu_s / (s.wall_s * threads) : 0;
    }
    sum_tps += s.wall_s > 0 ? tokens / s.wall_s : 0;
    ++runs;
  }
  double best_tps() const { return best_s > 0 ? tokens / best_s : 0; }
  double mean_tps() const { return runs > 0 ? sum_tps / runs : 0; }
};

// "1,4,16" -> {1, 4, 16}; duplicates dropped, order kept. Anything but
// positive integers separated by single commas is an error.
Result<std::vector<int>> parse_batch_list(const std::string& s) {
  std::vector<int> out;
  size_t at = 0;
  if (s.empty()) return Status::error("--batch is empty (want e.g. 1,4,16)");
  while (true) {
    const size_t comma = s.find(',', at);
    const std::string item =
        s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const bool digits =
        !item.empty() && item.size() <= 9 &&
        std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits)
      return Status::error("--batch '" + s + "': '" + item +
                           "' is not a positive integer (want e.g. 1,4,16)");
    const int b = std::stoi(item);
    if (b < 1 || b > kMaxBatch)
      return Status::error("--batch '" + s + "': " + item + " is outside 1.." +
                           std::to_string(kMaxBatch));
    if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

Status validate(const BenchArgs& a) {
  struct Check {
    const char* flag;
    int value;
    int max;
  };
  const Check checks[] = {
      {"-p", a.prompt, 1 << 20},
      {"-n", a.n_decode, 1 << 20},
      {"--reps", a.reps, 1000},
      {"--ubatch", a.ubatch, 1 << 16},
      {"--decode-ctx", a.decode_ctx, 1 << 20},
      {"--probe-mib", a.probe_mib, 1 << 20},
      {"--probe-passes", a.probe_passes, 1000},
      {"--paired-segment", a.paired_segment, 1 << 20},
      {"--threads", a.threads, 1024},
  };
  for (const Check& c : checks) {
    if (c.value < 1 || c.value > c.max)
      return Status::error(std::string(c.flag) + " " + std::to_string(c.value) + " is outside 1.." +
                           std::to_string(c.max));
  }
  return Status::ok();
}

// -1 when unknown.
double one_minute_load() {
  double l[1];
  return getloadavg(l, 1) == 1 ? l[0] : -1;
}

// The processor's marketing name, so a pasted table says what it ran on.
std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
  }
  return "unknown";
}

// The options that produced the table, spelled out in full (defaults
// included) so it can be pasted next to the numbers and rerun.
std::string command_line(const BenchArgs& a) {
  return "cairn bench-model -m " + a.model + " -p " + std::to_string(a.prompt) + " -n " +
         std::to_string(a.n_decode) + " --batch " + a.batch + " --threads " +
         std::to_string(a.threads) + " --reps " + std::to_string(a.reps) + " --ubatch " +
         std::to_string(a.ubatch) + " --decode-ctx " + std::to_string(a.decode_ctx) +
         " --paired-segment " + std::to_string(a.paired_segment) + " --kv-type " + a.kv_type;
}

int32_t argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// What the weights cost a forward: every matrix of every layer plus the output
// matrix, all read in full per step. The embedding table is read one row per
// token, so it only counts when it doubles as the (tied) output matrix.
struct WeightBytes {
  uint64_t read_per_forward = 0;
  uint64_t macs_per_token = 0;  // multiply-adds of the weight matrices for one token
  std::string main_type;        // the type holding the most bytes, for the header
};

WeightBytes weight_bytes(const gguf::File& file) {
  WeightBytes w;
  const bool tied = file.find_tensor(model::tensor_name(model::TensorRole::Output)) == nullptr;
  const std::string embd = model::tensor_name(model::TensorRole::TokEmbd);
  std::vector<std::pair<uint64_t, std::string>> by_type;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.name == embd && !tied) continue;
    w.read_per_forward += t.n_bytes;
    if (t.dims.size() == 2) w.macs_per_token += (uint64_t)t.dims[0] * (uint64_t)t.dims[1];
    const std::string name(type_info(t.type).name);
    auto it =
        std::find_if(by_type.begin(), by_type.end(), [&](auto& e) { return e.second == name; });
    if (it == by_type.end())
      by_type.emplace_back(t.n_bytes, name);
    else
      it->first += t.n_bytes;
  }
  if (!by_type.empty()) w.main_type = std::max_element(by_type.begin(), by_type.end())->second;
  return w;
}

class Bench {
 public:
  Bench(model::Model& m, kv::PagedKvCache& kv, const BenchArgs& a)
      : m_(m), kv_(kv), a_(a), rng_(20241129) {}

  // One untimed prompt: faults the mapped weights in and grows the forward's
  // scratch to a prompt's size, so the first timed run pays for neither.
  Status warm_up() {
    Result<Span> r = prefill_once();
    return r.is_ok() ? Status::ok() : r.status().with_context("warm-up");
  }

  Result<Span> prefill_once() {
    std::vector<Token> prompt(static_cast<size_t>(a_.prompt));
    for (Token& t : prompt) t = random_token();
    const SeqId s = next_seq_++;
    if (!kv_.reserve(s, a_.prompt)) return Status::error("K/V pool too small for the prompt");
    const Stopwatch watch;
    for (int start = 0; start < a_.prompt; start += a_.ubatch) {
      const int end = std::min(a_.prompt, start + a_.ubatch);
      batch_.clear();
      for (int i = start; i < end; ++i) batch_.add(prompt[(size_t)i], i, s, i == a_.prompt - 1);
      Status st = m_.forward(batch_, kv_, logits_);
      if (!st.is_ok()) {
        kv_.release(s);
        return st;
      }
      kv_.commit(s, std::span<const Token>(prompt).subspan((size_t)start, (size_t)(end - start)));
    }
    const Span sec = watch.elapsed();
    kv_.release(s);
    return sec;
  }

  // B sequences: their short prompts go through untimed (as one ragged batch
  // in ubatch chunks), then n timed steps of one token per sequence. With
  // segment > 0, between(first step, steps, their span) runs after every
  // `segment` steps (and after the last, shorter run of them), its own time
  // left out of the result.
  Result<Span> decode_once(int n_seqs, int segment = 0,
                           const std::function<void(int, int, const Span&)>& between = {}) {
    const int d = a_.decode_ctx;
    std::vector<SeqId> seqs((size_t)n_seqs);
    std::vector<std::vector<Token>> prompts((size_t)n_seqs);
    for (int b = 0; b < n_seqs; ++b) {
      seqs[(size_t)b] = next_seq_++;
      if (!kv_.reserve(seqs[(size_t)b], d + a_.n_decode)) {
        release(seqs);
        return Status::error("K/V pool too small for " + std::to_string(n_seqs) + " sequences");
      }
      prompts[(size_t)b].resize((size_t)d);
      for (Token& t : prompts[(size_t)b]) t = random_token();
    }
    std::vector<Token> next((size_t)n_seqs, 0);
    Status st = prefill_all(seqs, prompts, next);
    if (!st.is_ok()) {
      release(seqs);
      return st;
    }
    Span total;
    int first = 0;  // of the current segment
    Stopwatch watch;
    for (int step = 0; step < a_.n_decode && st.is_ok(); ++step) {
      batch_.clear();
      for (int b = 0; b < n_seqs; ++b) batch_.add(next[(size_t)b], d + step, seqs[(size_t)b], true);
      st = m_.forward(batch_, kv_, logits_);
      if (!st.is_ok()) break;
      for (int b = 0; b < n_seqs; ++b)
        kv_.commit(seqs[(size_t)b], std::span<const Token>(&next[(size_t)b], 1));
      for (size_t r = 0; r < logits_.rows(); ++r)
        next[(size_t)logits_.batch_index[r]] = argmax(logits_.row(r));
      if (segment > 0 && ((step + 1) % segment == 0 || step + 1 == a_.n_decode)) {
        const Span part = watch.elapsed();
        total.wall_s += part.wall_s;
        total.cpu_s += part.cpu_s;
        if (between) between(first, step + 1 - first, part);
        first = step + 1;
        watch = Stopwatch();  // restarts after between()
      }
    }
    if (segment <= 0) total = watch.elapsed();
    release(seqs);
    if (!st.is_ok()) return st;
    return total;
  }

 private:
  Token random_token() {
    return std::uniform_int_distribution<Token>(0, (Token)m_.hparams().n_vocab - 1)(rng_);
  }

  void release(const std::vector<SeqId>& seqs) {
    for (SeqId s : seqs) kv_.release(s);
  }

  Status prefill_all(const std::vector<SeqId>& seqs, const std::vector<std::vector<Token>>& prompts,
                     std::vector<Token>& next) {
    const int d = a_.decode_ctx;
    const size_t total = seqs.size() * (size_t)d;
    for (size_t start = 0; start < total; start += (size_t)a_.ubatch) {
      const size_t end = std::min(total, start + (size_t)a_.ubatch);
      batch_.clear();
      for (size_t i = start; i < end; ++i) {
        const size_t b = i / (size_t)d, pos = i % (size_t)d;
        batch_.add(prompts[b][pos], (int32_t)pos, seqs[b], (int)pos == d - 1);
      }
      CAIRN_RETURN_IF_ERROR(m_.forward(batch_, kv_, logits_));
      for (size_t i = start; i < end;) {  // commit each sequence's run of this chunk
        const size_t b = i / (size_t)d, pos = i % (size_t)d;
        const size_t n = std::min(end - i, (size_t)d - pos);
        kv_.commit(seqs[b], std::span<const Token>(prompts[b]).subspan(pos, n));
        i += n;
      }
      for (size_t r = 0; r < logits_.rows(); ++r) {
        const size_t i = start + (size_t)logits_.batch_index[r];
        next[i / (size_t)d] = argmax(logits_.row(r));
      }
    }
    return Status::ok();
  }

  model::Model& m_;
  kv::PagedKvCache& kv_;
  const BenchArgs& a_;
  std::mt19937 rng_;
  SeqId next_seq_ = 0;
  model::Batch batch_;
  model::Logits logits_;
};

// Runs `once` reps times into a Timing of `tokens` tokens, logging each run;
// `before` (untimed) runs ahead of each one.
template <typename Fn, typename Before>
Result<Timing> repeat(const std::string& label, int reps, int threads, int64_t tokens, Fn once,
                      Before before) {
  Timing t;
  t.tokens = tokens;
  t.threads = threads;
  for (int r = 0; r < reps; ++r) {
    CAIRN_RETURN_IF_ERROR(before());
    Result<Span> span = once();
    if (!span.is_ok()) return span.status().with_context(label);
    t.add(*span);
    const double wall = span->wall_s;
    spdlog::info("{} run {}/{}: {:.3f} s, {:.2f} tok/s, cpu {:.0f}%", label, r + 1, reps, wall,
                 wall > 0 ? tokens / wall : 0.0,
                 wall > 0 ? 100 * span->cpu_s / (wall * threads) : 0.0);
  }
  return t;
}
template <typename Fn>
Result<Timing> repeat(const std::string& label, int reps, int threads, int64_t tokens, Fn once) {
  return repeat(label, reps, threads, tokens, once, [] { return Status::ok(); });
}

// Memory bandwidth moves by a factor of two within minutes on a shared
// machine, so each batch-1 decode run is paired with a probe taken just before it.
struct DecodeRun {
  double tps = 0;
  double probe_gbps = 0;
};

struct PairedSegment {
  double tps = 0;
  double bytes_per_token = 0;
  double gbps_before = 0, gbps_after = 0;  // the probe passes around it
  double efficiency() const {
    const double bw = (gbps_before + gbps_after) / 2;
    return bw > 0 ? tps * bytes_per_token / (bw * 1e9) : 0.0;
  }
};

// The cores' speed moves too (their neighbours share them): each prefill run
// is paired with an int8 peak probe taken just before it.
struct PrefillRun {
  double tps = 0;
  double peak_gmacs = 0;  // 0: no probe on this CPU
};

// Seconds to read `path` once with the file already in the page cache (a
// first read puts it there); 0 if it cannot be read.
double page_cache_read_seconds(const std::string& path) {
  std::vector<char> buf(8 << 20);
  auto read_all = [&] {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    while (in.read(buf.data(), (std::streamsize)buf.size()) || in.gcount() > 0) {
    }
    return true;
  };
  if (!read_all()) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  read_all();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Status run(const BenchArgs& a) {
  CAIRN_RETURN_IF_ERROR(validate(a));
  auto batches = parse_batch_list(a.batch);
  if (!batches.is_ok()) return batches.status();

  // The file read once from the page cache (after a first read that puts it
  // there): what loading it cannot beat, printed beside the load time.
  const double read_s = page_cache_read_seconds(a.model);
  const auto t_open = std::chrono::steady_clock::now();
  auto file = gguf::File::open(a.model);
  if (!file.is_ok()) return file.status().with_context(a.model);
  const double open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_open).count();
  std::shared_ptr<const gguf::File> shared_file = std::move(*file);
  auto hp_read = model::Model::read_hparams(*shared_file);
  if (!hp_read.is_ok()) return hp_read.status().with_context(a.model);
  const model::HParams& hp0 = *hp_read;
  const int max_batch = *std::max_element(batches->begin(), batches->end());
  if (hp0.n_ctx_train > 0) {
    if ((int64_t)a.prompt + a.n_decode > hp0.n_ctx_train)
      return Status::error("-p " + std::to_string(a.prompt) + " + -n " +
                           std::to_string(a.n_decode) + " is over the model's context of " +
                           std::to_string(hp0.n_ctx_train));
    if ((int64_t)a.decode_ctx + a.n_decode > hp0.n_ctx_train)
      return Status::error("--decode-ctx " + std::to_string(a.decode_ctx) + " + -n " +
                           std::to_string(a.n_decode) + " is over the model's context of " +
                           std::to_string(hp0.n_ctx_train));
  }

  const int threads = a.threads;
  // Before the model exists, so its kernel pool cannot compete with the probe.
  spdlog::info("probing read bandwidth: {} MiB, {} threads, {} passes", a.probe_mib, threads,
               a.probe_passes);
  kernels::BandwidthOptions bo;
  bo.bytes = (size_t)a.probe_mib << 20;
  bo.threads = threads;
  bo.passes = a.probe_passes;
  auto bw = kernels::measure_read_bandwidth(bo);
  if (!bw.is_ok()) return bw.status();
  model::LoadOptions lo;
  lo.n_threads = threads;
  const auto t_load = std::chrono::steady_clock::now();
  auto loaded = model::Model::load(shared_file, lo);
  if (!loaded.is_ok()) return loaded.status().with_context(a.model);
  const double load_s =
      open_s + std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  model::Model& m = **loaded;
  const model::HParams& hp = m.hparams();

  // The pool holds the biggest run at once: the prompt, or every decode
  // sequence at its full length.
  // As the server's: sliding layers keep only their window.
  kv::KvShape shape = hp.paged_kv_shape();
  CAIRN_ASSIGN_OR_RETURN(shape.dtype, kv::parse_kv_type(a.kv_type));
  CAIRN_RETURN_IF_ERROR(kv::check_kv_type(shape.dtype, shape.row_elems, hp.head_dim));
  const int64_t block_bytes = kv::PagedKvCache::block_bytes(shape);
  if (block_bytes <= 0) return Status::error("the model's K/V shape is invalid");
  auto blocks = [](int64_t tokens) { return (tokens + 15) / 16; };
  const int64_t need_blocks =
      std::max(blocks(a.prompt), max_batch * blocks((int64_t)a.decode_ctx + a.n_decode)) +
      kv::kMinBlocks;
  const int64_t pool_bytes = need_blocks * kv::PagedKvCache::tables(shape) * block_bytes;
  const int64_t avail = kv::available_memory_bytes();
  if (avail > 0 && pool_bytes > avail)
    return Status::error("K/V for " + std::to_string(max_batch) + " sequences of " +
                         std::to_string(a.decode_ctx + a.n_decode) + " tokens needs " +
                         std::to_string(pool_bytes >> 20) + " MiB but only " +
                         std::to_string(avail >> 20) + " MiB are available");
  auto kv = kv::PagedKvCache::create(shape, kv::KvConfig{pool_bytes, 16, false, nullptr});
  if (!kv.is_ok()) return kv.status();

  const WeightBytes wb = weight_bytes(*shared_file);
  spdlog::info("{}: {}, {} layers, dim {}, vocab {}, {}; {} threads, isa {}", a.model, hp.arch,
               hp.n_layer, hp.n_embd, hp.n_vocab, wb.main_type, threads, isa_name(active_isa()));

  const double load_before = one_minute_load();
  Bench bench(m, **kv, a);
  CAIRN_RETURN_IF_ERROR(bench.warm_up());

  // The efficiency's denominator: plain loads over the very pages decode reads
  // (where memory is not uniform, a fresh buffer says little about them).
  auto weights_probe = kernels::ReadProbe::over(m.weight_streams(), threads);
  if (!weights_probe.is_ok()) return weights_probe.status().with_context("weights probe");
  kernels::ReadProbe& wprobe = **weights_probe;
  const kernels::BandwidthResult wbw = wprobe.best_of(a.probe_passes);

  struct Row {
    std::string label;
    Timing t;
  };
  std::vector<Row> rows;
  const std::string p_label = "prefill p=" + std::to_string(a.prompt);
  std::vector<PrefillRun> pre_runs;
  double last_peak = 0;
  std::string peak_note;  // why there is no int8 probe, if there is none
  const auto peak_before = [&]() -> Status {
    auto p = kernels::measure_int8_peak(threads);
    last_peak = p.is_ok() ? p->best_gmacs : 0;
    if (!p.is_ok()) peak_note = p.status().message();
    return Status::ok();
  };
  auto pre = repeat(
      p_label, a.reps, threads, a.prompt,
      [&]() -> Result<Span> {
        Result<Span> span = bench.prefill_once();
        if (span.is_ok() && span->wall_s > 0)
          pre_runs.push_back({(double)a.prompt / span->wall_s, last_peak});
        return span;
      },
      peak_before);
  if (!pre.is_ok()) return pre.status();
  rows.push_back({p_label, *pre});

  std::vector<int> order{1};  // batch 1 always runs: efficiency is defined on it
  for (int b : *batches)
    if (b != 1) order.push_back(b);
  std::vector<DecodeRun> runs1;  // batch 1: each run with the probe just before it
  double last_probe = 0;
  const auto probe_before = [&]() -> Status {
    last_probe = wprobe.best_of(a.probe_passes).best_gbps;
    return Status::ok();
  };
  for (int b : order) {
    const std::string label = "decode B=" + std::to_string(b) + " n=" + std::to_string(a.n_decode);
    const int64_t tokens = (int64_t)b * a.n_decode;
    auto once = [&]() -> Result<Span> {
      Result<Span> span = bench.decode_once(b);
      if (b == 1 && span.is_ok() && span->wall_s > 0)
        runs1.push_back({(double)tokens / span->wall_s, last_probe});
      return span;
    };
    auto t = b == 1 ? repeat(label, a.reps, threads, tokens, once, probe_before)
                    : repeat(label, a.reps, threads, tokens, once);
    if (!t.is_ok()) return t.status();
    rows.push_back({label, *t});
  }

  // Step i of a batch-1 run (i = 0..n-1) attends over decode_ctx + i + 1
  // positions, each a K row and a V row in every layer.
  const double kv_row = (double)kv::kv_row_bytes(shape.dtype, hp.kv_row_elems());
  const double w_bytes = (double)wb.read_per_forward;
  // Bytes per token of steps [first, first + n): weights plus their mean K/V.
  const auto bytes_per_token = [&](double first, double n) {
    const double ctx = a.decode_ctx + first + (n + 1) / 2.0;
    return w_bytes + (double)hp.n_layer * 2.0 * kv_row * ctx;
  };
  const double avg_ctx = a.decode_ctx + (a.n_decode + 1) / 2.0;
  const double per_token = bytes_per_token(0, a.n_decode);
  const double kv_bytes = per_token - w_bytes;

  // Paired: batch-1 decode runs cut into segments with one probe pass between
  // them (and one before the first), each segment's read rate compared with
  // the mean of the two passes around it. The runs above compare a whole run
  // with the best of 10 passes taken before it; on a host whose bandwidth
  // swings within seconds that pairs a run's average with the probe's luckiest
  // moment, while a segment and its passes share the same few hundred ms.
  std::vector<PairedSegment> paired;
  for (int r = 0; r < a.reps; ++r) {
    double before = wprobe.pass().gbps;
    auto span = bench.decode_once(1, a.paired_segment, [&](int first, int n, const Span& part) {
      const double after = wprobe.pass().gbps;
      if (part.wall_s > 0)
        paired.push_back({n / part.wall_s, bytes_per_token(first, n), before, after});
      before = after;
    });
    if (!span.is_ok()) return span.status().with_context("paired decode");
  }
  const auto efficiency_of = [&](const DecodeRun& r) {
    return r.probe_gbps > 0 ? r.tps * per_token / (r.probe_gbps * 1e9) : 0.0;
  };
  // The fastest batch-1 run, against the probe taken just before it.
  DecodeRun best1;
  for (const DecodeRun& r : runs1)
    if (r.tps > best1.tps) best1 = r;

  std::printf("command      %s\n", command_line(a).c_str());
  std::printf("model        %s\n", a.model.c_str());
  std::printf("shape        %s, %" PRId64 " layers, dim %" PRId64 ", heads %" PRId64 "/%" PRId64
              ", ffn %" PRId64 ", vocab %" PRId64 ", weights %s\n",
              hp.arch.c_str(), hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv, hp.n_ff, hp.n_vocab,
              wb.main_type.c_str());
  std::printf("isa          %s (detected %s)\n", isa_name(active_isa()), isa_name(detected_isa()));
  std::printf("batch tiles  %s (bf16 weights: %s)\n", kernels::packed_tile_path(),
              kernels::packed_bf16_tile_path());
  std::printf("cpu          %s\n", cpu_model_name().c_str());
  std::printf("threads      %d\n", threads);
  std::printf("load         %.2f before, %.2f after (1-minute load average)\n", load_before,
              one_minute_load());
  std::printf("model load   %.3f s (open, map, build, repack); reading the file from the page cache %.3f s: "
              "%.2fx\n",
              load_s, read_s, read_s > 0 ? load_s / read_s : 0.0);
  std::printf(
      "cpu %%        CPU time / (wall time x threads) of the best run; far under 100:\n"
      "             other processes had the cores, so tok/s is low by that much\n");
  std::printf("runs         best of %d (ubatch %d, decode prompts of %d tokens)\n\n", a.reps,
              a.ubatch, a.decode_ctx);
  std::printf("%-22s %8s %12s %12s %12s %7s\n", "test", "tokens", "best ms", "best tok/s",
              "mean tok/s", "cpu %");
  for (const Row& r : rows)
    std::printf("%-22s %8" PRId64 " %12.3f %12.2f %12.2f %7.0f\n", r.label.c_str(), r.t.tokens,
                r.t.best_s * 1e3, r.t.best_tps(), r.t.mean_tps(), r.t.best_cpu_share * 100);
  std::printf("\n");
  std::printf("%-30s %12.4f MB  (layer matrices + output; embedding excluded)\n",
              "weight bytes / token", w_bytes / 1e6);
  std::printf("%-30s %12.4f MB  (%s K+V at mean context %.1f)\n", "kv bytes / token (B=1)",
              kv_bytes / 1e6, std::string(type_info(shape.dtype).name).c_str(), avg_ctx);
  std::printf("%-30s %12.4f MB\n", "bytes / decoded token (B=1)", per_token / 1e6);
  std::printf(
      "%-30s %12.2f GB/s (probe: %d threads, %s loads over the model's %.1f MB of weights, best "
      "of %d, cpu %.0f%%; mean %.2f)\n",
      "read bandwidth, weights", wbw.best_gbps, wbw.threads, isa_name(wbw.isa),
      (double)wbw.bytes / 1e6, wbw.passes, wbw.best_cpu_share * 100, wbw.mean_gbps);
  std::printf(
      "%-30s %12.2f GB/s (probe: %d threads, %zu MiB fresh buffer, %s loads, best of %d, cpu "
      "%.0f%%; mean %.2f; before the model was loaded)\n",
      "read bandwidth, machine", bw->best_gbps, bw->threads, bw->bytes >> 20, isa_name(bw->isa),
      bw->passes, bw->best_cpu_share * 100, bw->mean_gbps);
  std::printf(
      "\nprefill runs, each right after an int8 peak probe (%d threads, vpdpbusd from "
      "registers):\n",
      threads);
  if (!peak_note.empty()) std::printf("  no probe: %s\n", peak_note.c_str());
  const double macs = (double)wb.macs_per_token;
  for (size_t i = 0; i < pre_runs.size(); ++i) {
    const PrefillRun& r = pre_runs[i];
    const double gmacs = r.tps * macs / 1e9;
    std::printf(
        "  prefill run %zu: %8.2f tok/s  peak %8.1f GMAC/s  matmuls %7.1f GMAC/s  %5.1f %% of "
        "peak\n",
        i + 1, r.tps, r.peak_gmacs, gmacs, r.peak_gmacs > 0 ? 100.0 * gmacs / r.peak_gmacs : 0.0);
  }
  std::printf("%-30s %12.4f MMAC  (weight matrices; attention's products not counted)\n",
              "matmul work / token", macs / 1e6);
  std::printf("\ndecode B=1 runs, each right after a probe of the weights (best of %d passes):\n",
              a.probe_passes);
  for (size_t i = 0; i < runs1.size(); ++i)
    std::printf("  run %zu: %8.2f tok/s  probe %7.2f GB/s  reads %7.2f GB/s  efficiency %5.1f %%\n",
                i + 1, runs1[i].tps, runs1[i].probe_gbps, runs1[i].tps * per_token / 1e9,
                efficiency_of(runs1[i]) * 100.0);
  std::printf("%-30s %12.1f %%   (fastest decode B=1 run: tok/s x bytes/token / its probe)\n",
              "decode efficiency", efficiency_of(best1) * 100.0);
  std::printf(
      "\ndecode B=1 paired with the probe (%d runs in segments of %d tokens, one pass over the "
      "weights between segments):\n",
      a.reps, a.paired_segment);
  std::vector<double> effs;
  for (size_t i = 0; i < paired.size(); ++i) {
    const PairedSegment& p = paired[i];
    effs.push_back(p.efficiency());
    std::printf(
        "  segment %2zu: %8.2f tok/s  passes %6.2f / %6.2f GB/s  reads %7.2f GB/s  efficiency "
        "%5.1f %%\n",
        i + 1, p.tps, p.gbps_before, p.gbps_after, p.tps * p.bytes_per_token / 1e9,
        p.efficiency() * 100.0);
  }
  if (!effs.empty()) {
    std::sort(effs.begin(), effs.end());
    const size_t n = effs.size();
    const double median = n % 2 ? effs[n / 2] : (effs[n / 2 - 1] + effs[n / 2]) / 2;
    std::printf(
        "%-30s %12.1f %%   (median of %zu segments, min %.1f, max %.1f: tok/s x bytes/token / "
        "mean of the passes around it)\n",
        "decode efficiency, paired", median * 100.0, n, effs.front() * 100.0, effs.back() * 100.0);
  }
  std::fflush(stdout);
  return Status::ok();
}

}  // namespace

void register_bench_model(CLI::App& app, CommandResult& result) {
  auto* cmd = app.add_subcommand(
      "bench-model", "time prefill and (batched) decode through the model layer; print a table");
  auto a = std::make_shared<BenchArgs>();
  cmd->add_option("-m,--model", a->model, "GGUF model")->required();
  cmd->add_option("-p,--prompt", a->prompt, "prefill prompt length in tokens")
      ->capture_default_str();
  cmd->add_option("-n,--n-decode", a->n_decode, "decode steps per sequence")->capture_default_str();
  cmd->add_option("--batch", a->batch, "decode batch sizes, comma-separated")
      ->capture_default_str();
  cmd->add_option("-t,--threads", a->threads,
                  "compute threads, this one included (default: one per physical core)");
  cmd->add_option("--reps", a->reps, "runs of each test; the best is reported")
      ->capture_default_str();
  cmd->add_option("--ubatch", a->ubatch, "most tokens per forward during prefill")
      ->capture_default_str();
  cmd->add_option("--decode-ctx", a->decode_ctx, "prompt tokens of each decode sequence")
      ->capture_default_str();
  cmd->add_option("--kv-type", a->kv_type, "how K/V rows are stored: f16 or q8_0")
      ->capture_default_str();
  cmd->add_option("--probe-mib", a->probe_mib,
                  "fresh buffer of the machine bandwidth probe, in MiB")
      ->capture_default_str();
  cmd->add_option("--probe-passes", a->probe_passes,
                  "passes of each bandwidth probe (machine, weights)")
      ->capture_default_str();
  cmd->add_option("--paired-segment", a->paired_segment,
                  "decode tokens between two probe passes in the paired efficiency")
      ->capture_default_str();
  // Left out, --threads means every core; typed as 0 it is an error like any
  // other non-positive count.
  cmd->callback([&result, a, cmd] {
    BenchArgs args = *a;
    if (cmd->count("--threads") == 0) args.threads = ThreadPool::default_size();
    result.status = run(args);
  });
}

}  // namespace cairn::cli
