// kernels/packed_layout.h — internal to src/kernels: what every packed kernel
// family (packed_q*, packed_k*, packed_float) shares, below all of them
// (packed_layout.cpp): the memory packed weights live in and how far ahead the
// kernels request them. The layouts themselves, the decode work split
// (run_groups_balanced) and the made-row buffer: packed.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "kernels/packed.h"

namespace cairn::kernels {

constexpr int kGroup = 16;  // rows per packed group (one zmm of outputs)

// `bytes` of 64-byte aligned memory for a packed matrix, in huge pages: its
// own for a large matrix, else a share of a chunk that other small matrices
// share (the first element owns the memory; both null when out of memory).
std::pair<std::shared_ptr<uint8_t>, uint8_t*> alloc_packed(size_t bytes);

// How far ahead of their loads the kernels request weights that stream from
// memory (bytes; 0: no software prefetch). stream_ahead: the one-token
// Q4_0/Q8_0 kernels (per vendor); dense_stream_ahead: kernels that spend more
// instructions per line of weights (K-quants, Q4_0/Q8_0 batches of 4+).
// CAIRN_PREFETCH=<bytes> sets both.
extern const size_t stream_ahead;
extern const size_t dense_stream_ahead;

}  // namespace cairn::kernels
