// core/cpu_features.h — what the CPU and OS let cairn's kernels use.
// Owns feature detection (CPUID, plus XGETBV for the OS saving the wide
// registers, and Linux's AMX permission request) done once per process, and the
// instruction-set level kernels dispatch on. CAIRN_ISA=scalar|avx2|avx512|
// avx512vnni|amx caps that level (CAIRN_SCALAR=1 means scalar) so every path
// can be tested on one machine; a cap above what the CPU has changes nothing.
// Never picks kernels itself: the type tables and kernels read active_isa().
#pragma once

#include <optional>
#include <string_view>

namespace cairn {

// Ordered: each level includes everything below it.
enum class Isa : int {
  Scalar = 0,
  Avx2 = 1,        // AVX2 + FMA + F16C
  Avx512 = 2,      // AVX-512 F/BW/VL/DQ
  Avx512Vnni = 3,  // + VNNI (int8 dot products); BF16 is reported separately
  Amx = 4,         // + AMX tiles (int8), OS permission granted
};

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx512_bf16 = false;
  bool gfni = false;  // Galois-field byte instructions (vgf2p8affineqb: any bit move in a byte)
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false;
  bool os_ymm = false, os_zmm = false, os_amx = false;  // XCR0 state enabled by the OS
  // CPUID vendor "GenuineIntel": some memory-streaming choices (software
  // prefetch in the packed decode kernels) win on Intel and lose on AMD.
  bool intel = false;
};

// Detected once, on first use.
const CpuFeatures& cpu_features();

// The best level this CPU and OS support.
Isa detected_isa();

// The level kernels use: detected_isa() capped by CAIRN_ISA / CAIRN_SCALAR,
// fixed at first use.
Isa active_isa();

// True when kernels may use the level `isa` (active_isa() >= isa).
inline bool isa_enabled(Isa isa) { return static_cast<int>(active_isa()) >= static_cast<int>(isa); }

// Whether AVX-512 BF16 instructions may be used (CPU has them and the cap is >= Avx512).
bool bf16_enabled();

// Whether 512-bit GFNI instructions may be used: the CPU has them, the cap is
// >= Avx512, and CAIRN_GFNI is not "off" (so tests can run the kernels without).
bool gfni_enabled();

const char* isa_name(Isa isa);
std::optional<Isa> parse_isa(std::string_view name);

}  // namespace cairn
