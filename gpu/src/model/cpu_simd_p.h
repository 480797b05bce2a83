// Private to the CPU kernel files (gpu/src/model/cpu_kernels.cpp, cpu_elementwise.cpp): the x86
// intrinsics, KVWB_X86_AVX512 where they build, and the warnings their inlining gives turned off.
#pragma once

// GCC 12's AVX-512 intrinsics start some results from a self-initialised "undefined" vector,
// which its flow analysis reports as uninitialised once they are inlined under target
// attributes; the headers (torch's among them) are read before any line of the kernel files' own.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KVWB_X86_AVX512 1
#endif
