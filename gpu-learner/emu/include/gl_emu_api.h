// gl-emu, host-side API for drivers and tests (no device macros): modes, counters, live resources.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace gl_emu {

const char* precision();  // "bf16" | "exact"
bool dry_run();
bool reverse_order();
void set_reverse_order(bool reverse);  // overrides GL_EMU_ORDER from now on (the self-test runs both orders)
bool asan();
// Launches per kernel, GEMMs, copies, memsets, device memory; as JSON.
std::string stats_json();
void reset_stats();
int64_t launches(const std::string& kernel_prefix);  // launches of kernels whose name starts with the prefix
struct Live {
  int streams = 0, blas_handles = 0;
  size_t allocations = 0, bytes = 0;
};
Live live();
size_t peak_device_bytes();
// Clears sticky and last errors (the emulator's self-test runs many faulting kernels in one process).
void reset_errors();
// The emulator's diagnosis of the last error ("" when none).
std::string last_error_detail();

}  // namespace gl_emu
