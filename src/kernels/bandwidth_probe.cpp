// The read-bandwidth probe. A pass's threads meet at a barrier before and
// after the reads, so it times only the reads, never thread start-up. Each
// thread first writes its own share: on a multi-node machine first touch puts
// the pages near the thread that later reads them, and a never-written
// anonymous page would all map to the one zero page (a cache-resident read,
// not a memory one).
#include "kernels/bandwidth_probe.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/simd.h"

namespace cairn::kernels {
namespace {

constexpr size_t kPage = 4096;

uint64_t sum_scalar(const uint64_t* w, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i < n; ++i) s += w[i];
  return s;
}

// Four independent accumulators keep several loads in flight; one would
// serialize on the add's latency and measure the core, not the memory.
__attribute__((target("avx2"))) uint64_t sum_avx2(const uint64_t* w, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i + 12)));
  }
  const __m256i a = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3] + sum_scalar(w + i, n - i);
}

__attribute__((target("avx512f"))) uint64_t sum_avx512(const uint64_t* w, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(w + i));
    a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(w + i + 8));
    a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(w + i + 16));
    a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(w + i + 24));
  }
  const __m512i a = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
  // Lanes summed as unsigned: _mm512_reduce_add_epi64 adds signed 64-bit
  // values in C, which overflows (undefined) on these wrap-around sums.
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, a);
  uint64_t sum = 0;
  for (uint64_t l : lanes) sum += l;
  return sum + sum_scalar(w + i, n - i);
}

Isa load_isa(Isa wanted) {
  const Isa cap = active_isa();
  const Isa isa = static_cast<int>(wanted) < static_cast<int>(cap) ? wanted : cap;
  if (static_cast<int>(isa) >= static_cast<int>(Isa::Avx512)) return Isa::Avx512;
  return isa;  // Scalar or Avx2
}

double process_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

struct Mapping {
  void* p = MAP_FAILED;
  size_t n = 0;
  ~Mapping() {
    if (p != MAP_FAILED) munmap(p, n);
  }
};

}  // namespace

uint64_t sum_words(const uint64_t* words, size_t n, Isa isa) {
  switch (load_isa(isa)) {
    case Isa::Avx512:
      return sum_avx512(words, n);
    case Isa::Avx2:
      return sum_avx2(words, n);
    default:
      return sum_scalar(words, n);
  }
}

// What one thread reads in a pass: whole words, in order.
struct Piece {
  const uint64_t* words;
  size_t n;
};

struct ReadProbe::Impl {
  Mapping m;  // the probe's own buffer; unused (unmapped) over borrowed memory
  std::vector<std::vector<Piece>> shares;  // [thread]
  size_t bytes = 0;                        // read per pass, all threads together
  int threads = 0;
  Isa isa = Isa::Scalar;
  uint64_t checksum = 0;

  // body(t) on `threads` threads (this one as thread 0, thread t always
  // reading share t); returns once all are done.
  template <typename Body>
  void on_all_threads(const Body& body) {
    std::vector<std::thread> workers;
    workers.reserve(static_cast<size_t>(threads - 1));
    for (int t = 1; t < threads; ++t) workers.emplace_back(body, t);
    body(0);
    for (auto& w : workers) w.join();
  }
};

