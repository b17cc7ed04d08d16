// core/simd.h — the one include for x86 intrinsics in cairn.
// GCC 12's AVX-512 headers initialise "undefined" vectors from themselves,
// which -Wuninitialized / -Wmaybe-uninitialized report (as errors, under
// -Werror) wherever those intrinsics are inlined; the warnings are silenced for
// the header's own lines only, so cairn's code keeps them.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
#endif

// A function compiled for the instruction sets `isa` (a target attribute
// string) without floating-point contraction: the kernels replay the scalar
// reference's roundings, and a multiply fused into a later add would change
// them. GCC takes that per function; clang only per file, so including this
// header turns contraction off for the rest of the file.
#if defined(__clang__)
#pragma clang fp contract(off)
#define CAIRN_SIMD_FN(isa) __attribute__((target(isa)))
#else
#define CAIRN_SIMD_FN(isa) __attribute__((target(isa), optimize("fp-contract=off")))
#endif
