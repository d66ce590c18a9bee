// Row and element-wise kernels: the split into tasks depends on the shapes only (never on the thread count).
#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "simd.h"

namespace gl::cpu {

static inline int64_t row_tasks(int64_t R, int64_t C) { return std::max<int64_t>(1, std::min<int64_t>(R, (R * C) / 4096 + 1)); }

// ---- RMSNorm ----

void rmsnorm_forward(ThreadPool& tp, float* y, float* rstd, const float* x, const float* w, int64_t R, int64_t C, double eps) {
  const int64_t nt = row_tasks(R, C);
  const SimdKernels& k = simd();
  tp.parallel_for(nt, [&](int64_t t) { k.rmsnorm_rows(y, rstd, x, w, R * t / nt, R * (t + 1) / nt, C, eps); });
}

// x̂ = x·rstd, y = x̂·w:  dx = rstd·(g − x̂·mean(g·x̂)) with g = dy·w;  dw = Σ_rows dy·x̂
void rmsnorm_backward(ThreadPool& tp, float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd, int64_t R, int64_t C) {
  const int64_t nt = row_tasks(R, C);
  const SimdKernels& k = simd();
  tp.parallel_for(nt, [&](int64_t t) { k.rmsnorm_backward_rows(dx, dy, x, w, rstd, R * t / nt, R * (t + 1) / nt, C); });
  // Column sums stay serial over rows so the order is fixed; columns split in a fixed number of ranges.
  const int64_t ct = std::max<int64_t>(1, std::min<int64_t>(C / 16, 8));
  tp.parallel_for(ct, [&](int64_t t) {
    const int64_t c0 = C * t / ct, c1 = C * (t + 1) / ct;
    for (int64_t r = 0; r < R; r++) {
      const float *xr = x + r * C, *dyr = dy + r * C;
      const float rs = rstd[r];
#pragma omp simd
      for (int64_t c = c0; c < c1; c++) dw[c] += dyr[c] * (xr[c] * rs);
    }
  });
}

// ---- RoPE (rotate-half, as Hugging Face) ----
// out[i] = x[i]·cos − x[i+D/2]·sin ; out[i+D/2] = x[i+D/2]·cos + x[i]·sin ; cos/sin from the cached table.

static void rope_apply(ThreadPool& tp, float* x, const int32_t* pos, const RopeTable& tab, int64_t T, int64_t H, int64_t D, float sign) {
  const int64_t half = D / 2;
  const int64_t nt = row_tasks(T, H * D);
  tp.parallel_for(nt, [&](int64_t task) {
    for (int64_t t = T * task / nt; t < T * (task + 1) / nt; t++) {
      const float* cs = tab.cos.data() + int64_t(pos[t]) * half;
      const float* sn = tab.sin.data() + int64_t(pos[t]) * half;
      for (int64_t h = 0; h < H; h++) {
        float* r = x + (t * H + h) * D;
#pragma omp simd
        for (int64_t i = 0; i < half; i++) {
          const float a = r[i], b = r[i + half], s = sign * sn[i];
          r[i] = a * cs[i] - b * s;
          r[i + half] = b * cs[i] + a * s;
        }
      }
    }
  });
}

void rope_forward(ThreadPool& tp, float* x, const int32_t* pos, const RopeTable& tab, int64_t T, int64_t H, int64_t D) {
  rope_apply(tp, x, pos, tab, T, H, D, 1.0f);
}
// The rotation's transpose is the rotation by −angle.
void rope_backward(ThreadPool& tp, float* d, const int32_t* pos, const RopeTable& tab, int64_t T, int64_t H, int64_t D) {
  rope_apply(tp, d, pos, tab, T, H, D, -1.0f);
}

// ---- SwiGLU ----

static int64_t elem_tasks(int64_t N) { return std::max<int64_t>(1, std::min<int64_t>(64, N / 16384 + 1)); }

void swiglu_forward(ThreadPool& tp, float* h, const float* g, const float* u, int64_t N) {
  const int64_t nt = elem_tasks(N);
  const SimdKernels& k = simd();
  tp.parallel_for(nt, [&](int64_t t) { k.swiglu(h, g, u, N * t / nt, N * (t + 1) / nt); });
}

void swiglu_backward(ThreadPool& tp, float* dg, float* du, const float* dh, const float* g, const float* u, int64_t N) {
  const int64_t nt = elem_tasks(N);
  const SimdKernels& k = simd();
  tp.parallel_for(nt, [&](int64_t t) { k.swiglu_backward(dg, du, dh, g, u, N * t / nt, N * (t + 1) / nt); });
}

}  // namespace gl::cpu
