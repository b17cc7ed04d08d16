// kernels/packed_layout.cpp — what every packed kernel family shares: the packed
// weights' memory, the prefetch distances, the decode work split.
#include "kernels/packed_layout.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "core/cpu_features.h"

namespace cairn::kernels {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Memory in transparent huge pages: a packed matrix is streamed whole for each
// decoded token, and with 4 KiB pages every page of it is a TLB miss.
std::shared_ptr<uint8_t> alloc_huge(size_t bytes, bool populate) {
  const size_t n = (bytes + kHugePage - 1) & ~(kHugePage - 1);
  void* p = std::aligned_alloc(kHugePage, n);
  if (p == nullptr) return nullptr;
  ::madvise(p, n, MADV_HUGEPAGE);
  // Page tables filled in one call, where a fault per page would take longer
  // than the packing itself.
  constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE, Linux 5.14; harmless where unknown
  if (populate) ::madvise(p, n, kPopulateWrite);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

// Matrices below kOwnPages share 64 MiB huge-page chunks, filled in load
// order, instead of sitting in 4 KiB pages or each rounding up to whole huge
// pages (TinyLlama's 2.4 MB Q and O matrices would waste 72 MB); small
// matrices stream faster from huge pages too. A chunk lives while a matrix in
// it does; only pages written are resident, so a small model does not pay for
// a whole chunk.
constexpr size_t kOwnPages = size_t{4} << 20;
constexpr size_t kChunkBytes = size_t{64} << 20;

struct Arena {
  std::mutex mu;
  std::weak_ptr<uint8_t> chunk;
  uint8_t* base = nullptr;
  size_t used = 0;
};

}  // namespace

std::pair<std::shared_ptr<uint8_t>, uint8_t*> alloc_packed(size_t bytes) {
  if (bytes >= kOwnPages) {
    auto own = alloc_huge(bytes, true);
    return {own, own.get()};
  }
  static Arena arena;
  const size_t need = (bytes + 63) & ~size_t{63};
  std::lock_guard<std::mutex> lock(arena.mu);
  std::shared_ptr<uint8_t> chunk = arena.chunk.lock();
  if (!chunk || arena.used + need > kChunkBytes) {
    chunk = alloc_huge(kChunkBytes, false);
    if (!chunk) return {nullptr, nullptr};
    arena.chunk = chunk;
    arena.base = chunk.get();
    arena.used = 0;
  }
  uint8_t* p = arena.base + arena.used;
  arena.used += need;
  return {std::move(chunk), p};
}

namespace {

// How far ahead of its loads the one-token kernel asks for weights
// (prefetcht1 for every line, bytes ahead; 0: no software prefetch).
// CAIRN_PREFETCH=<bytes> overrides; the default is per vendor: on Intel
// hosts the L2 streamer stops at each 4 KiB page and the Q4_0 loop issues its
// loads too slowly to keep enough lines in flight, while on AMD EPYC the
// hardware prefetchers keep up and software prefetch only costs.
// The K-quant kernels spend more instructions per line of weights (Q6_K ~8,
// Q4_K ~5, against Q8_0's ~3), so fewer of their loads are in flight even
// where the Q4_0/Q8_0 ones keep up: they prefetch 4 KiB ahead on every host
// (dense_stream_ahead), as do the Q4_0/Q8_0 kernels for 4 to kFewTokens tokens
// (packed_q_vnni.cpp's tile_few_run).
std::optional<size_t> prefetch_from_env() {
  if (const char* e = std::getenv("CAIRN_PREFETCH")) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(e, &end, 10);
    if (end != e && *end == '\0' && v <= (size_t{1} << 20)) return v & ~size_t{63};
  }
  return std::nullopt;
}

}  // namespace

const size_t stream_ahead = prefetch_from_env().value_or(cpu_features().intel ? 4096 : 0);
const size_t dense_stream_ahead = prefetch_from_env().value_or(4096);

size_t packed_stream_ahead(PackedMatrix::Layout layout) {
  // The K-quants and the lookup layouts spend more instructions per line.
  const bool dense = layout != PackedMatrix::Layout::Q4_0x16 &&
                     layout != PackedMatrix::Layout::Q8_0x16;
  return dense ? dense_stream_ahead : stream_ahead;
}

