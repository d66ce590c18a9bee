#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace gl::cpu {

// ---- matmuls ----
// Tasks are (row block x column block) tiles of the output; each output element is a single
// sequential reduction over K, so results are independent of the thread count.

static constexpr int64_t kNtRows = 16, kNtCols = 64;

static inline float dot(const float* a, const float* b, int64_t K) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t k = 0; k < K; k++) s += a[k] * b[k];
  return s;
}

// 4 rows of A against 4 rows of B: 16 dot products sharing their loads.
static inline void dot4x4(float* out, int64_t ldo, const float* A, const float* B, int64_t K, bool acc) {
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

void matmul_nt(ThreadPool& tp, float* out, const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool accumulate, bool naive) {
  if (naive) {  // bench baseline: the straightforward loop
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        float s = 0;
        for (int64_t k = 0; k < K; k++) s += A[m * K + k] * B[n * K + k];
        out[m * N + n] = accumulate ? out[m * N + n] + s : s;
      }
    return;
  }
  const int64_t mb = (M + kNtRows - 1) / kNtRows, nb = (N + kNtCols - 1) / kNtCols;
  tp.parallel_for(mb * nb, [&](int64_t task) {
    const int64_t m0 = (task / nb) * kNtRows, n0 = (task % nb) * kNtCols;
    const int64_t m1 = std::min(M, m0 + kNtRows), n1 = std::min(N, n0 + kNtCols);
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
  });
}

static constexpr int64_t kNnRows = 4, kNnCols = 128;

void matmul_nn(ThreadPool& tp, float* out, const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool accumulate, bool naive) {
  if (naive) {
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        float s = 0;
        for (int64_t k = 0; k < K; k++) s += A[m * K + k] * B[k * N + n];
        out[m * N + n] = accumulate ? out[m * N + n] + s : s;
      }
    return;
  }
  const int64_t mb = (M + kNnRows - 1) / kNnRows, nb = (N + kNnCols - 1) / kNnCols;
  tp.parallel_for(mb * nb, [&](int64_t task) {
    const int64_t m0 = (task / nb) * kNnRows, n0 = (task % nb) * kNnCols;
    const int64_t rows = std::min(M, m0 + kNnRows) - m0, w = std::min(N, n0 + kNnCols) - n0;
    alignas(64) float acc[kNnRows][kNnCols];
    for (int64_t i = 0; i < rows; i++) std::memset(acc[i], 0, sizeof(float) * w);
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
      if (accumulate) for (int64_t j = 0; j < w; j++) o[j] += acc[i][j];
      else std::memcpy(o, acc[i], sizeof(float) * w);
    }
  });
}

void transpose(ThreadPool& tp, float* out, const float* in, int64_t M, int64_t N) {
  constexpr int64_t B = 32;
  const int64_t mb = (M + B - 1) / B, nb = (N + B - 1) / B;
  tp.parallel_for(mb * nb, [&](int64_t task) {
    const int64_t m0 = (task / nb) * B, n0 = (task % nb) * B;
    const int64_t m1 = std::min(M, m0 + B), n1 = std::min(N, n0 + B);
    for (int64_t m = m0; m < m1; m++)
      for (int64_t n = n0; n < n1; n++) out[n * M + m] = in[m * N + n];
  });
}

// ---- RMSNorm ----

static inline int64_t row_tasks(int64_t R, int64_t C) { return std::max<int64_t>(1, std::min<int64_t>(R, (R * C) / 4096 + 1)); }

void rmsnorm_forward(ThreadPool& tp, float* y, float* rstd, const float* x, const float* w, int64_t R, int64_t C, double eps) {
  const int64_t nt = row_tasks(R, C);
  tp.parallel_for(nt, [&](int64_t t) {
    for (int64_t r = R * t / nt; r < R * (t + 1) / nt; r++) {
      const float* xr = x + r * C;
      double ss = 0;
      for (int64_t c = 0; c < C; c++) ss += double(xr[c]) * xr[c];
      const float rs = float(1.0 / std::sqrt(ss / double(C) + eps));
      rstd[r] = rs;
      float* yr = y + r * C;
      for (int64_t c = 0; c < C; c++) yr[c] = (xr[c] * rs) * w[c];
    }
  });
}

