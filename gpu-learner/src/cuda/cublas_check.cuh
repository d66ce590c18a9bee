// cublasCheck: a failing cuBLAS call names the file, the line, the call and what to try next (see check.cuh).
// Separate from check.cuh so the kernels compile without cuBLAS's headers (the register/spill report needs only nvcc).
#pragma once
#include <cublas_v2.h>

#include <stdexcept>
#include <string>

#include "check.cuh"

namespace gl::cuda {

[[noreturn]] inline void cublas_fail(cublasStatus_t s, const char* what, const char* file, int line) {
  const char* hint = s == CUBLAS_STATUS_ALLOC_FAILED     ? "out of GPU memory for the cuBLAS workspace"
                     : s == CUBLAS_STATUS_NOT_SUPPORTED  ? "shape/type combination unsupported on this GPU (bf16 GEMM needs sm_80+)"
                     : s == CUBLAS_STATUS_ARCH_MISMATCH  ? "GPU architecture too old for bf16 GEMM (needs sm_80+)"
                     : s == CUBLAS_STATUS_INVALID_VALUE  ? "bad GEMM arguments (a bug: check the leading dimensions)"
                                                         : "see the cuBLAS status; rerun with CUDA_LAUNCH_BLOCKING=1";
  throw std::runtime_error(std::string("cuBLAS error ") + cublasGetStatusName(s) + " in " + what + " at " + file + ":" +
                           std::to_string(line) + " — " + hint);
}

}  // namespace gl::cuda

#define cublasCheck(call)                                                                \
  do {                                                                                   \
    cublasStatus_t s_ = (call);                                                          \
    if (s_ != CUBLAS_STATUS_SUCCESS) ::gl::cuda::cublas_fail(s_, #call, __FILE__, __LINE__); \
  } while (0)
