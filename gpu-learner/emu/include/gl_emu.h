// gl-emu: a test-only CUDA-on-CPU emulator for gpu-learner's CUDA sources (never in the runtime path).
// The real .cu files compile with g++ against these headers after a mechanical rewrite (emu/rewrite.mjs:
// `k<<<g, b, smem, s>>>(args)` → a Launch, `__shared__` → per-block shared memory). Every CUDA thread of a
// block is a fiber on one OS thread; __syncthreads() and warp collectives are scheduling points.
// Compile-time modes: GL_EMU_EXACT (bf16 storage is fp32), AddressSanitizer (-fsanitize=address).
// Run-time modes (environment): GL_EMU_ORDER=reverse, GL_EMU_DRY=1 (validate only), GL_EMU_THREADS=n.
#pragma once
#define GL_CUDA_EMU 1

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- CUDA qualifiers: plain C++ on the host ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// ---- runtime API types (the subset gpu-learner uses; values as in CUDA 12/13) ----
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInsufficientDriver = 35,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoKernelImageForDevice = 209,
  cudaErrorUnsupportedPtxVersion = 222,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorLaunchFailure = 719,
};
typedef cudaError_t cudaError;
struct CUstream_st;
typedef CUstream_st* cudaStream_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin;
  int warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], major, minor, multiProcessorCount;
};

cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDevice(int* dev);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int dev);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s = nullptr);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s = nullptr);
cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);
template <class T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}

namespace gl_emu {

// Where a kernel waits (barrier / warp collective), for divergence reports.
struct Site {
  const char* file;
  int line;
};

// ---- run-time state read by the device built-ins (set by the scheduler before a fiber runs) ----
extern thread_local uint3 t_thread_idx;
extern thread_local uint3 t_block_idx;
extern thread_local dim3 t_block_dim, t_grid_dim;

cudaError_t func_set_attribute(const void* fn, cudaFuncAttribute attr, int value);

// One kernel launch: validates the configuration like the GPU, then runs every block (or, in dry-run
// mode, only counts it). The rewrite turns `k<<<cfg>>>(args)` into `Launch("k", file, line, cfg).run(k, args)`.
class Launch {
 public:
  Launch(const char* name, const char* file, int line, dim3 grid, dim3 block, size_t smem = 0, cudaStream_t s = nullptr)
      : name_(name), file_(file), line_(line), grid_(grid), block_(block), smem_(smem), stream_(s) {}
  template <class... P, class... A>
  void run(void (*kernel)(P...), A&&... a) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    if (!validate(reinterpret_cast<const void*>(kernel))) return;
    // Kernel parameters are copied at launch, as on the GPU.
    std::tuple<std::decay_t<P>...> args(static_cast<std::decay_t<P>>(std::forward<A>(a))...);
    struct Body {
      static void call(void* k, void* t) { std::apply(reinterpret_cast<void (*)(P...)>(k), *static_cast<std::tuple<std::decay_t<P>...>*>(t)); }
    };
    execute(&Body::call, reinterpret_cast<void*>(kernel), &args);
  }

 private:
  bool validate(const void* fn);
  void execute(void (*call)(void*, void*), void* kernel, void* args);
  const char *name_, *file_;
  int line_;
  dim3 grid_, block_;
  size_t smem_;
  cudaStream_t stream_;
};

// ---- shared memory ----
void* dynamic_shared();
void* static_shared(const void* site, size_t bytes, size_t align);

// ---- barriers and warp collectives (scheduling points) ----
void syncthreads(Site s);
enum class WarpOp : uint8_t { Sync, Shfl, ShflXor, ShflUp, ShflDown, Any, All, Ballot };
uint64_t warp_collective(Site s, WarpOp op, unsigned mask, uint64_t value, int arg, int width);

template <class T>
T warp_value(Site s, WarpOp op, unsigned mask, T v, int arg, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "warp shuffle of a type wider than 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  bits = warp_collective(s, op, mask, bits, arg, width);
  T r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}
template <class T>
T shfl(Site s, unsigned mask, T v, int src, int width = 32) { return warp_value(s, WarpOp::Shfl, mask, v, src, width); }
template <class T>
T shfl_xor(Site s, unsigned mask, T v, int lane_mask, int width = 32) { return warp_value(s, WarpOp::ShflXor, mask, v, lane_mask, width); }
template <class T>
T shfl_up(Site s, unsigned mask, T v, unsigned delta, int width = 32) { return warp_value(s, WarpOp::ShflUp, mask, v, int(delta), width); }
template <class T>
T shfl_down(Site s, unsigned mask, T v, unsigned delta, int width = 32) { return warp_value(s, WarpOp::ShflDown, mask, v, int(delta), width); }
inline int any(Site s, unsigned mask, int p) { return int(warp_collective(s, WarpOp::Any, mask, p != 0, 0, 32)); }
inline int all(Site s, unsigned mask, int p) { return int(warp_collective(s, WarpOp::All, mask, p != 0, 0, 32)); }
inline unsigned ballot(Site s, unsigned mask, int p) { return unsigned(warp_collective(s, WarpOp::Ballot, mask, p != 0, 0, 32)); }
inline void syncwarp(Site s, unsigned mask = 0xffffffffu) { warp_collective(s, WarpOp::Sync, mask, 0, 0, 32); }

