// Picks the widest variant of simd_kernels.cpp this CPU (and its OS) runs; GL_SIMD overrides.
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "simd.h"

namespace gl::cpu {
namespace avx512 { extern const SimdKernels kKernels; }
namespace avx2 { extern const SimdKernels kKernels; }
namespace baseline { extern const SimdKernels kKernels; }

namespace {

bool has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}
bool has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

const SimdKernels& choose() {
  __builtin_cpu_init();
  const char* forced = std::getenv("GL_SIMD");
  if (forced && *forced) {
    const std::string f = forced;
    if (f == "baseline") return baseline::kKernels;
    if (f == "avx2") {
      if (!has_avx2()) throw std::runtime_error("GL_SIMD=avx2: this CPU lacks AVX2/FMA");
      return avx2::kKernels;
    }
    if (f == "avx512") {
      if (!has_avx512()) throw std::runtime_error("GL_SIMD=avx512: this CPU lacks AVX-512 (F, DQ, BW, VL)");
      return avx512::kKernels;
    }
    throw std::runtime_error("GL_SIMD must be avx512, avx2 or baseline, got \"" + f + "\"");
  }
  if (has_avx512()) return avx512::kKernels;
  if (has_avx2()) return avx2::kKernels;
  return baseline::kKernels;
}

}  // namespace

const SimdKernels& simd() {
  static const SimdKernels& k = choose();
  return k;
}

}  // namespace gl::cpu