ReadProbe::ReadProbe(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ReadProbe::~ReadProbe() = default;

Result<std::unique_ptr<ReadProbe>> ReadProbe::create(const BandwidthOptions& o) {
  if (o.threads < 1) return Status::error("bandwidth probe: threads must be >= 1");
  const size_t share = o.bytes / static_cast<size_t>(o.threads) / kPage * kPage;
  if (share == 0)
    return Status::error("bandwidth probe: buffer of " + std::to_string(o.bytes) +
                         " bytes is under one page per thread");
  auto impl = std::make_unique<Impl>();
  Mapping& m = impl->m;
  m.n = share * static_cast<size_t>(o.threads);
  m.p = mmap(nullptr, m.n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m.p == MAP_FAILED)
    return Status::error("bandwidth probe: cannot map " + std::to_string(m.n) + " bytes");
  // Huge pages spare the TLB misses that would otherwise cap a streaming read
  // below what the memory delivers; a hint only, the probe works without it.
  madvise(m.p, m.n, MADV_HUGEPAGE);
  const size_t share_words = share / sizeof(uint64_t);
  for (int t = 0; t < o.threads; ++t)
    impl->shares.push_back(
        {{static_cast<uint64_t*>(m.p) + static_cast<size_t>(t) * share_words, share_words}});
  impl->bytes = m.n;
  impl->threads = o.threads;
  impl->isa = load_isa(active_isa());
  impl->on_all_threads([&](int t) {
    auto* mine = const_cast<uint64_t*>(impl->shares[static_cast<size_t>(t)][0].words);
    for (size_t i = 0; i < share_words; ++i) mine[i] = static_cast<size_t>(t) * share_words + i;
  });
  return std::unique_ptr<ReadProbe>(new ReadProbe(std::move(impl)));
}

Result<std::unique_ptr<ReadProbe>> ReadProbe::over(
    std::span<const std::span<const uint8_t>> streams, int threads) {
  if (threads < 1) return Status::error("bandwidth probe: threads must be >= 1");
  std::vector<Piece> all;
  size_t total = 0;  // words
  for (const std::span<const uint8_t>& s : streams) {
    const auto begin = reinterpret_cast<uintptr_t>(s.data());
    const uintptr_t first = (begin + 7) & ~uintptr_t{7};
    if (s.empty() || first >= begin + s.size()) continue;
    const size_t n = (begin + s.size() - first) / sizeof(uint64_t);
    if (n == 0) continue;
    all.push_back({reinterpret_cast<const uint64_t*>(first), n});
    total += n;
  }
  const size_t per_thread = total / static_cast<size_t>(threads);
  if (per_thread * sizeof(uint64_t) < kPage)
    return Status::error("bandwidth probe: " + std::to_string(total * sizeof(uint64_t)) +
                         " bytes of streams are under one page per thread");
  auto impl = std::make_unique<Impl>();
  impl->shares.resize(static_cast<size_t>(threads));
  // Thread t reads words [t * total / threads, (t + 1) * total / threads) of
  // the streams laid end to end.
  size_t piece = 0, offset = 0;  // where the next share starts
  for (int t = 0; t < threads; ++t) {
    size_t want = total * static_cast<size_t>(t + 1) / static_cast<size_t>(threads) -
                  total * static_cast<size_t>(t) / static_cast<size_t>(threads);
    while (want > 0) {
      const Piece& p = all[piece];
      const size_t take = std::min(want, p.n - offset);
      impl->shares[static_cast<size_t>(t)].push_back({p.words + offset, take});
      want -= take;
      offset += take;
      if (offset == p.n) ++piece, offset = 0;
    }
  }
  impl->bytes = total * sizeof(uint64_t);
  impl->threads = threads;
  impl->isa = load_isa(active_isa());
  return std::unique_ptr<ReadProbe>(new ReadProbe(std::move(impl)));
}

ReadProbe::Pass ReadProbe::pass() {
  Impl& im = *impl_;
  std::vector<uint64_t> sums(static_cast<size_t>(im.threads), 0);
  std::barrier sync(im.threads);
  double seconds = 0, cpu = 0;
  im.on_all_threads([&](int t) {
    sync.arrive_and_wait();
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = t == 0 ? process_cpu_seconds() : 0;
    uint64_t sum = 0;
    for (const Piece& p : im.shares[static_cast<size_t>(t)]) sum += sum_words(p.words, p.n, im.isa);
    sums[static_cast<size_t>(t)] = sum;
    sync.arrive_and_wait();
    if (t == 0) {
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      cpu = process_cpu_seconds() - cpu0;
    }
  });
  im.checksum = 0;
  for (uint64_t s : sums) im.checksum += s;
  Pass p;
  if (seconds > 0) {
    p.gbps = static_cast<double>(im.bytes) / seconds / 1e9;
    p.cpu_share = cpu / (seconds * im.threads);
  }
  return p;
}

size_t ReadProbe::bytes() const { return impl_->bytes; }
int ReadProbe::threads() const { return impl_->threads; }
Isa ReadProbe::isa() const { return impl_->isa; }
uint64_t ReadProbe::checksum() const { return impl_->checksum; }

BandwidthResult ReadProbe::best_of(int passes) {
  BandwidthResult r;
  r.bytes = bytes();
  r.threads = threads();
  r.passes = passes;
  r.isa = isa();
  double total = 0;
  for (int i = 0; i < passes; ++i) {
    const Pass p = pass();
    if (p.gbps > r.best_gbps) {
      r.best_gbps = p.gbps;
      r.best_cpu_share = p.cpu_share;
    }
    total += p.gbps;
  }
  r.mean_gbps = passes > 0 ? total / passes : 0;
  r.checksum = checksum();
  return r;
}

Result<BandwidthResult> measure_read_bandwidth(const BandwidthOptions& o) {
  if (o.passes < 1) return Status::error("bandwidth probe: passes must be >= 1");
  auto probe = ReadProbe::create(o);
  if (!probe.is_ok()) return probe.status();
  return (*probe)->best_of(o.passes);
}

}  // namespace cairn::kernels