// ---- atomics: applied in a fixed order (thread order at the next barrier for shared memory, block then
// thread order at kernel end for global memory), so results do not depend on the schedule; the GPU gives no
// such order (float atomics make its results not bitwise repeatable). Returning the old value is therefore
// not supported: a kernel that uses it does not compile here.
enum class AtomicType : uint8_t { F32, F64, I32, U32, U64 };
void atomic_add(void* addr, AtomicType t, uint64_t bits);

// ---- host-side hooks used by the engine (no-ops in the CUDA build, see check.cuh) ----
// Names a device range: the whole allocation (its name in reports) or a view inside it (an arena buffer);
// copies, memsets and GEMM operands must then stay inside one view.
void name_range(const void* p, size_t bytes, const char* name);
constexpr size_t kArenaGuard = 256;  // bytes of canary after each arena view

}  // namespace gl_emu

template <class F>
cudaError_t cudaFuncSetAttribute(F* fn, cudaFuncAttribute attr, int value) {
  return ::gl_emu::func_set_attribute(reinterpret_cast<const void*>(fn), attr, value);
}

// ---- device built-ins ----
#define threadIdx (::gl_emu::t_thread_idx)
#define blockIdx (::gl_emu::t_block_idx)
#define blockDim (::gl_emu::t_block_dim)
#define gridDim (::gl_emu::t_grid_dim)
constexpr int warpSize = 32;

#define GL_EMU_SITE ::gl_emu::Site{__FILE__, __LINE__}
#define __syncthreads() ::gl_emu::syncthreads(GL_EMU_SITE)
#define __syncwarp(...) ::gl_emu::syncwarp(GL_EMU_SITE, ##__VA_ARGS__)
#define __shfl_sync(...) ::gl_emu::shfl(GL_EMU_SITE, __VA_ARGS__)
#define __shfl_xor_sync(...) ::gl_emu::shfl_xor(GL_EMU_SITE, __VA_ARGS__)
#define __shfl_up_sync(...) ::gl_emu::shfl_up(GL_EMU_SITE, __VA_ARGS__)
#define __shfl_down_sync(...) ::gl_emu::shfl_down(GL_EMU_SITE, __VA_ARGS__)
#define __any_sync(m, p) ::gl_emu::any(GL_EMU_SITE, m, p)
#define __all_sync(m, p) ::gl_emu::all(GL_EMU_SITE, m, p)
#define __ballot_sync(m, p) ::gl_emu::ballot(GL_EMU_SITE, m, p)

// `__shared__ T name[N];` and `extern __shared__ T name[];` after the rewrite:
#define GL_EMU_SHARED(T, name, dims)   \
  static const char gl_emu_site_##name = 0; \
  T(&name) dims = *reinterpret_cast<T(*) dims>(::gl_emu::static_shared(&gl_emu_site_##name, sizeof(T dims), alignof(T)))
#define GL_EMU_EXTERN_SHARED(T, name) T* const name = static_cast<T*>(::gl_emu::dynamic_shared())

inline void atomicAdd(float* a, float v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, 4);
  ::gl_emu::atomic_add(a, ::gl_emu::AtomicType::F32, b);
}
inline void atomicAdd(double* a, double v) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  ::gl_emu::atomic_add(a, ::gl_emu::AtomicType::F64, b);
}
inline void atomicAdd(int* a, int v) { ::gl_emu::atomic_add(a, ::gl_emu::AtomicType::I32, uint64_t(uint32_t(v))); }
inline void atomicAdd(unsigned* a, unsigned v) { ::gl_emu::atomic_add(a, ::gl_emu::AtomicType::U32, v); }
inline void atomicAdd(unsigned long long* a, unsigned long long v) { ::gl_emu::atomic_add(a, ::gl_emu::AtomicType::U64, v); }

// ---- device maths: the GPU's fast intrinsics (__expf, rsqrtf) are a few ulp off the correctly rounded
// host functions used here; both are far below the bf16 tolerances (docs/cuda.md).
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
template <class A, class B>
inline typename std::common_type<A, B>::type min(A a, B b) {
  using C = typename std::common_type<A, B>::type;
  return C(b) < C(a) ? C(b) : C(a);
}
template <class A, class B>
inline typename std::common_type<A, B>::type max(A a, B b) {
  using C = typename std::common_type<A, B>::type;
  return C(a) < C(b) ? C(b) : C(a);
}
