// gl-emu self-test: every check the emulator claims (launch limits, divergent barriers, exited lanes, deadlock,
// canaries, NaN-filled fresh memory, bounds-checked copies and GEMMs, cuBLAS's argument rules, bf16 rounding,
// warp collective semantics) fires on a kernel or call written to trip it, and stays quiet on a correct one.
// Built like the engine's .cu files (rewrite + g++); prints one line per case, exits 1 if any case fails.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gl_emu_api.h"

namespace {

int g_failed = 0, g_cases = 0;

void expect(const std::string& name, bool ok, const std::string& detail = "") {
  g_cases++;
  if (!ok) g_failed++;
  std::printf("%-58s %s%s%s\n", name.c_str(), ok ? "ok" : "FAIL", detail.empty() ? "" : "  ", detail.c_str());
}

// Runs f (which launches or calls), expects an error whose diagnosis contains `want`; clears errors after.
void expect_error(const std::string& name, const std::function<void()>& f, const std::string& want) {
  gl_emu::reset_errors();
  f();
  const cudaError_t e = cudaGetLastError();
  const std::string d = gl_emu::last_error_detail();
  expect(name, e != cudaSuccess && d.find(want) != std::string::npos, d.empty() ? "(no error)" : d);
  gl_emu::reset_errors();
}
void expect_clean(const std::string& name, const std::function<void()>& f) {
  gl_emu::reset_errors();
  f();
  const cudaError_t e = cudaGetLastError();
  expect(name, e == cudaSuccess, gl_emu::last_error_detail());
  gl_emu::reset_errors();
}

__global__ void noop_kernel(int* p) {
  if (p && threadIdx.x == 0) p[0] = 1;
}

__global__ void divergent_barrier_kernel() {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
}

__global__ void exited_barrier_kernel() {
  if (threadIdx.x == 3) return;
  __syncthreads();
}

__global__ void exited_lane_shuffle_kernel(float* out) {
  float v = float(threadIdx.x);
  if (threadIdx.x == 5) return;
  v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

__global__ void deadlock_kernel(float* out) {
  float v = float(threadIdx.x);
  if (threadIdx.x < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
  else __syncthreads();
  out[threadIdx.x] = v;
}

__global__ void static_smem_overflow_kernel() {
  __shared__ float sh[32];
  sh[threadIdx.x] = 1.0f;  // launched with 64 threads
  __syncthreads();
}

__global__ void dynamic_smem_overflow_kernel(int n) {
  extern __shared__ float dyn[];
  if (threadIdx.x == 0) dyn[n] = 1.0f;
}

__global__ void global_overrun_kernel(float* p, int n) {
  if (threadIdx.x == 0) p[n] = 1.0f;
}

__global__ void copy_smem_kernel(float* out, const float* in, int n) {
  extern __shared__ float tile[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) tile[i] = in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = tile[n - 1 - i];
}

__global__ void warp_ops_kernel(int* out) {
  const int lane = threadIdx.x & 31;
  out[0 * 32 + lane] = __shfl_sync(0xffffffffu, lane * 10, 3);
  out[1 * 32 + lane] = __shfl_xor_sync(0xffffffffu, lane * 10, 5);
  out[2 * 32 + lane] = __shfl_up_sync(0xffffffffu, lane * 10, 2);
  out[3 * 32 + lane] = __shfl_down_sync(0xffffffffu, lane * 10, 2);
  out[4 * 32 + lane] = __any_sync(0xffffffffu, lane == 17);
  out[5 * 32 + lane] = __all_sync(0xffffffffu, lane < 31);
  out[6 * 32 + lane] = int(__ballot_sync(0xffffffffu, lane % 4 == 0));
  out[7 * 32 + lane] = __shfl_xor_sync(0xffffffffu, lane * 10, 1, 8);
}

// A missing barrier a forward schedule hides: each thread reads what the thread before it wrote.
__global__ void missing_barrier_kernel(float* out) {
  __shared__ float sh[64];
  sh[threadIdx.x] = float(threadIdx.x);
  if (threadIdx.x > 0) out[threadIdx.x] = sh[threadIdx.x - 1];
}

__global__ void atomic_sum_kernel(float* sum, int* count) {
  atomicAdd(sum, 0.1f * float(threadIdx.x + blockIdx.x));
  atomicAdd(count, 1);
}

float bf(float x) { return float(__float2bfloat16(x)); }
uint16_t bits(float x) {
  __nv_bfloat16 b = __float2bfloat16(x);
  uint16_t u;
  std::memcpy(&u, &b, 2);
  return u;
}

}  // namespace

int main() {
  // ---- launch configuration, as the GPU checks it
  expect_error("blockDim of 1025 threads", [] { noop_kernel<<<1, 1025>>>(nullptr); }, "blockDim (1025,1,1) exceeds");
  expect_error("blockDim 64×32 = 2048 threads", [] { noop_kernel<<<1, dim3(64, 32)>>>(nullptr); }, "threads per block exceed 1024");
  expect_error("gridDim.y = 65536", [] { noop_kernel<<<dim3(1, 65536), 32>>>(nullptr); }, "gridDim.y=65536 exceeds 65535");
  expect_error("gridDim.x = 0", [] { noop_kernel<<<0, 32>>>(nullptr); }, "has a 0 component");
  expect_error("64 KB dynamic shared memory without the attribute", [] { copy_smem_kernel<<<1, 128, 64 * 1024>>>(nullptr, nullptr, 0); },
               "need cudaFuncSetAttribute");
  expect_error("attribute above the device's opt-in limit",
               [] { cudaFuncSetAttribute(copy_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024); }, "opt-in limit");
  {
    const int n = 16 * 1024;  // 64 KB of floats through shared memory, after opting in
    std::vector<float> h(n), back(n);
    for (int i = 0; i < n; i++) h[size_t(i)] = float(i);
    float *in = nullptr, *out = nullptr;
    cudaMalloc(&in, n * 4);
    cudaMalloc(&out, n * 4);
    cudaMemcpy(in, h.data(), n * 4, cudaMemcpyHostToDevice);
    expect_clean("64 KB dynamic shared memory after opting in", [&] {
      cudaFuncSetAttribute(copy_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n * 4);
      copy_smem_kernel<<<1, 256, size_t(n) * 4>>>(out, in, n);
    });
    cudaMemcpy(back.data(), out, n * 4, cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int i = 0; i < n; i++) ok = ok && back[size_t(i)] == float(n - 1 - i);
    expect("  ... and the data went through it", ok);
    cudaFree(in);
    cudaFree(out);
  }

  // ---- scheduling: divergence, exited threads, deadlock
  expect_error("divergent __syncthreads", [] { divergent_barrier_kernel<<<1, 64>>>(); }, "divergent __syncthreads");
  expect_error("__syncthreads after a thread exited", [] { exited_barrier_kernel<<<1, 64>>>(); }, "have exited");
  float* dbuf = nullptr;
  cudaMalloc(&dbuf, 64 * 4);
  expect_error("shuffle naming an exited lane", [&] { exited_lane_shuffle_kernel<<<1, 32>>>(dbuf); }, "which has exited");
  expect_error("shuffle vs barrier in one warp", [&] { deadlock_kernel<<<1, 32>>>(dbuf); }, "deadlock");

  // ---- canaries and fresh memory
  expect_error("static __shared__ array overrun", [] { static_smem_overflow_kernel<<<1, 64>>>(); }, "canary");
  expect_error("dynamic shared memory overrun", [] { dynamic_smem_overflow_kernel<<<1, 32, 256>>>(64); }, "canary");
  expect_error("global memory written past an allocation", [&] { global_overrun_kernel<<<1, 32>>>(dbuf, 64); }, "past the end");
  {
    float* fresh = nullptr;
    cudaMalloc(&fresh, 16 * 4);
    float h[16];
    cudaMemcpy(h, fresh, sizeof h, cudaMemcpyDeviceToHost);
    bool nan = true;
    for (float x : h) nan = nan && std::isnan(x);
    expect("fresh device memory reads as NaN", nan);
    cudaFree(fresh);
  }

  // ---- copies against allocations and named buffers
  std::vector<float> host(128, 1.0f);
  expect_error("cudaMemcpy past the end of an allocation", [&] { cudaMemcpy(dbuf, host.data(), 65 * 4, cudaMemcpyHostToDevice); }, "overrun");
  expect_error("cudaMemcpy with the wrong direction", [&] { cudaMemcpy(host.data(), dbuf, 4, cudaMemcpyHostToDevice); }, "destination is host");
  {
    char* arena = nullptr;
    cudaMalloc(&arena, 4096);
    gl_emu::name_range(arena, 16, "offs");
    gl_emu::name_range(arena + 256 + gl_emu::kArenaGuard, 1024, "lnf");
    expect_error("copy overrunning a named arena buffer", [&] { cudaMemcpy(arena, host.data(), 20, cudaMemcpyHostToDevice); }, "arena buffer 'offs'");
    expect_clean("copy inside a named arena buffer", [&] { cudaMemcpy(arena, host.data(), 16, cudaMemcpyHostToDevice); });
    cudaFree(arena);
  }

  // ---- cuBLAS: argument rules, operand bounds, the product itself
  {
    cublasHandle_t h;
    cublasCreate(&h);
    const int m = 3, n = 4, k = 5;
    std::vector<float> A(size_t(m * k)), B(size_t(k * n)), C(size_t(m * n));
    for (size_t i = 0; i < A.size(); i++) A[i] = float(i % 7) - 3.0f;
    for (size_t i = 0; i < B.size(); i++) B[i] = float(i % 5) * 0.5f - 1.0f;
    float *dA, *dB, *dC;
    cudaMalloc(&dA, A.size() * 4);
    cudaMalloc(&dB, B.size() * 4);
    cudaMalloc(&dC, C.size() * 4);
    const float one = 1.0f, zero = 0.0f;
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        // column-major op(A) (m,k), op(B) (k,n); stored A is (m,k) for N, (k,m) for T
        const int lda = ta ? k : m, ldb = tb ? n : k;
        cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dB, B.data(), B.size() * 4, cudaMemcpyHostToDevice);
        const cublasStatus_t st = cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &one, dA, CUDA_R_32F, lda, dB,
                                               CUDA_R_32F, ldb, &zero, dC, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        cudaMemcpy(C.data(), dC, C.size() * 4, cudaMemcpyDeviceToHost);
        double err = 0;
        for (int i = 0; i < m; i++)
          for (int j = 0; j < n; j++) {
            double s = 0;
            for (int l = 0; l < k; l++) s += double(ta ? A[size_t(l + i * lda)] : A[size_t(i + l * lda)]) * double(tb ? B[size_t(j + l * ldb)] : B[size_t(l + j * ldb)]);
            err = std::max(err, std::fabs(s - C[size_t(i + j * m)]));
          }
        expect(std::string("GEMM ") + (ta ? "T" : "N") + (tb ? "T" : "N") + " matches the naive product", st == CUBLAS_STATUS_SUCCESS && err < 1e-5);
      }
    gl_emu::reset_errors();
    const cublasStatus_t bad_ld = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA, CUDA_R_32F, m - 1, dB, CUDA_R_32F, k, &zero, dC,
                                               CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    expect("GEMM lda < m for transa=N is CUBLAS_STATUS_INVALID_VALUE", bad_ld == CUBLAS_STATUS_INVALID_VALUE, gl_emu::last_error_detail());
    gl_emu::reset_errors();
    const cublasStatus_t bad_ext = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k + 1, &one, dA, CUDA_R_32F, m, dB, CUDA_R_32F, k + 1, &zero, dC,
                                                CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    expect("GEMM operand past its allocation fails", bad_ext == CUBLAS_STATUS_EXECUTION_FAILED &&
                                                          gl_emu::last_error_detail().find("operand A") != std::string::npos,
           gl_emu::last_error_detail());
    gl_emu::reset_errors();
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    cublasDestroy(h);
  }

