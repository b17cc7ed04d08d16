// core/simd.h — the one include for x86 intrinsics in cairn.
// GCC 12's AVX-512 headers initialise "undefined" vectors from themselves,
// which -Wuninitialized / -Wmaybe-uninitialized report (as errors, under
// -Werror) wherever those intrinsics are inlined; the warnings are silenced for
// the header's own lines only, so cairn's code keeps them.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
