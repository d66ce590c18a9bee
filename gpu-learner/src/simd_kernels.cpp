// The CPU engine's hot loops for one vector width (see simd.h). This file is compiled three times by
// CMakeLists.txt with GL_SIMD_LEVEL 3 (AVX-512, 16 lanes), 2 (AVX2 + FMA, 8 lanes) and 1 (SSE2, 4 lanes);
// each copy defines its own table, picked at run time by simd_dispatch.cpp. Vectors are GCC's generic
// vector types, so one source serves every width; FMA is explicit where the order of rounding matters.
#include <cmath>
#include <cstring>
#include <limits>

#include "simd.h"

#if GL_SIMD_LEVEL >= 2
#include <immintrin.h>
#endif

#if GL_SIMD_LEVEL == 3
#define GL_SIMD_NS avx512
#define GL_SIMD_NAME "avx512"
constexpr int W = 16, MR = 4, NR = 4;  // skinny_nt block: MR rows of A × NR rows of B, 16 accumulators of 32
#elif GL_SIMD_LEVEL == 2
#define GL_SIMD_NS avx2
#define GL_SIMD_NAME "avx2"
constexpr int W = 8, MR = 2, NR = 4;  // 8 accumulators of 16 registers
#elif GL_SIMD_LEVEL == 1
#define GL_SIMD_NS baseline
#define GL_SIMD_NAME "baseline"
constexpr int W = 4, MR = 2, NR = 4;
#else
#error "GL_SIMD_LEVEL must be 1, 2 or 3"
#endif