// x̂ = x·rstd, y = x̂·w:  dx = rstd·(g − x̂·mean(g·x̂)) with g = dy·w;  dw = Σ_rows dy·x̂
void rmsnorm_backward(ThreadPool& tp, float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd, int64_t R, int64_t C) {
  const int64_t nt = row_tasks(R, C);
  tp.parallel_for(nt, [&](int64_t t) {
    for (int64_t r = R * t / nt; r < R * (t + 1) / nt; r++) {
      const float *xr = x + r * C, *dyr = dy + r * C;
      const float rs = rstd[r];
      double dot = 0;
      for (int64_t c = 0; c < C; c++) dot += double(dyr[c]) * w[c] * (xr[c] * rs);
      const float m = float(dot / double(C));
      float* dxr = dx + r * C;
      for (int64_t c = 0; c < C; c++) dxr[c] += rs * (dyr[c] * w[c] - (xr[c] * rs) * m);
    }
  });
  // Column sums stay serial over rows so the order is fixed.
  const int64_t ct = std::max<int64_t>(1, std::min<int64_t>(C / 16, tp.size()));
  tp.parallel_for(ct, [&](int64_t t) {
    const int64_t c0 = C * t / ct, c1 = C * (t + 1) / ct;
    for (int64_t r = 0; r < R; r++) {
      const float *xr = x + r * C, *dyr = dy + r * C;
      const float rs = rstd[r];
      for (int64_t c = c0; c < c1; c++) dw[c] += dyr[c] * (xr[c] * rs);
    }
  });
}

// ---- RoPE (rotate-half, as Hugging Face) ----
// out[i] = x[i]·cos − x[i+D/2]·sin ; out[i+D/2] = x[i+D/2]·cos + x[i]·sin ; angle = pos·inv_freq[i]

static void rope_apply(ThreadPool& tp, float* x, const int32_t* pos, const float* inv_freq, int64_t T, int64_t H, int64_t D, float sign) {
  const int64_t half = D / 2;
  const int64_t nt = row_tasks(T, H * D);
  tp.parallel_for(nt, [&](int64_t task) {
    std::vector<float> cs(half), sn(half);
    for (int64_t t = T * task / nt; t < T * (task + 1) / nt; t++) {
      for (int64_t i = 0; i < half; i++) {
        const float ang = float(pos[t]) * inv_freq[i];
        cs[i] = float(std::cos(double(ang)));
        sn[i] = sign * float(std::sin(double(ang)));
      }
      for (int64_t h = 0; h < H; h++) {
        float* r = x + (t * H + h) * D;
        for (int64_t i = 0; i < half; i++) {
          const float a = r[i], b = r[i + half];
          r[i] = a * cs[i] - b * sn[i];
          r[i + half] = b * cs[i] + a * sn[i];
        }
      }
    }
  });
}

void rope_forward(ThreadPool& tp, float* x, const int32_t* pos, const float* inv_freq, int64_t T, int64_t H, int64_t D) {
  rope_apply(tp, x, pos, inv_freq, T, H, D, 1.0f);
}
// The rotation's transpose is the rotation by −angle.
void rope_backward(ThreadPool& tp, float* d, const int32_t* pos, const float* inv_freq, int64_t T, int64_t H, int64_t D) {
  rope_apply(tp, d, pos, inv_freq, T, H, D, -1.0f);
}

// ---- SwiGLU ----

static inline float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }

void swiglu_forward(ThreadPool& tp, float* h, const float* g, const float* u, int64_t N) {
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(tp.size() * 4, N / 4096 + 1));
  tp.parallel_for(nt, [&](int64_t t) {
    for (int64_t i = N * t / nt; i < N * (t + 1) / nt; i++) h[i] = g[i] * sigmoidf(g[i]) * u[i];
  });
}

// d silu(g)/dg = σ(g)·(1 + g·(1 − σ(g)))
void swiglu_backward(ThreadPool& tp, float* dg, float* du, const float* dh, const float* g, const float* u, int64_t N) {
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(tp.size() * 4, N / 4096 + 1));
  tp.parallel_for(nt, [&](int64_t t) {
    for (int64_t i = N * t / nt; i < N * (t + 1) / nt; i++) {
      const float s = sigmoidf(g[i]);
      du[i] = dh[i] * g[i] * s;
      dg[i] = dh[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
    }
  });
}

}  // namespace gl::cpu
