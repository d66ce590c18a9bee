// The engine's matrix products. Built with GL_BLAS (the default): single-threaded OpenBLAS `cblas_sgemm` on
// tiles of the output fixed by the shape (tile_grid), spread over the engine's own pool; each tile is one call with
// the whole K, so an element's summation order depends on the shapes only, never on the thread count. Built with
// -DGL_BLAS=OFF: the engine's own tiles (simd.h), same guarantee. `naive`: the single-loop reference the
// bench measures against.
#include <algorithm>
#include <string>

#include "kernels.h"
#include "simd.h"

#if GL_HAVE_BLAS
#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

// OpenBLAS's run-time kernel choice (DYNAMIC_ARCH builds, as Debian's). Weak: a build for one CPU has none of them.
extern "C" {
__attribute__((weak)) char* openblas_get_corename(void);
__attribute__((weak)) void gotoblas_dynamic_init(void);
__attribute__((weak)) void gotoblas_dynamic_quit(void);
}
#endif

namespace gl::cpu {

namespace {
constexpr int64_t kTile = 256;

#if GL_HAVE_BLAS
// Row-major C (M,N) = α·op(A)·op(B) + β·C on this thread.
inline void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                  float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K), 1.0f, A, int(lda), B,
              int(ldb), beta, C, int(ldc));
}

// The output tiles of a product, from its shape alone (never the thread count): as large as kMaxTile² so that each
// call packs its panels of A and B few times (256² tiles spent a quarter of the time packing; whole matrices run 1.5×
// as fast), but at least kMinTiles when each can keep kTile² elements, so the pool has work to share. Sizes are
// multiples of 64: OpenBLAS then sums each element in the same order whatever the tile (its small-matrix kernels,
// which sum otherwise, only take products far smaller than a tile).
struct TileGrid {
  int64_t tm, tn, mb, nb;
};
TileGrid tile_grid(int64_t M, int64_t N) {
  constexpr int64_t kMaxTile = 1024, kMinTiles = 4;
  int64_t mb = (M + kMaxTile - 1) / kMaxTile, nb = (N + kMaxTile - 1) / kMaxTile;
  while (mb * nb < kMinTiles) {
    if (N / (nb + 1) >= kTile && (N / nb >= M / mb || M / (mb + 1) < kTile)) nb++;
    else if (M / (mb + 1) >= kTile) mb++;
    else break;
  }
  auto size = [](int64_t n, int64_t parts) { return std::max<int64_t>(64, ((n + parts - 1) / parts + 63) / 64 * 64); };
  const int64_t tm = size(M, mb), tn = size(N, nb);
  return {tm, tn, (M + tm - 1) / tm, (N + tn - 1) / tn};
}

// Tiles of C over the pool; op(A) is (M,K), op(B) is (K,N).
void tiled(ThreadPool& tp, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
           float* C, int64_t ldc, bool accumulate) {
  if (M == 0 || N == 0) return;
  const TileGrid g = tile_grid(M, N);
  const int64_t nb = g.nb;
  tp.parallel_for(g.mb * g.nb, [&](int64_t task) {
    const int64_t i0 = (task / nb) * g.tm, j0 = (task % nb) * g.tn;
    const int64_t mi = std::min(g.tm, M - i0), nj = std::min(g.tn, N - j0);
    const float* a = ta ? A + i0 : A + i0 * lda;
    const float* b = tb ? B + j0 * ldb : B + j0;
    float* c = C + i0 * ldc + j0;
    if (K == 0) {
      if (!accumulate)
        for (int64_t i = 0; i < mi; i++) std::fill(c + i * ldc, c + i * ldc + nj, 0.0f);
      return;
    }
    sgemm(ta, tb, mi, nj, K, a, lda, b, ldb, accumulate ? 1.0f : 0.0f, c, ldc);
  });
}
#else
constexpr int64_t kNtRows = 16, kNtCols = 64, kNnRows = 4, kNnCols = 128;  // simd.h's tile_nn takes ≤ 4 × 128
#endif
}  // namespace

bool blas_built() { return GL_HAVE_BLAS != 0; }