namespace gl::cpu::GL_SIMD_NS {
namespace {

typedef float vf __attribute__((vector_size(4 * W)));
typedef int32_t vi __attribute__((vector_size(4 * W)));
typedef double vd __attribute__((vector_size(8 * W)));

inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
inline vf splat(float x) { return vf{} + x; }
inline vi splati(int32_t x) { return vi{} + x; }

// a·b + c rounded once where the machine has FMA (the same instruction in every block shape).
inline vf fmadd(vf a, vf b, vf c) {
#if GL_SIMD_LEVEL == 3
  return _mm512_fmadd_ps(a, b, c);
#elif GL_SIMD_LEVEL == 2
  return _mm256_fmadd_ps(a, b, c);
#else
  return a * b + c;
#endif
}
inline float fmadd1(float a, float b, float c) {
#if GL_SIMD_LEVEL >= 2
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

// Lane sums in a fixed pairwise order.
inline float hsum(vf v) {
  float t[W];
  store(t, v);
  for (int w = W / 2; w >= 1; w /= 2)
    for (int i = 0; i < w; i++) t[i] += t[i + w];
  return t[0];
}
inline double hsumd(vd v) {
  double t[W];
  std::memcpy(t, &v, sizeof t);
  for (int w = W / 2; w >= 1; w /= 2)
    for (int i = 0; i < w; i++) t[i] += t[i + w];
  return t[0];
}

// exp on float lanes (Cephes expf: Cody-Waite reduction by ln 2, degree-6 polynomial, scale by 2^n):
// below 2 ulp relative; 0 below −87.3 (the smallest normal), +inf above 88.72, NaN kept.
inline vf vexp(vf x) {
  const vf hi = splat(88.72283f), lo = splat(-87.33654f);
  const vi is_nan = x != x, big = x > hi, small = x < lo;
  vf xc = small ? lo : x;
  xc = big ? hi : xc;
  const vf n = (xc * splat(1.44269504088896341f) + splat(12582912.0f)) - splat(12582912.0f);  // round(x·log2 e)
  vf r = xc - n * splat(0.693359375f);
  r = r - n * splat(-2.12194440e-4f);
  vf p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  p = p * (r * r) + r + splat(1.0f);
  const vi ni = __builtin_convertvector(n, vi);
  const vi over = ni > splati(127);  // n = 128 at the top of the range: 2^127 · 2
  const vi bits = ((over ? splati(127) : ni) + splati(127)) << 23;
  vf scale;
  std::memcpy(&scale, &bits, sizeof scale);
  vf res = p * scale;
  res = over ? res * splat(2.0f) : res;
  res = small ? splat(0.0f) : res;
  res = big ? splat(std::numeric_limits<float>::infinity()) : res;
  return is_nan ? x : res;
}

float vmax(const float* x, int64_t n) {
  vf m = splat(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const vf v = load(x + i);
    m = v > m ? v : m;
  }
  float t[W];
  store(t, m);
  float r = t[0];
  for (int k = 1; k < W; k++) r = t[k] > r ? t[k] : r;
  for (; i < n; i++) r = x[i] > r ? x[i] : r;
  return r;
}

double exp_store(float* y, const float* x, int64_t n, float shift, float scale, float mul) {
  vd acc = {};
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const vf e = vexp((load(x + i) - shift) * scale);
    acc += __builtin_convertvector(e, vd);
    if (y) store(y + i, e * mul);
  }
  if (i < n) {  // the tail as one more vector, unused lanes zeroed
    float t[W] = {};
    const int64_t r = n - i;
    std::memcpy(t, x + i, sizeof(float) * size_t(r));
    vf e = vexp((load(t) - shift) * scale);
    store(t, e);
    for (int64_t k = r; k < W; k++) t[k] = 0;
    e = load(t);
    acc += __builtin_convertvector(e, vd);
    if (y)
      for (int64_t k = 0; k < r; k++) y[i + k] = t[k] * mul;
  }
  return hsumd(acc);
}

// One R×C block of out = A·Bᵀ. Every element is the same instruction sequence whatever R and C are:
// lane-wise FMA over k in steps of W, a fixed pairwise lane sum, then the k tail in order.
template <int R, int C>
void skinny_block(float* out, int64_t ldo, const float* A, int64_t lda, const float* B, int64_t ldb, int64_t K) {
  vf acc[R][C];
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) acc[r][c] = vf{};
  int64_t k = 0;
  for (; k + W <= K; k += W) {
    vf a[R], b[C];
    for (int r = 0; r < R; r++) a[r] = load(A + r * lda + k);
    for (int c = 0; c < C; c++) b[c] = load(B + c * ldb + k);
    for (int r = 0; r < R; r++)
      for (int c = 0; c < C; c++) acc[r][c] = fmadd(a[r], b[c], acc[r][c]);
  }
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) {
      float s = hsum(acc[r][c]);
      for (int64_t kk = k; kk < K; kk++) s = fmadd1(A[r * lda + kk], B[c * ldb + kk], s);
      out[r * ldo + c] = s;
    }
}

using BlockFn = void (*)(float*, int64_t, const float*, int64_t, const float*, int64_t, int64_t);
#define GL_BLOCK_ROW(R) {skinny_block<R, 1>, skinny_block<R, 2>, skinny_block<R, 3>, skinny_block<R, 4>}
#if GL_SIMD_LEVEL == 3
constexpr BlockFn kBlocks[MR][NR] = {GL_BLOCK_ROW(1), GL_BLOCK_ROW(2), GL_BLOCK_ROW(3), GL_BLOCK_ROW(4)};
#else
constexpr BlockFn kBlocks[MR][NR] = {GL_BLOCK_ROW(1), GL_BLOCK_ROW(2)};
#endif
#undef GL_BLOCK_ROW


void skinny_nt(float* out, int64_t ldo, const float* A, int64_t lda, int64_t M, const float* B, int64_t ldb, int64_t j0, int64_t j1,
               int64_t K) {
  for (int64_t j = j0; j < j1; j += NR) {
    const int c = int(j1 - j < NR ? j1 - j : NR);
    for (int64_t m = 0; m < M; m += MR) {
      const int r = int(M - m < MR ? M - m : MR);
      kBlocks[r - 1][c - 1](out + m * ldo + j, ldo, A + m * lda, lda, B + j * ldb, ldb, K);
    }
  }
}

