// CUDA backend entry points (the engine itself is reached through gl::make_engine("cuda", ...)).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "gl/engine.h"

namespace gl {

std::unique_ptr<Engine> make_cuda_engine(const std::string& dir, const EngineOptions& opts);
// An engine of cfg's shape with zero weights and no checkpoint (no host copy of the weights): for shape,
// memory and launch checks at full scale (the emulator's dry run, benchmarks).
std::unique_ptr<Engine> make_cuda_engine_for_shape(const QwenConfig& cfg, const EngineOptions& opts);

// Bytes held by the CUDA engines of this process through their own allocations (weights, gradients,
// optimizer state, activations, KV caches); cuBLAS's workspace is not included. For benchmarks.
struct CudaMemoryStats {
  size_t current = 0, peak = 0;
};
CudaMemoryStats cuda_memory_stats();
void cuda_reset_peak_memory();

}  // namespace gl
