// gl-emu stand-in for cuBLAS: handles bound to emulated streams; cublasGemmEx becomes a CPU GEMM (bf16 or
// fp32 in, fp32 accumulate, column-major) after cuBLAS's own argument rules and operand bounds checks.
#pragma once
#include "cuda_bf16.h"
#include "gl_emu.h"

struct cublasContext;
typedef cublasContext* cublasHandle_t;
enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
typedef cudaDataType_t cudaDataType;
enum cublasComputeType_t {
  CUBLAS_COMPUTE_16F = 64,
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_FAST_16F = 74,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
};
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 };

cublasStatus_t cublasCreate(cublasHandle_t* h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
const char* cublasGetStatusName(cublasStatus_t s);
const char* cublasGetStatusString(cublasStatus_t s);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* alpha, const void* A,
                            cudaDataType_t Atype, int lda, const void* B, cudaDataType_t Btype, int ldb, const void* beta, void* C,
                            cudaDataType_t Ctype, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo);