void axpy(float* y, const float* x, float a, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

void rmsnorm_rows(float* y, float* rstd, const float* x, const float* w, int64_t r0, int64_t r1, int64_t C, double eps) {
  for (int64_t r = r0; r < r1; r++) {
    const float* xr = x + r * C;
    double ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; c++) ss += double(xr[c]) * xr[c];
    const float rs = float(1.0 / std::sqrt(ss / double(C) + eps));
    rstd[r] = rs;
    float* yr = y + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; c++) yr[c] = (xr[c] * rs) * w[c];
  }
}

void rmsnorm_backward_rows(float* dx, const float* dy, const float* x, const float* w, const float* rstd, int64_t r0, int64_t r1, int64_t C) {
  for (int64_t r = r0; r < r1; r++) {
    const float *xr = x + r * C, *dyr = dy + r * C;
    const float rs = rstd[r];
    double dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < C; c++) dot += double(dyr[c] * w[c]) * (xr[c] * rs);
    const float m = float(dot / double(C));
    float* dxr = dx + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; c++) dxr[c] += rs * (dyr[c] * w[c] - (xr[c] * rs) * m);
  }
}

inline vf vsigmoid(vf g) { return splat(1.0f) / (splat(1.0f) + vexp(-g)); }

void swiglu(float* h, const float* g, const float* u, int64_t i0, int64_t i1) {
  int64_t i = i0;
  for (; i + W <= i1; i += W) {
    const vf gv = load(g + i);
    store(h + i, gv * vsigmoid(gv) * load(u + i));
  }
  if (i < i1) {
    float tg[W] = {}, tu[W] = {}, th[W];
    std::memcpy(tg, g + i, sizeof(float) * size_t(i1 - i));
    std::memcpy(tu, u + i, sizeof(float) * size_t(i1 - i));
    const vf gv = load(tg);
    store(th, gv * vsigmoid(gv) * load(tu));
    std::memcpy(h + i, th, sizeof(float) * size_t(i1 - i));
  }
}

// d silu(g)/dg = σ(g)·(1 + g·(1 − σ(g)))
void swiglu_backward(float* dg, float* du, const float* dh, const float* g, const float* u, int64_t i0, int64_t i1) {
  auto one = [](vf dhv, vf gv, vf uv, vf* dgo, vf* duo) {
    const vf s = vsigmoid(gv);
    *duo = dhv * gv * s;
    *dgo = dhv * uv * s * (splat(1.0f) + gv * (splat(1.0f) - s));
  };
  int64_t i = i0;
  for (; i + W <= i1; i += W) {
    vf a, b;
    one(load(dh + i), load(g + i), load(u + i), &a, &b);
    store(dg + i, a);
    store(du + i, b);
  }
  if (i < i1) {
    const size_t n = size_t(i1 - i);
    float th[W] = {}, tg[W] = {}, tu[W] = {}, ta[W], tb[W];
    std::memcpy(th, dh + i, sizeof(float) * n);
    std::memcpy(tg, g + i, sizeof(float) * n);
    std::memcpy(tu, u + i, sizeof(float) * n);
    vf a, b;
    one(load(th), load(tg), load(tu), &a, &b);
    store(ta, a);
    store(tb, b);
    std::memcpy(dg + i, ta, sizeof(float) * n);
    std::memcpy(du + i, tb, sizeof(float) * n);
  }
}

// ---- the no-BLAS GEMM tiles (GL_BLAS=OFF): each output element one sequential reduction over K ----

inline float dot(const float* a, const float* b, int64_t K) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t k = 0; k < K; k++) s += a[k] * b[k];
  return s;
}