namespace {

// [0, n) split as the pool's static split (one contiguous range per share),
// each range walked front to back in whole chunks of kStealChunk (claims
// below); a share that finishes its own range takes chunks from the back of
// the others'. Reading stays sequential in every range (what the hardware
// prefetcher wants, which a shared queue of chunks would break), and no share
// waits for a slower one.
constexpr int64_t kStealChunk = 4;

struct alignas(64) StealRange {
  int64_t begin = 0, end = 0;
  std::atomic<uint64_t> front_back{0};  // next chunk from the front (high 32 bits), end (low)
};

// An owner claims a quarter of what is left of its range (at least one
// chunk), not one chunk at a time: every claim is a locked compare-exchange,
// which waits for the loads in flight before it, so per-chunk claims cut the
// weight stream ~6600 times per TinyLlama token. Stealing still takes one
// chunk from the back, so the tail stays balanced.
constexpr uint64_t kGuideDiv = 4;

// Chunks [first, first + count) of r, claimed from its front (own) or its
// back (stolen); count 0 when none is left.
struct Claim {
  int64_t first = 0, count = 0;
};
Claim claim_chunks(StealRange& r, bool from_back) {
  uint64_t v = r.front_back.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t front = v >> 32, back = v & 0xFFFFFFFFu;
    if (front >= back) return {};
    const uint64_t take = from_back ? 1 : std::max<uint64_t>(1, (back - front) / kGuideDiv);
    const uint64_t next = from_back ? (front << 32) | (back - take) : ((front + take) << 32) | back;
    if (r.front_back.compare_exchange_weak(v, next, std::memory_order_relaxed))
      return {(int64_t)(from_back ? back - take : front), (int64_t)take};
  }
}

// Where share t of `shares` begins in run_balanced's split of [0, n).
inline int64_t share_begin(int64_t n, int shares, int t) {
  return t * (n / shares) + std::min<int64_t>(t, n % shares);
}

// Bytes a worker pulls in, after its share of one call, from where its share
// of the next call will begin (ThreadPool::warm_after_share): otherwise the
// worker idles through the caller's quantization and serial ops.
constexpr size_t kWarmBytes = size_t{256} << 10;

struct WarmRange {
  const uint8_t* p = nullptr;
  size_t bytes = 0;
};

// fn(g0, g1) over [0, n) as above; then each worker is asked to warm
// warm[share] (null: nothing to warm).
template <typename Fn>
void run_balanced(ThreadPool& pool, int64_t n, const Fn& fn, const WarmRange* warm) {
  const int shares = pool.size();
  thread_local std::unique_ptr<StealRange[]> ranges;
  thread_local int capacity = 0;
  if (capacity < shares) {
    ranges = std::make_unique<StealRange[]>((size_t)shares);
    capacity = shares;
  }
  for (int t = 0; t < shares; ++t) {
    StealRange& r = ranges[(size_t)t];
    r.begin = share_begin(n, shares, t);
    r.end = share_begin(n, shares, t + 1);
    const uint64_t chunks = (uint64_t)((r.end - r.begin + kStealChunk - 1) / kStealChunk);
    r.front_back.store(chunks, std::memory_order_relaxed);  // front 0, back = chunks
  }
  StealRange* all = ranges.get();
  pool.run([&](int share, int n_shares) {
    for (int k = 0; k < n_shares; ++k) {
      StealRange& r = all[(share + k) % n_shares];
      for (Claim c; (c = claim_chunks(r, k != 0)).count > 0;) {
        const int64_t b = r.begin + c.first * kStealChunk;
        fn(b, std::min(r.end, b + c.count * kStealChunk));
      }
    }
    if (warm) ThreadPool::warm_after_share(warm[share].p, warm[share].bytes);
  });
}

// For each share of a balanced single-pass call over `next`: the first
// kWarmBytes of its range (the start of the run holding its first group, up
// to the end of that matrix).
const WarmRange* warm_ranges(std::span<const PackedMatrix* const> next, int shares) {
  if (next.empty()) return nullptr;
  thread_local std::vector<WarmRange> ranges;
  ranges.assign((size_t)shares, WarmRange{});
  int64_t total = 0;
  for (const PackedMatrix* m : next) total += m->n_groups;
  for (int t = 0; t < shares; ++t) {
    int64_t g = share_begin(total, shares, t);
    for (const PackedMatrix* m : next) {
      if (g >= m->n_groups) {
        g -= m->n_groups;
        continue;
      }
      const size_t run_bytes = (size_t)m->n_blocks * m->block_bytes;
      const size_t at = (size_t)(g - g % PackedMatrix::kRunGroups) * run_bytes;
      const size_t size = (size_t)m->n_groups * run_bytes;
      ranges[(size_t)t] = {m->data + at, std::min(kWarmBytes, size - at)};
      break;
    }
  }
  return ranges.data();
}

}  // namespace

void run_groups_balanced(ThreadPool& pool, int64_t n,
                         const std::function<void(int64_t, int64_t)>& fn,
                         std::span<const PackedMatrix* const> next) {
  run_balanced(pool, n, fn, warm_ranges(next, pool.size()));
}

float* made_row_buffer(int64_t cols) {
  thread_local std::vector<float> row;
  row.resize(std::max(row.size(), (size_t)cols));
  return row.data();
}

bool packed_compatible(const PackedMatrix& a, const PackedMatrix& b) {
  return a.layout == b.layout && a.cols == b.cols;
}

}  // namespace cairn::kernels
