// gl-emu: __nv_bfloat16. bf16 mode stores 16 bits and rounds to nearest even exactly as the GPU's
// cvt.rn.bf16.f32 (NaN → canonical 0x7FFF); exact mode (GL_EMU_EXACT) stores fp32, so CUDA-vs-CPU
// differences are maths only.
#pragma once
#include <cstdint>
#include <cstring>

#include "gl_emu.h"

struct __nv_bfloat16 {
#ifdef GL_EMU_EXACT
  float v;
#else
  uint16_t bits;
#endif
  __nv_bfloat16() = default;
  inline __nv_bfloat16(float f);
  inline operator float() const;
};
typedef __nv_bfloat16 nv_bfloat16;

namespace gl_emu {
inline uint16_t bf16_bits_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);                      // round to nearest, ties to even (overflow → inf)
  return uint16_t(u >> 16);
}
inline float bf16_bits_to_float(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace gl_emu

#ifdef GL_EMU_EXACT
inline __nv_bfloat16::__nv_bfloat16(float f) : v(f) {}
inline __nv_bfloat16::operator float() const { return v; }
#else
inline __nv_bfloat16::__nv_bfloat16(float f) : bits(gl_emu::bf16_bits_rn(f)) {}
inline __nv_bfloat16::operator float() const { return gl_emu::bf16_bits_to_float(bits); }
#endif

inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return float(b); }
