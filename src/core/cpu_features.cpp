// CPU feature detection and the CAIRN_ISA cap.
#include "core/cpu_features.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define CAIRN_X86 1
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace cairn {
namespace {

#ifdef CAIRN_X86
uint64_t read_xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

// Linux hands out AMX tile state only on request (arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); without it the first tile
// instruction kills the process.
bool request_amx_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchReqXcompPerm = 0x1023;
  constexpr int kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#ifdef CAIRN_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char vendor[12];  // EBX, EDX, ECX spell the vendor's name
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    f.intel = std::memcmp(vendor, "GenuineIntel", 12) == 0;
  }
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  f.fma = (c >> 12) & 1;
  f.f16c = (c >> 29) & 1;
  const bool avx = (c >> 28) & 1;
  if (osxsave) {
    const uint64_t xcr0 = read_xcr0();
    f.os_ymm = (xcr0 & 0x6) == 0x6;                // SSE + AVX state
    f.os_zmm = f.os_ymm && (xcr0 & 0xE0) == 0xE0;  // opmask + ZMM_Hi256 + Hi16_ZMM
    f.os_amx = (xcr0 & 0x60000) == 0x60000;        // XTILECFG + XTILEDATA
  }
  if (__get_cpuid_max(0, nullptr) >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = avx && ((b >> 5) & 1);
    f.avx512f = (b >> 16) & 1;
    f.avx512dq = (b >> 17) & 1;
    f.avx512bw = (b >> 30) & 1;
    f.avx512vl = (b >> 31) & 1;
    f.avx512_vnni = (c >> 11) & 1;
    f.gfni = (c >> 8) & 1;
    f.amx_bf16 = (d >> 22) & 1;
    f.amx_tile = (d >> 24) & 1;
    f.amx_int8 = (d >> 25) & 1;
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512_bf16 = (a >> 5) & 1;
  }
  if (f.amx_tile && f.os_amx) f.os_amx = request_amx_permission();
#endif
  return f;
}

Isa detect_level(const CpuFeatures& f) {
  if (!(f.avx2 && f.fma && f.f16c && f.os_ymm)) return Isa::Scalar;
  if (!(f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.os_zmm)) return Isa::Avx2;
  if (!f.avx512_vnni) return Isa::Avx512;
  if (!(f.amx_tile && f.amx_int8 && f.os_amx)) return Isa::Avx512Vnni;
  return Isa::Amx;
}

Isa capped_level() {
  Isa level = detected_isa();
  const char* scalar = std::getenv("CAIRN_SCALAR");
  if (scalar && scalar[0] == '1') return Isa::Scalar;
  if (const char* cap = std::getenv("CAIRN_ISA")) {
    // An unknown name caps at scalar: a typo must never silently test the fast path.
    const Isa want = parse_isa(cap).value_or(Isa::Scalar);
    if (static_cast<int>(want) < static_cast<int>(level)) level = want;
  }
  return level;
}

struct IsaName {
  Isa isa;
  const char* name;
};
constexpr IsaName kNames[] = {{Isa::Scalar, "scalar"},
                              {Isa::Avx2, "avx2"},
                              {Isa::Avx512, "avx512"},
                              {Isa::Avx512Vnni, "avx512vnni"},
                              {Isa::Amx, "amx"}};

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

Isa detected_isa() {
  static const Isa level = detect_level(cpu_features());
  return level;
}

Isa active_isa() {
  static const Isa level = capped_level();
  return level;
}

bool bf16_enabled() { return cpu_features().avx512_bf16 && isa_enabled(Isa::Avx512); }

bool gfni_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("CAIRN_GFNI");
    return cpu_features().gfni && isa_enabled(Isa::Avx512) &&
           !(env && std::string_view(env) == "off");
  }();
  return on;
}

const char* isa_name(Isa isa) {
  for (const IsaName& n : kNames)
    if (n.isa == isa) return n.name;
  return "unknown";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (const IsaName& n : kNames)
    if (name == n.name) return n.isa;
  return std::nullopt;
}

}  // namespace cairn
