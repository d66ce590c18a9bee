// Error wrappers for the CUDA backend: every CUDA call goes through one of these (cuBLAS calls through
// cublas_check.cuh), so a failure names the file, the line, the call and what to try next (llm.c's cudaCheck, with a hint).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace gl::cuda {

// Hooks for the test-only CPU emulator (gpu-learner/emu, which defines GL_CUDA_EMU): it bounds-checks copies and
// GEMM operands against named buffers and keeps canary bytes between arena buffers. Nothing on a GPU.
inline void name_device_range(const void* p, size_t bytes, const char* name) {
#ifdef GL_CUDA_EMU
  ::gl_emu::name_range(p, bytes, name);
#else
  (void)p, (void)bytes, (void)name;
#endif
}
#ifdef GL_CUDA_EMU
constexpr size_t kArenaGuard = ::gl_emu::kArenaGuard;
#else
constexpr size_t kArenaGuard = 0;
#endif

inline const char* cuda_hint(cudaError_t e) {
  switch (e) {
    case cudaErrorMemoryAllocation:
      return "out of GPU memory: lower microBatchTokens / the sequence length, or use a larger GPU";
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return "no usable GPU: check nvidia-smi and that the driver supports this CUDA version";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return "binary not built for this GPU: rebuild with CMAKE_CUDA_ARCHITECTURES matching the device (90 for H100)";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
      return "kernel fault (a bug): rerun under compute-sanitizer to locate it; the CUDA context is now unusable";
    default:
      return "see the CUDA error string; rerun with CUDA_LAUNCH_BLOCKING=1 to attribute it to the right call";
  }
}

[[noreturn]] inline void cuda_fail(cudaError_t e, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " + what + " at " +
                           file + ":" + std::to_string(line) + " — " + cuda_hint(e));
}

}  // namespace gl::cuda

#define cudaCheck(call)                                                                  \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) ::gl::cuda::cuda_fail(e_, #call, __FILE__, __LINE__);         \
  } while (0)

// After a kernel launch: catches bad launch configurations immediately (not the kernel's own faults).
#define cudaCheckLaunch(name)                                                            \
  do {                                                                                   \
    cudaError_t e_ = cudaGetLastError();                                                 \
    if (e_ != cudaSuccess) ::gl::cuda::cuda_fail(e_, "launch of " name, __FILE__, __LINE__); \
  } while (0)
