// kernels/compute_probe.h — how fast this machine multiplies int8.
// Owns a peak probe for the instruction the quantized prompt kernels spend
// their time in: each thread issues independent 512-bit vpdpbusd (64 int8
// multiply-adds each) from registers, nothing loaded, for a fixed time; the
// best of several passes is the ceiling a prompt's matmuls can approach. Used
// by `cairn bench-model` to turn prefill tok/s into an efficiency, as the
// bandwidth probe does for decode: on a shared host the cores' speed moves
// with their neighbours' load, so a prefill run is read against a probe taken
// just before it.
#pragma once

#include "core/status.h"

namespace cairn::kernels {

struct ComputeResult {
  double best_gmacs = 0;  // int8 multiply-adds per second, all threads, in 1e9
  int threads = 0;
  int passes = 0;
};

// Errors (one line) when AVX-512 VNNI is not active (CPU or CAIRN_ISA cap),
// or on a non-positive thread or pass count or pass length.
Result<ComputeResult> measure_int8_peak(int threads, int passes = 5, double pass_seconds = 0.05);

}  // namespace cairn::kernels