  // ---- bf16 rounding as the GPU stores it
  if (std::string(gl_emu::precision()) == "bf16") {
    expect("bf16: 1 + 2^-8 (a tie) rounds to even 1.0", bf(1.00390625f) == 1.0f);
    expect("bf16: 1 + 3·2^-8 (a tie) rounds to even 1.015625", bf(1.01171875f) == 1.015625f);
    expect("bf16: just above a tie rounds up", bf(std::nextafter(1.00390625f, 2.0f)) == 1.0078125f);
    expect("bf16: NaN is the canonical 0x7FFF", bits(NAN) == 0x7fff);
    expect("bf16: FLT_MAX overflows to +inf", bits(3.4028235e38f) == 0x7f80);
    expect("bf16: denormals kept", bf(1e-39f) > 0.0f);
  }

  // ---- warp collectives and ordered atomics
  {
    int* d;
    cudaMalloc(&d, 8 * 32 * 4);
    warp_ops_kernel<<<1, 32>>>(d);
    int h[8 * 32];
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int l = 0; l < 32; l++) {
      ok = ok && h[l] == 30 && h[32 + l] == (l ^ 5) * 10 && h[64 + l] == (l >= 2 ? l - 2 : l) * 10 && h[96 + l] == (l < 30 ? l + 2 : l) * 10;
      ok = ok && h[128 + l] == 1 && h[160 + l] == 0 && unsigned(h[192 + l]) == 0x11111111u && h[224 + l] == (l ^ 1) * 10;
    }
    expect("shfl / xor / up / down / any / all / ballot / width 8", ok);
    float* sum;
    int* count;
    cudaMalloc(&sum, 4);
    cudaMalloc(&count, 4);
    cudaMemset(sum, 0, 4);
    cudaMemset(count, 0, 4);
    atomic_sum_kernel<<<7, 96>>>(sum, count);
    float s;
    int c;
    cudaMemcpy(&s, sum, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&c, count, 4, cudaMemcpyDeviceToHost);
    float want = 0;  // block by block, thread by thread: the emulator's fixed order
    for (int b = 0; b < 7; b++)
      for (int t = 0; t < 96; t++) want += 0.1f * float(t + b);
    expect("atomics applied in block, thread order", c == 7 * 96 && s == want);
    cudaFree(d);
    cudaFree(sum);
    cudaFree(count);
  }
  // ---- reverse order exposes what forward order hides
  {
    float* d;
    cudaMalloc(&d, 64 * 4);
    float fwd[64], rev[64];
    gl_emu::set_reverse_order(false);
    missing_barrier_kernel<<<1, 64>>>(d);
    cudaMemcpy(fwd, d, sizeof fwd, cudaMemcpyDeviceToHost);
    gl_emu::set_reverse_order(true);
    missing_barrier_kernel<<<1, 64>>>(d);
    cudaMemcpy(rev, d, sizeof rev, cudaMemcpyDeviceToHost);
    gl_emu::set_reverse_order(false);
    bool fwd_ok = true, rev_nan = false;
    for (int i = 1; i < 64; i++) fwd_ok = fwd_ok && fwd[i] == float(i - 1), rev_nan = rev_nan || std::isnan(rev[i]);
    expect("missing barrier: hidden in forward order, NaN in reverse", fwd_ok && rev_nan);
    cudaFree(d);
  }
  cudaFree(dbuf);
  std::printf("%d of %d cases passed\n%s\n", g_cases - g_failed, g_cases, g_failed ? "SELFTEST FAIL" : "SELFTEST PASS");
  return g_failed ? 1 : 0;
}