#if GL_HAVE_BLAS
namespace {
// A DYNAMIC_ARCH OpenBLAS picks its kernels from the CPU model it knows; one newer than the library (OpenBLAS 0.3.21
// on an Emerald Rapids, family 6 model 207) falls back to "Prescott", SSE3 kernels at a fifth of the speed. When the
// kernels it chose are narrower than the vectors simd.h found, it is re-initialised with the matching family
// (SkylakeX: AVX-512, Haswell: AVX2), once per process, before any GEMM; OPENBLAS_CORETYPE set by the user wins.
void fix_blas_kernels() {
  if (!openblas_get_corename || !gotoblas_dynamic_init || !gotoblas_dynamic_quit || std::getenv("OPENBLAS_CORETYPE")) return;
  const std::string core = openblas_get_corename();
  static const char* const wide512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
  static const char* const wide256[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"};
  const std::string lanes = simd().name;
  const char* want = nullptr;
  if (lanes == "avx512" && std::none_of(std::begin(wide512), std::end(wide512), [&](const char* c) { return core == c; })) want = "SkylakeX";
  if (lanes == "avx2" && std::none_of(std::begin(wide256), std::end(wide256), [&](const char* c) { return core == c; })) want = "Haswell";
  if (!want) return;
  setenv("OPENBLAS_CORETYPE", want, 0);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
}
}  // namespace
#endif


void gemm_init() {
  (void)simd();
#if GL_HAVE_BLAS
  static std::once_flag once;
  std::call_once(once, fix_blas_kernels);
  openblas_set_num_threads(1);  // our pool supplies the parallelism; every call runs on its caller's thread
#endif
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
#if GL_HAVE_BLAS
  tiled(tp, false, true, M, N, K, A, K, B, K, out, N, accumulate);
#else
  const int64_t mb = (M + kNtRows - 1) / kNtRows, nb = (N + kNtCols - 1) / kNtCols;
  tp.parallel_for(mb * nb, [&](int64_t task) {
    const int64_t m0 = (task / nb) * kNtRows, n0 = (task % nb) * kNtCols;
    simd().tile_nt(out, A, B, m0, std::min(M, m0 + kNtRows), n0, std::min(N, n0 + kNtCols), N, K, accumulate);
  });
#endif
}

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
#if GL_HAVE_BLAS
  tiled(tp, false, false, M, N, K, A, K, B, N, out, N, accumulate);
#else
  const int64_t mb = (M + kNnRows - 1) / kNnRows, nb = (N + kNnCols - 1) / kNnCols;
  tp.parallel_for(mb * nb, [&](int64_t task) {
    const int64_t m0 = (task / nb) * kNnRows, n0 = (task % nb) * kNnCols;
    simd().tile_nn(out, A, B, m0, std::min(M, m0 + kNnRows), n0, std::min(N, n0 + kNnCols), N, K, accumulate);
  });
#endif
}

void matmul_tn(ThreadPool& tp, float* out, const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool accumulate, bool naive,
               std::vector<float>* scratch) {
  if (naive) {
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        float s = 0;
        for (int64_t k = 0; k < K; k++) s += A[k * M + m] * B[k * N + n];
        out[m * N + n] = accumulate ? out[m * N + n] + s : s;
      }
    return;
  }
#if GL_HAVE_BLAS
  (void)scratch;
  tiled(tp, true, false, M, N, K, A, M, B, N, out, N, accumulate);
#else
  // Aᵀ materialised once, then the nn tiles.
  if (int64_t(scratch->size()) < M * K) scratch->resize(size_t(M * K));
  transpose(tp, scratch->data(), A, K, M);
  matmul_nn(tp, out, scratch->data(), B, M, N, K, accumulate, false);
#endif
}

void matmul_nt_rows(ThreadPool& tp, float* out, const float* A, const float* B, int64_t M, int64_t N, int64_t K) {
  constexpr int64_t kCols = 64;  // weight rows per task: a fixed split, so the thread count changes nothing
  const int64_t nb = (N + kCols - 1) / kCols;
  const SimdKernels& k = simd();
  tp.parallel_for(nb, [&](int64_t t) { k.skinny_nt(out, N, A, K, M, B, K, t * kCols, std::min(N, (t + 1) * kCols), K); });
}

void gemm_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                 float* C, int64_t ldc) {
#if GL_HAVE_BLAS
  sgemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
#else
  for (int64_t i = 0; i < M; i++) {
    float* c = C + i * ldc;
    if (beta == 0)
      std::fill(c, c + N, 0.0f);
    else if (beta != 1)
      for (int64_t j = 0; j < N; j++) c[j] *= beta;
    if (tb) {
      for (int64_t j = 0; j < N; j++) {
        float s = 0;
        for (int64_t k = 0; k < K; k++) s += (ta ? A[k * lda + i] : A[i * lda + k]) * B[j * ldb + k];
        c[j] += s;
      }
    } else {
      for (int64_t k = 0; k < K; k++) simd().axpy(c, B + k * ldb, ta ? A[k * lda + i] : A[i * lda + k], N);
    }
  }
#endif
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

}  // namespace gl::cpu

namespace gl {
std::string cpu_gemm_kernels() {
  cpu::gemm_init();
#if GL_HAVE_BLAS
  return std::string("OpenBLAS ") + (openblas_get_corename ? openblas_get_corename() : "");
#else
  return "built-in (GL_BLAS=OFF)";
#endif
}
}  // namespace gl