// 4 rows of A against 4 rows of B: 16 dot products sharing their loads.
inline void dot4x4(float* out, int64_t ldo, const float* A, const float* B, int64_t K, bool acc) {
  const float *a0 = A, *a1 = A + K, *a2 = A + 2 * K, *a3 = A + 3 * K;
  const float *b0 = B, *b1 = B + K, *b2 = B + 2 * K, *b3 = B + 3 * K;
  float s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0;
  float s20 = 0, s21 = 0, s22 = 0, s23 = 0, s30 = 0, s31 = 0, s32 = 0, s33 = 0;
#pragma omp simd reduction(+ : s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23, s30, s31, s32, s33)
  for (int64_t k = 0; k < K; k++) {
    const float x0 = a0[k], x1 = a1[k], x2 = a2[k], x3 = a3[k];
    const float y0 = b0[k], y1 = b1[k], y2 = b2[k], y3 = b3[k];
    s00 += x0 * y0; s01 += x0 * y1; s02 += x0 * y2; s03 += x0 * y3;
    s10 += x1 * y0; s11 += x1 * y1; s12 += x1 * y2; s13 += x1 * y3;
    s20 += x2 * y0; s21 += x2 * y1; s22 += x2 * y2; s23 += x2 * y3;
    s30 += x3 * y0; s31 += x3 * y1; s32 += x3 * y2; s33 += x3 * y3;
  }
  const float s[4][4] = {{s00, s01, s02, s03}, {s10, s11, s12, s13}, {s20, s21, s22, s23}, {s30, s31, s32, s33}};
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) out[i * ldo + j] = acc ? out[i * ldo + j] + s[i][j] : s[i][j];
}

void tile_nt(float* out, const float* A, const float* B, int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t N, int64_t K, bool accumulate) {
  int64_t m = m0;
  for (; m + 4 <= m1; m += 4) {
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) dot4x4(out + m * N + n, N, A + m * K, B + n * K, K, accumulate);
    for (; n < n1; n++)
      for (int64_t i = 0; i < 4; i++) {
        const float s = dot(A + (m + i) * K, B + n * K, K);
        float& o = out[(m + i) * N + n];
        o = accumulate ? o + s : s;
      }
  }
  for (; m < m1; m++)
    for (int64_t n = n0; n < n1; n++) {
      const float s = dot(A + m * K, B + n * K, K);
      float& o = out[m * N + n];
      o = accumulate ? o + s : s;
    }
}

constexpr int64_t kNnRows = 4, kNnCols = 128;

void tile_nn(float* out, const float* A, const float* B, int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t N, int64_t K, bool accumulate) {
  const int64_t rows = m1 - m0, w = n1 - n0;
  alignas(64) float acc[kNnRows][kNnCols];
  for (int64_t i = 0; i < rows; i++) std::memset(acc[i], 0, sizeof(float) * size_t(w));
  if (rows == 4) {
    float *c0 = acc[0], *c1 = acc[1], *c2 = acc[2], *c3 = acc[3];
    for (int64_t k = 0; k < K; k++) {
      const float a0 = A[m0 * K + k], a1 = A[(m0 + 1) * K + k], a2 = A[(m0 + 2) * K + k], a3 = A[(m0 + 3) * K + k];
      const float* b = B + k * N + n0;
#pragma omp simd
      for (int64_t j = 0; j < w; j++) {
        const float bj = b[j];
        c0[j] += a0 * bj; c1[j] += a1 * bj; c2[j] += a2 * bj; c3[j] += a3 * bj;
      }
    }
  } else {
    for (int64_t i = 0; i < rows; i++) {
      float* c = acc[i];
      for (int64_t k = 0; k < K; k++) {
        const float a = A[(m0 + i) * K + k];
        const float* b = B + k * N + n0;
#pragma omp simd
        for (int64_t j = 0; j < w; j++) c[j] += a * b[j];
      }
    }
  }
  for (int64_t i = 0; i < rows; i++) {
    float* o = out + (m0 + i) * N + n0;
    if (accumulate)
      for (int64_t j = 0; j < w; j++) o[j] += acc[i][j];
    else
      std::memcpy(o, acc[i], sizeof(float) * size_t(w));
  }
}

}  // namespace

extern const SimdKernels kKernels = {GL_SIMD_NAME, W, vmax, exp_store, skinny_nt, axpy, rmsnorm_rows, rmsnorm_backward_rows,
                                     swiglu, swiglu_backward, tile_nt, tile_nn};

}  // namespace gl::cpu::GL_SIMD_NS
