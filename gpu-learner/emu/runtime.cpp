// gl-emu runtime: device memory (NaN-filled, canaries, named views, bounds-checked copies), streams,
// launch validation, the fiber scheduler (one OS thread runs a block's threads as fibers; barriers and warp
// collectives are scheduling points), deferred ordered atomics, and cuBLAS's GEMM on the CPU.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "gl_emu.h"
#include "gl_emu_api.h"

#if defined(__SANITIZE_ADDRESS__)
#define GL_EMU_ASAN 1
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// ---- context switch: callee-saved registers + stack pointer (x86-64 System V). ucontext's swapcontext
// makes a sigprocmask system call per switch, which would dominate the hundreds of millions of switches.
#if defined(__x86_64__)
extern "C" void gl_emu_switch(void** save_sp, void* next_sp);
extern "C" void gl_emu_fiber_start();
asm(R"(
.text
.globl gl_emu_switch
.type gl_emu_switch,@function
gl_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size gl_emu_switch, .-gl_emu_switch
.globl gl_emu_fiber_start
.type gl_emu_fiber_start,@function
gl_emu_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
.size gl_emu_fiber_start, .-gl_emu_fiber_start
.section .note.GNU-stack,"",@progbits
.text
)");
#else
#include <ucontext.h>
#endif

namespace gl_emu {

thread_local uint3 t_thread_idx;
thread_local uint3 t_block_idx;
thread_local dim3 t_block_dim, t_grid_dim;

namespace {

// ======================================================================== options, errors, counters

struct Options {
  bool reverse = false, dry = false;
  int threads = 1;
};
std::atomic<int> g_order_override{-1};  // set_reverse_order(): -1 = as GL_EMU_ORDER says

const Options& opts() {
  static const Options o = [] {
    Options r;
    const char* e = std::getenv("GL_EMU_ORDER");
    r.reverse = e && std::string(e) == "reverse";
    e = std::getenv("GL_EMU_DRY");
    r.dry = e && std::string(e) == "1";
    e = std::getenv("GL_EMU_THREADS");
    const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
    r.threads = e ? std::max(1, std::atoi(e)) : std::min(2, hw);
    return r;
  }();
  return o;
}

std::recursive_mutex g_mu;  // host API state (the engine calls from one thread; the lock keeps it honest)
cudaError_t g_sticky = cudaSuccess, g_last = cudaSuccess;
int g_detail_code = -1;
std::string g_detail;

cudaError_t host_fail(cudaError_t e, const std::string& msg, bool sticky) {
  std::fprintf(stderr, "gl-emu: %s\n", msg.c_str());
  g_detail = msg;
  g_detail_code = int(e);
  if (sticky && g_sticky == cudaSuccess) g_sticky = e;
  g_last = e;
  return e;
}

struct KernelCount {
  int64_t launches = 0, blocks = 0, threads = 0;
  double seconds = 0;  // emulation time (where the emulator spends it)
  int64_t switches = 0;
};
struct Counters {
  std::map<std::string, KernelCount> kernels;
  int64_t gemms = 0, memcpys = 0, memsets = 0;
  double gemm_flops = 0, memcpy_bytes = 0, gemm_seconds = 0;
} g_count;

// ======================================================================== device memory

constexpr size_t kAlign = 256, kGuard = 256;
constexpr unsigned char kFresh = 0xFF;   // fresh device and shared memory: NaN as f32, bf16 and f64
constexpr unsigned char kCanary = 0xA5;
constexpr size_t kDeviceBytes = size_t(80) << 30;  // H100 SXM
constexpr size_t kSmemDefault = 48 * 1024, kSmemOptin = 232448;

struct View {
  size_t off, size;
  std::string name;
};
struct Alloc {
  char* base = nullptr;
  size_t size = 0;
  char* raw = nullptr;
  size_t raw_size = 0;
  std::string name;
  std::vector<View> views;                       // sorted by offset when registered in order
  std::vector<std::pair<size_t, size_t>> gaps;   // canary ranges between views (offset, size)
};
std::map<uintptr_t, Alloc> g_allocs;
size_t g_live_bytes = 0, g_peak_bytes = 0;
std::vector<unsigned char> g_canary_ref(std::max(kGuard, size_t(4096)), kCanary);

Alloc* find_alloc(const void* p) {
  auto it = g_allocs.upper_bound(uintptr_t(p));
  if (it == g_allocs.begin()) return nullptr;
  --it;
  Alloc& a = it->second;
  return uintptr_t(p) < uintptr_t(a.base) + std::max<size_t>(a.size, 1) ? &a : nullptr;
}
bool is_device(const void* p) { return p && find_alloc(p); }

std::string alloc_label(const Alloc& a) { return a.name.empty() ? "an unnamed allocation" : "'" + a.name + "'"; }

// "" when [p, p+n) lies inside one device allocation (and inside one view of it when it has views).
std::string range_error(const void* p, size_t n, const std::string& what) {
  if (n == 0) return "";
  const Alloc* a = find_alloc(p);
  if (!a) return what + ": " + std::to_string(n) + " bytes at " + std::to_string(uintptr_t(p)) + " are not device memory";
  const size_t off = size_t(uintptr_t(p) - uintptr_t(a->base));
  if (off + n > a->size)
    return what + ": " + std::to_string(n) + " bytes at offset " + std::to_string(off) + " overrun " + alloc_label(*a) + " of " +
           std::to_string(a->size) + " bytes";
  if (a->views.empty()) return "";
  for (const View& v : a->views)
    if (off >= v.off && off < v.off + std::max<size_t>(v.size, 1)) {
      if (off + n > v.off + v.size)
        return what + ": " + std::to_string(n) + " bytes at offset " + std::to_string(off - v.off) + " of arena buffer '" + v.name + "' (" +
               std::to_string(v.size) + " bytes) in " + alloc_label(*a) + " overrun it";
      return "";
    }
  return what + ": offset " + std::to_string(off) + " of " + alloc_label(*a) + " is in no named buffer (a guard between arena buffers)";
}

void fill_canary(char* p, size_t n) {
#ifdef GL_EMU_ASAN
  ASAN_POISON_MEMORY_REGION(p, n);
#else
  std::memset(p, kCanary, n);
#endif
}

[[maybe_unused]] bool canary_ok(const char* p, size_t n) {
  while (n) {
    const size_t c = std::min(n, g_canary_ref.size());
    if (std::memcmp(p, g_canary_ref.data(), c)) return false;
    p += c;
    n -= c;
  }
  return true;
}

// Checks every allocation's guards and the guards between arena views (ASan checks them itself).
void check_canaries(const std::string& after) {
#ifndef GL_EMU_ASAN
  if (opts().dry || g_sticky != cudaSuccess) return;
  for (auto& [k, a] : g_allocs) {
    std::string where;
    if (!canary_ok(a.base - kGuard, kGuard)) where = "before the start of " + alloc_label(a);
    else if (!canary_ok(a.base + a.size, kGuard)) where = "past the end of " + alloc_label(a);
    else
      for (size_t i = 0; i < a.gaps.size() && where.empty(); i++)
        if (!canary_ok(a.base + a.gaps[i].first, a.gaps[i].second)) {
          std::string prev = "the arena start";
          for (const View& v : a.views)
            if (v.off + v.size <= a.gaps[i].first) prev = "'" + v.name + "'";
          where = "past the end of arena buffer " + prev + " in " + alloc_label(a);
        }
    if (!where.empty()) {
      host_fail(cudaErrorIllegalAddress, after + " wrote " + where + " (canary overwritten)", true);
      return;
    }
  }
#else
  (void)after;
#endif
}

// ======================================================================== streams and handles

struct StreamObj {
  int id;
};
std::set<const void*> g_streams;
int g_next_stream = 1;
bool stream_ok(cudaStream_t s) { return s == nullptr || g_streams.count(s); }

}  // namespace
}  // namespace gl_emu

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace gl_emu {
namespace {
std::set<const void*> g_handles;

// ======================================================================== fibers

enum FState : uint8_t { kReady, kBarrier, kWarp, kDone };

struct Fiber {
  void* sp = nullptr;
  char* stack_lo = nullptr;
  size_t stack_size = 0;
  uint3 tid{0, 0, 0};
  uint32_t linear = 0, atomic_seq = 0;
  FState state = kReady;
  bool started = false;  // has a stack (assigned when first scheduled)
  Site site{nullptr, 0};
#ifdef GL_EMU_ASAN
  void* fake = nullptr;
#endif
#if !defined(__x86_64__)
  ucontext_t uc;
#endif
};

struct WarpState {
  int arrived = 0, need = 0;
  unsigned exist = 0;  // lanes that exist in this block
  unsigned mask = 0;
  int width = 32;
  WarpOp op = WarpOp::Sync;
  Site site{nullptr, 0};
  uint64_t vals[32];
  int args[32];
  uint64_t res[32];
};

struct AtomicRec {
  void* addr;
  uint64_t bits;
  uint32_t block, thread, seq;
  AtomicType type;
};

struct Job {
  const char* name;
  const char* file;
  int line;
  void (*call)(void*, void*);
  void* kernel;
  void* args;
  dim3 grid, block;
  size_t smem, smem_limit;
  int64_t n_blocks;
  std::atomic<bool> failed{false};
};

#if defined(GL_EMU_ASAN)
constexpr size_t kStackBytes = 256 * 1024;
#else
constexpr size_t kStackBytes = 64 * 1024;
#endif
constexpr size_t kSmemCanary = 64;

struct SharedRegion {
  const void* site;  // null = dynamic
  size_t off, bytes;
};

struct Runner {
  std::vector<Fiber> fibers;
  char* stacks = nullptr;
  std::vector<char*> stack_los;  // 1024 stacks; a block takes them in order as its threads start
  int next_stack = 0;
  size_t page = 4096;
  WarpState warps[32];
  void* sched_sp = nullptr;
#if !defined(__x86_64__)
  ucontext_t sched_uc;
#endif
#ifdef GL_EMU_ASAN
  void* sched_fake = nullptr;
  const void* sched_bottom = nullptr;
  size_t sched_size = 0;
  bool from_sched = false;
#endif
  Fiber* cur = nullptr;
  int n = 0, done = 0, barrier_arrived = 0;
  Site barrier_site{nullptr, 0};
  std::vector<char> smem;
  std::vector<SharedRegion> regions;
  size_t smem_used = 0;
  std::vector<AtomicRec> shared_log, global_log;
  Job* job = nullptr;
  uint32_t block_linear = 0;
  bool reverse = false;  // this block's order (reverse_order() when it started)
  bool failed = false;
  std::string error;
  int64_t error_block = 0;
  int64_t switches = 0;  // context switches (the emulator's unit of cost)

  Runner() {
    page = size_t(sysconf(_SC_PAGESIZE));
    fibers.resize(1024);
    const size_t per = kStackBytes + page;  // a PROT_NONE guard page below each stack turns an overflow into a fault
    stacks = static_cast<char*>(mmap(nullptr, per * 1024, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (stacks == MAP_FAILED) {
      std::fprintf(stderr, "gl-emu: cannot map fiber stacks\n");
      std::abort();
    }
    for (int i = 0; i < 1024; i++) {
      mprotect(stacks + per * size_t(i), page, PROT_NONE);
      stack_los.push_back(stacks + per * size_t(i) + page);
    }
    smem.resize(kSmemOptin + 64 * 1024);
  }
};

thread_local Runner* t_runner = nullptr;
Runner& runner() {
  if (!t_runner) t_runner = new Runner();  // one per OS thread, for the process lifetime
  return *t_runner;
}

bool same_site(const Site& a, const Site& b) { return a.line == b.line && (a.file == b.file || !std::strcmp(a.file, b.file)); }
std::string site_str(const Site& s) {
  const char* f = s.file ? std::strrchr(s.file, '/') : nullptr;
  return std::string(f ? f + 1 : (s.file ? s.file : "?")) + ":" + std::to_string(s.line);
}
std::string tid_str(const uint3& t) { return "(" + std::to_string(t.x) + "," + std::to_string(t.y) + "," + std::to_string(t.z) + ")"; }
const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::Sync: return "__syncwarp";
    case WarpOp::Shfl: return "__shfl_sync";
    case WarpOp::ShflXor: return "__shfl_xor_sync";
    case WarpOp::ShflUp: return "__shfl_up_sync";
    case WarpOp::ShflDown: return "__shfl_down_sync";
    case WarpOp::Any: return "__any_sync";
    case WarpOp::All: return "__all_sync";
    case WarpOp::Ballot: return "__ballot_sync";
  }
  return "?";
}

// Next Ready fiber after `from` (null: from the start) in scheduling order, wrapping around; null when none.
Fiber* next_ready(Runner& r, const Fiber* from) {
  const int n = r.n;
  Fiber* fs = r.fibers.data();
  if (!r.reverse) {
    const int i0 = from ? int(from->linear) : -1;
    for (int i = i0 + 1; i < n; i++)
      if (fs[i].state == kReady) return &fs[i];
    for (int i = 0; i <= i0; i++)
      if (fs[i].state == kReady) return &fs[i];
  } else {
    const int i0 = from ? int(from->linear) : n;
    for (int i = i0 - 1; i >= 0; i--)
      if (fs[i].state == kReady) return &fs[i];
    for (int i = n - 1; i >= i0; i--)
      if (fs[i].state == kReady) return &fs[i];
  }
  return nullptr;
}

void init_fiber(Runner& r, Fiber& f);

// Switches from `from` to `to` (null = the scheduler's stack). Fibers hand over directly to the next ready
// fiber, half the switches of returning to the scheduler each time; the scheduler only starts a block and
// regains control when no fiber is ready (block done, failed or stalled).
void transfer(Runner& r, Fiber* from, Fiber* to, bool final) {
  if (to && !to->started) {  // first run: a fresh stack
    to->stack_lo = r.stack_los[size_t(r.next_stack++)];
    to->stack_size = kStackBytes;
    to->started = true;
    init_fiber(r, *to);
  }
  if (to) {
    r.cur = to;
    t_thread_idx = to->tid;
  }
#ifdef GL_EMU_ASAN
  void** fake = final ? nullptr : (from ? &from->fake : &r.sched_fake);
  r.from_sched = from == nullptr;
  __sanitizer_start_switch_fiber(fake, to ? to->stack_lo : r.sched_bottom, to ? to->stack_size : r.sched_size);
#else
  (void)final;
#endif
#if defined(__x86_64__)
  r.switches++;
  gl_emu_switch(from ? &from->sp : &r.sched_sp, to ? to->sp : r.sched_sp);
#else
  swapcontext(from ? &from->uc : &r.sched_uc, to ? &to->uc : &r.sched_uc);
#endif
#ifdef GL_EMU_ASAN
  const void* bottom = nullptr;
  size_t size = 0;
  __sanitizer_finish_switch_fiber(from ? from->fake : r.sched_fake, &bottom, &size);
  if (from && r.from_sched) r.sched_bottom = bottom, r.sched_size = size;
#endif
}

// At a scheduling point (or when done): hand over to the next ready fiber; returns when this one is resumed.
void yield_fiber(Runner& r, bool final = false) {
  Fiber& f = *r.cur;
  Fiber* nx = r.failed ? nullptr : next_ready(r, &f);
  if (nx == &f) return;  // the only ready fiber
  transfer(r, &f, nx, final);
}

[[noreturn]] void fail_block(Runner& r, const std::string& msg) {
  if (!r.failed) {
    r.failed = true;
    r.error = msg;
    r.error_block = r.block_linear;
  }
  yield_fiber(r, true);
  std::abort();  // never resumed
}

std::string where(const Runner& r) {
  return std::string("kernel ") + r.job->name + " (" + site_str(Site{r.job->file, r.job->line}) + ") block " + tid_str(t_block_idx);
}

void fiber_main(Fiber* f) {
  Runner& r = *t_runner;
#ifdef GL_EMU_ASAN
  const void* bottom = nullptr;
  size_t size = 0;
  __sanitizer_finish_switch_fiber(nullptr, &bottom, &size);
  if (r.from_sched) r.sched_bottom = bottom, r.sched_size = size;
#endif
  for (Fiber* cur = f;;) {
    r.job->call(r.job->kernel, r.job->args);
    cur->state = kDone;
    r.done++;
    Fiber* nx = r.failed ? nullptr : next_ready(r, cur);
    if (nx && !nx->started) {  // the next thread has not started: it runs on this stack, no switch
      nx->started = true;
      nx->stack_lo = cur->stack_lo;
      nx->stack_size = cur->stack_size;
      r.cur = cur = nx;
      t_thread_idx = nx->tid;
      continue;
    }
    transfer(r, cur, nx, true);
    std::abort();  // a finished fiber is never resumed
  }
}

#if !defined(__x86_64__)
void uc_entry(unsigned hi, unsigned lo) { fiber_main(reinterpret_cast<Fiber*>((uintptr_t(hi) << 32) | uintptr_t(lo))); }
#endif

void init_fiber(Runner& r, Fiber& f) {
#ifdef GL_EMU_ASAN
  // A finished fiber's last frames never returned, so their redzones are still poisoned: clear the stack's top.
  ASAN_UNPOISON_MEMORY_REGION(f.stack_lo + f.stack_size - 16384, 16384);
  f.fake = nullptr;
#endif
#if defined(__x86_64__)
  // Stack for gl_emu_switch's pops: r15 r14 r13(entry) r12(arg) rbx rbp, then ret → gl_emu_fiber_start,
  // which then runs with a 16-byte aligned stack as the ABI wants before its call.
  uintptr_t top = (uintptr_t(f.stack_lo) + f.stack_size) & ~uintptr_t(15);
  void** sp = reinterpret_cast<void**>(top - 16 - 7 * sizeof(void*));
  sp[0] = nullptr;                                           // r15
  sp[1] = nullptr;                                           // r14
  sp[2] = reinterpret_cast<void*>(&fiber_main);              // r13
  sp[3] = &f;                                                // r12
  sp[4] = nullptr;                                           // rbx
  sp[5] = nullptr;                                           // rbp
  sp[6] = reinterpret_cast<void*>(&gl_emu_fiber_start);      // return address
  f.sp = sp;
  (void)r;
#else
  getcontext(&f.uc);
  f.uc.uc_stack.ss_sp = f.stack_lo;
  f.uc.uc_stack.ss_size = f.stack_size;
  f.uc.uc_link = nullptr;
  const uintptr_t p = uintptr_t(&f);
  makecontext(&f.uc, reinterpret_cast<void (*)()>(&uc_entry), 2, unsigned(p >> 32), unsigned(p & 0xffffffffu));
  (void)r;
#endif
}

// ---- shared memory of the running block: [canary][dynamic][canary][static 1][canary]...

void smem_reset(Runner& r, size_t dyn) {
  r.regions.clear();
  r.smem_used = 0;
  char* base = r.smem.data();
  fill_canary(base, kSmemCanary);
  r.smem_used = kSmemCanary;
  r.regions.push_back({nullptr, r.smem_used, dyn});
#ifdef GL_EMU_ASAN
  ASAN_UNPOISON_MEMORY_REGION(base + r.smem_used, dyn);
#endif
  std::memset(base + r.smem_used, kFresh, dyn);
  r.smem_used += (dyn + 15) & ~size_t(15);
  fill_canary(base + r.smem_used, kSmemCanary);
  r.smem_used += kSmemCanary;
}

size_t smem_bytes(const Runner& r) {
  size_t s = 0;
  for (const auto& g : r.regions) s += g.bytes;
  return s;
}

void smem_check(Runner& r) {
#ifndef GL_EMU_ASAN
  const char* base = r.smem.data();
  bool ok = canary_ok(base, kSmemCanary);
  for (const auto& g : r.regions)
    if (!ok || !canary_ok(base + g.off + ((g.bytes + 15) & ~size_t(15)), kSmemCanary)) {
      r.failed = true;
      r.error = where(r) + ": shared memory written outside " +
                (g.site ? "a static __shared__ array of " + std::to_string(g.bytes) + " bytes"
                        : "the dynamic shared memory of " + std::to_string(g.bytes) + " bytes") +
                " (canary overwritten)";
      r.error_block = r.block_linear;
      return;
    }
#else
  (void)r;
#endif
}

bool in_smem(const Runner& r, const void* p) {
  return uintptr_t(p) >= uintptr_t(r.smem.data()) && uintptr_t(p) < uintptr_t(r.smem.data()) + r.smem.size();
}

template <class T>
void apply_atomic(const AtomicRec& a) {
  T v, d;
  std::memcpy(&v, a.addr, sizeof(T));
  std::memcpy(&d, &a.bits, sizeof(T));
  v = T(v + d);
  std::memcpy(a.addr, &v, sizeof(T));
}
void apply_atomics(std::vector<AtomicRec>& log) {
  std::stable_sort(log.begin(), log.end(), [](const AtomicRec& a, const AtomicRec& b) {
    return a.block != b.block ? a.block < b.block : a.thread != b.thread ? a.thread < b.thread : a.seq < b.seq;
  });
  for (const AtomicRec& a : log) switch (a.type) {
      case AtomicType::F32: apply_atomic<float>(a); break;
      case AtomicType::F64: apply_atomic<double>(a); break;
      case AtomicType::I32: apply_atomic<int32_t>(a); break;
      case AtomicType::U32: apply_atomic<uint32_t>(a); break;
      case AtomicType::U64: apply_atomic<uint64_t>(a); break;
    }
  log.clear();
}

void diagnose_stall(Runner& r) {
  int done = 0, at_barrier = 0;
  const Fiber* first_done = nullptr;
  for (int i = 0; i < r.n; i++) {
    const Fiber& f = r.fibers[size_t(i)];
    if (f.state == kDone && !first_done) first_done = &f;
    done += f.state == kDone;
    at_barrier += f.state == kBarrier;
  }
  std::string msg;
  for (int w = 0; w * 32 < r.n && msg.empty(); w++) {
    const WarpState& ws = r.warps[w];
    if (!ws.arrived) continue;
    for (int l = 0; l < 32; l++) {
      if (!(ws.mask >> l & 1)) continue;
      const Fiber& f = r.fibers[size_t(w * 32 + l)];
      if (f.state == kDone)
        msg = std::string(op_name(ws.op)) + " at " + site_str(ws.site) + " (mask 0x" + [&] { char b[16]; std::snprintf(b, sizeof b, "%08x", ws.mask); return std::string(b); }() +
              ") names lane " + std::to_string(l) + " of warp " + std::to_string(w) + ", which has exited";
      else if (f.state == kBarrier)
        msg = "deadlock: lanes of warp " + std::to_string(w) + " wait in " + op_name(ws.op) + " at " + site_str(ws.site) + " while lane " +
              std::to_string(l) + " waits at __syncthreads at " + site_str(f.site);
      if (!msg.empty()) break;
    }
  }
  if (msg.empty() && at_barrier && done)
    msg = "divergent __syncthreads at " + site_str(r.barrier_site) + ": " + std::to_string(at_barrier) + " threads wait there while " +
          std::to_string(done) + " have exited (thread " + tid_str(first_done->tid) + ")";
  if (msg.empty()) msg = "deadlock: no thread can proceed";
  r.failed = true;
  r.error = where(r) + ": " + msg;
  r.error_block = r.block_linear;
}

void run_block(Runner& r, Job& job, int64_t b) {
  r.job = &job;
  r.block_linear = uint32_t(b);
  const int64_t gx = job.grid.x, gy = job.grid.y;
  t_block_idx = uint3{unsigned(b % gx), unsigned((b / gx) % gy), unsigned(b / (gx * gy))};
  t_block_dim = job.block;
  t_grid_dim = job.grid;
  const int n = int(job.block.x * job.block.y * job.block.z);
  r.n = n;
  r.reverse = reverse_order();
  r.done = 0;
  r.barrier_arrived = 0;
  for (int w = 0; w < 32; w++) {
    r.warps[w].arrived = 0;
    const int in_warp = std::min(32, std::max(0, n - w * 32));
    r.warps[w].exist = in_warp >= 32 ? 0xffffffffu : ((1u << in_warp) - 1);
  }
  for (int i = 0; i < n; i++) {
    Fiber& f = r.fibers[size_t(i)];
    f.linear = uint32_t(i);
    f.tid = uint3{unsigned(i % int(job.block.x)), unsigned((i / int(job.block.x)) % int(job.block.y)), unsigned(i / int(job.block.x * job.block.y))};
    f.state = kReady;
    f.atomic_seq = 0;
    f.started = false;
  }
  r.next_stack = 0;
  smem_reset(r, job.smem);
  transfer(r, nullptr, next_ready(r, nullptr), false);  // runs until no fiber is ready
  if (r.failed) return;
  if (r.done != n) {
    diagnose_stall(r);
    return;
  }
  r.shared_log.clear();  // shared memory dies with the block
  smem_check(r);
}

// ---- block pool: blocks of a launch on up to opts().threads OS threads (results do not depend on it)

struct Pool {
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable cv, done_cv;
  Job* job = nullptr;
  uint64_t generation = 0;
  int running = 0;
  std::atomic<int64_t> next{0};
  std::vector<Runner*> used;

  void work(Job& j) {
    Runner& r = runner();
    r.failed = false;
    r.error.clear();
    for (;;) {
      if (j.failed.load(std::memory_order_relaxed)) break;
      const int64_t k = next.fetch_add(1);
      if (k >= j.n_blocks) break;
      run_block(r, j, reverse_order() ? j.n_blocks - 1 - k : k);
      if (r.failed) j.failed = true;
    }
  }
  void start(int n) {
    for (int i = 0; i < n; i++)
      workers.emplace_back([this] {
        uint64_t seen = 0;
        for (;;) {
          Job* j;
          {
            std::unique_lock<std::mutex> lk(mu);
            cv.wait(lk, [&] { return generation != seen; });
            seen = generation;
            j = job;
            used.push_back(&runner());
          }
          work(*j);
          std::lock_guard<std::mutex> lk(mu);
          if (--running == 0) done_cv.notify_all();
        }
      });
  }
  // Runs every block of j; returns the runners that took part (for errors and atomics).
  std::vector<Runner*> run(Job& j) {
    next = 0;
    if (opts().threads <= 1 || j.n_blocks <= 1) {
      work(j);
      return {&runner()};
    }
    {
      std::lock_guard<std::mutex> lk(mu);
      if (workers.empty()) start(opts().threads - 1);
      job = &j;
      used.clear();
      used.push_back(&runner());
      running = int(workers.size());
      generation++;
    }
    cv.notify_all();
    work(j);
    std::unique_lock<std::mutex> lk(mu);
    done_cv.wait(lk, [&] { return running == 0; });
    return used;
  }
};
Pool& pool() {
  static Pool* p = new Pool();  // workers live for the process
  return *p;
}

std::map<const void*, int> g_func_smem;  // cudaFuncAttributeMaxDynamicSharedMemorySize per kernel

}  // namespace

// ======================================================================== device-side API

void* dynamic_shared() {
  Runner& r = *t_runner;
  return r.smem.data() + r.regions[0].off;
}

void* static_shared(const void* site, size_t bytes, size_t align) {
  Runner& r = *t_runner;
  for (const auto& g : r.regions)
    if (g.site == site) return r.smem.data() + g.off;
  // first use in this block: carve, fill with NaN bytes, canary after
  size_t off = (r.smem_used + std::max<size_t>(align, 16) - 1) & ~(std::max<size_t>(align, 16) - 1);
  const size_t total = smem_bytes(r) + bytes;
  if (total > r.job->smem_limit || off + bytes + kSmemCanary > r.smem.size())
    fail_block(r, where(r) + ": shared memory " + std::to_string(total) + " bytes (static + dynamic) exceeds the " +
                      std::to_string(r.job->smem_limit) + "-byte limit of this launch");
  char* p = r.smem.data() + off;
#ifdef GL_EMU_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, bytes);
#endif
  std::memset(p, kFresh, bytes);
  r.regions.push_back({site, off, bytes});
  r.smem_used = off + ((bytes + 15) & ~size_t(15));
  fill_canary(r.smem.data() + r.smem_used, kSmemCanary);
  r.smem_used += kSmemCanary;
  return p;
}

// Errors are built in cold functions: the hot paths keep small stack frames, and every fiber's frame is touched
// on each switch (hundreds of fibers: their stacks' cache footprint is the emulator's main cost).
[[gnu::noinline, gnu::cold, noreturn]] void barrier_error(Runner& r, Site s, int kind) {
  const Fiber& f = *r.cur;
  const WarpState& ws = r.warps[f.linear >> 5];
  if (kind == 0)
    fail_block(r, where(r) + ": divergent __syncthreads: thread " + tid_str(f.tid) + " reached " + site_str(s) + " while other threads wait at " +
                      site_str(r.barrier_site));
  fail_block(r, where(r) + ": deadlock: thread " + tid_str(f.tid) + " reached __syncthreads at " + site_str(s) + " while lanes of its warp wait in " +
                    op_name(ws.op) + " at " + site_str(ws.site));
}

void syncthreads(Site s) {
  Runner& r = *t_runner;
  Fiber& f = *r.cur;
  if (r.barrier_arrived == 0) r.barrier_site = s;
  else if (!same_site(r.barrier_site, s)) barrier_error(r, s, 0);
  if (r.warps[f.linear >> 5].arrived) barrier_error(r, s, 1);
  f.state = kBarrier;
  f.site = s;
  if (++r.barrier_arrived == r.n) {
    if (!r.shared_log.empty()) apply_atomics(r.shared_log);
    for (int i = 0; i < r.n; i++) r.fibers[size_t(i)].state = kReady;
    r.barrier_arrived = 0;
  }
  yield_fiber(r);
}

std::string hex_mask(unsigned mask) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", mask);
  return b;
}

[[gnu::noinline, gnu::cold, noreturn]] void warp_error(Runner& r, Site s, WarpOp op, unsigned mask, int width, int src_lane) {
  const Fiber& f = *r.cur;
  const int lane = int(f.linear & 31), w = int(f.linear >> 5);
  const WarpState& ws = r.warps[w];
  const std::string at = where(r) + ": " + op_name(op) + " at " + site_str(s);
  if (src_lane >= 0)
    fail_block(r, at + ": lane " + std::to_string(lane) + " reads lane " + std::to_string(src_lane) + ", which is not in the mask " + hex_mask(mask));
  if (!(mask >> lane & 1)) fail_block(r, at + " by lane " + std::to_string(lane) + " with mask " + hex_mask(mask) + " that excludes it");
  if (width < 1 || width > 32 || (width & (width - 1))) fail_block(r, at + " with width " + std::to_string(width) + " (must be a power of 2 <= 32)");
  if (ws.arrived && (ws.mask != mask || ws.op != op || ws.width != width || !same_site(ws.site, s)))
    fail_block(r, where(r) + ": divergent warp collective: lane " + std::to_string(lane) + " of warp " + std::to_string(w) + " reached " + op_name(op) +
                      " at " + site_str(s) + " while lanes wait in " + op_name(ws.op) + " at " + site_str(ws.site));
  fail_block(r, at + " with mask " + hex_mask(mask) + " names lanes past the block's " + std::to_string(r.n) + " threads");
}

// The last lane to arrive computes every participant's result.
[[gnu::noinline]] void resolve_warp(Runner& r, WarpState& ws, int w) {
  const unsigned mask = ws.mask;
  const int width = ws.width;
  uint64_t any = 0, all = 1, ballot = 0;
  for (int l = 0; l < 32; l++)
    if (mask >> l & 1) {
      any |= ws.vals[l] != 0;
      all &= ws.vals[l] != 0;
      ballot |= uint64_t(ws.vals[l] != 0) << l;
    }
  for (int l = 0; l < 32; l++) {
    if (!(mask >> l & 1)) continue;
    const int seg = l & ~(width - 1);
    int src = l;
    switch (ws.op) {
      case WarpOp::Shfl: src = seg + (ws.args[l] & (width - 1)); break;
      case WarpOp::ShflXor: src = l ^ ws.args[l]; if ((src & ~(width - 1)) > seg || src > 31) src = l; break;
      case WarpOp::ShflUp: src = l - ws.args[l]; if (src < seg) src = l; break;
      case WarpOp::ShflDown: src = l + ws.args[l]; if (src >= seg + width) src = l; break;
      default: break;
    }
    if (src < 0 || src > 31 || !(mask >> src & 1)) warp_error(r, ws.site, ws.op, mask, width, src);
    switch (ws.op) {
      case WarpOp::Any: ws.res[l] = any; break;
      case WarpOp::All: ws.res[l] = all; break;
      case WarpOp::Ballot: ws.res[l] = ballot; break;
      case WarpOp::Sync: ws.res[l] = 0; break;
      default: ws.res[l] = ws.vals[src]; break;
    }
  }
  ws.arrived = 0;
  Fiber* fs = r.fibers.data() + w * 32;
  for (int l = 0; l < 32; l++)
    if (mask >> l & 1) fs[l].state = kReady;
}

uint64_t warp_collective(Site s, WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
  Runner& r = *t_runner;
  Fiber& f = *r.cur;
  const int lane = int(f.linear & 31), w = int(f.linear >> 5);
  WarpState& ws = r.warps[w];
  if (!(mask >> lane & 1) || (mask & ~ws.exist) || width < 1 || width > 32 || (width & (width - 1))) warp_error(r, s, op, mask, width, -1);
  if (ws.arrived == 0) {
    ws.mask = mask;
    ws.need = __builtin_popcount(mask);
    ws.op = op;
    ws.site = s;
    ws.width = width;
  } else if (ws.mask != mask || ws.op != op || ws.width != width || !same_site(ws.site, s)) {
    warp_error(r, s, op, mask, width, -1);
  }
  ws.vals[lane] = value;
  ws.args[lane] = arg;
  f.state = kWarp;
  f.site = s;
  if (++ws.arrived == ws.need) resolve_warp(r, ws, w);
  yield_fiber(r);
  return ws.res[lane];
}

void atomic_add(void* addr, AtomicType t, uint64_t bits) {
  Runner& r = *t_runner;
  Fiber& f = *r.cur;
  const AtomicRec a{addr, bits, r.block_linear, f.linear, f.atomic_seq++, t};
  (in_smem(r, addr) ? r.shared_log : r.global_log).push_back(a);
}

// ======================================================================== launches

cudaError_t func_set_attribute(const void* fn, cudaFuncAttribute attr, int value) {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  if (g_sticky) return g_last = g_sticky;
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || size_t(value) > kSmemOptin)
      return host_fail(cudaErrorInvalidValue,
                       "cudaFuncSetAttribute(MaxDynamicSharedMemorySize=" + std::to_string(value) + ") exceeds the device's " + std::to_string(kSmemOptin) +
                           "-byte opt-in limit",
                       false);
    g_func_smem[fn] = value;
  }
  return cudaSuccess;
}

bool Launch::validate(const void* fn) {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  if (g_sticky) {
    g_last = g_sticky;
    return false;
  }
  const std::string at = std::string("launch of ") + name_ + " (" + site_str(Site{file_, line_}) + "): ";
  if (!stream_ok(stream_)) {
    host_fail(cudaErrorInvalidResourceHandle, at + "stream is not a live stream", false);
    return false;
  }
  const dim3 b = block_, g = grid_;
  std::string bad;
  if (!b.x || !b.y || !b.z) bad = "a blockDim component is 0";
  else if (b.x > 1024 || b.y > 1024 || b.z > 64) bad = "blockDim " + tid_str({b.x, b.y, b.z}) + " exceeds (1024,1024,64)";
  else if (uint64_t(b.x) * b.y * b.z > 1024) bad = std::to_string(uint64_t(b.x) * b.y * b.z) + " threads per block exceed 1024";
  else if (!g.x || !g.y || !g.z) bad = "gridDim " + tid_str({g.x, g.y, g.z}) + " has a 0 component";
  else if (g.x > 2147483647u) bad = "gridDim.x=" + std::to_string(g.x) + " exceeds 2^31-1";
  else if (g.y > 65535) bad = "gridDim.y=" + std::to_string(g.y) + " exceeds 65535";
  else if (g.z > 65535) bad = "gridDim.z=" + std::to_string(g.z) + " exceeds 65535";
  if (!bad.empty()) {
    host_fail(cudaErrorInvalidConfiguration, at + bad, false);
    return false;
  }
  auto it = g_func_smem.find(fn);
  const size_t opt_in = it == g_func_smem.end() ? 0 : size_t(it->second);
  if (smem_ > kSmemDefault && smem_ > opt_in) {
    host_fail(cudaErrorInvalidValue,
              at + std::to_string(smem_) + " bytes of dynamic shared memory need cudaFuncSetAttribute(MaxDynamicSharedMemorySize) >= that first (set: " +
                  std::to_string(opt_in) + ")",
              false);
    return false;
  }
  KernelCount& c = g_count.kernels[name_];
  c.launches++;
  c.blocks += int64_t(g.x) * g.y * g.z;
  c.threads += int64_t(g.x) * g.y * g.z * b.x * b.y * b.z;
  return true;
}

void Launch::execute(void (*call)(void*, void*), void* kernel, void* args) {
  if (opts().dry) return;
  Job job;
  job.name = name_;
  job.file = file_;
  job.line = line_;
  job.call = call;
  job.kernel = kernel;
  job.args = args;
  job.grid = grid_;
  job.block = block_;
  job.smem = smem_;
  {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    auto it = g_func_smem.find(kernel);
    job.smem_limit = std::max(kSmemDefault, it == g_func_smem.end() ? size_t(0) : size_t(it->second));
  }
  job.n_blocks = int64_t(grid_.x) * grid_.y * grid_.z;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Runner*> rs = pool().run(job);
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  KernelCount& kc = g_count.kernels[name_];
  kc.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (Runner* r : rs) kc.switches += r->switches, r->switches = 0;
  const Runner* bad = nullptr;
  for (const Runner* r : rs)
    if (r->failed && (!bad || r->error_block < bad->error_block)) bad = r;
  if (bad) {
    for (Runner* r : rs) r->global_log.clear();
    host_fail(cudaErrorLaunchFailure, bad->error, true);
    return;
  }
  std::vector<AtomicRec> all;
  for (Runner* r : rs) {
    all.insert(all.end(), r->global_log.begin(), r->global_log.end());
    r->global_log.clear();
  }
  if (!all.empty()) apply_atomics(all);
  check_canaries(std::string("kernel ") + name_ + " (" + site_str(Site{file_, line_}) + ")");
}

void name_range(const void* p, size_t bytes, const char* name) {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  if (!p) return;  // a planning pass without memory
  Alloc* a = find_alloc(p);
  if (!a) {
    host_fail(cudaErrorInvalidValue, std::string("name_range('") + name + "'): not device memory", false);
    return;
  }
  const size_t off = size_t(uintptr_t(p) - uintptr_t(a->base));
  if (off == 0 && bytes == a->size) {
    a->name = name;
    return;
  }
  if (off + bytes > a->size) {
    host_fail(cudaErrorInvalidValue, std::string("arena buffer '") + name + "' (" + std::to_string(bytes) + " bytes at offset " + std::to_string(off) +
                                         ") overruns " + alloc_label(*a) + " of " + std::to_string(a->size) + " bytes",
              true);
    return;
  }
  const size_t prev_end = a->views.empty() ? 0 : a->views.back().off + a->views.back().size;
  if (off >= prev_end) {
    if (off > prev_end && !opts().dry) {
      fill_canary(a->base + prev_end, off - prev_end);
      a->gaps.push_back({prev_end, off - prev_end});
    }
  } else {
    host_fail(cudaErrorInvalidValue, std::string("arena buffer '") + name + "' overlaps '" + a->views.back().name + "' in " + alloc_label(*a), true);
    return;
  }
  a->views.push_back({off, bytes, name});
}

}  // namespace gl_emu

// ======================================================================== runtime API

using namespace gl_emu;

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* dev) {
  *dev = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) { return dev == 0 ? cudaSuccess : host_fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(dev) + ")", false); }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int dev) {
  if (dev != 0) return host_fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties(" + std::to_string(dev) + ")", false);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "gl-emu (emulated H100, %s%s%s)", precision(), dry_run() ? ", dry run" : "", reverse_order() ? ", reverse order" : "");
  p->totalGlobalMem = kDeviceBytes;
  p->sharedMemPerBlock = kSmemDefault;
  p->sharedMemPerBlockOptin = kSmemOptin;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** out, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  *out = nullptr;
  if (g_sticky) return g_last = g_sticky;
  if (bytes == 0) return cudaSuccess;
  if (g_live_bytes + bytes > kDeviceBytes)
    return host_fail(cudaErrorMemoryAllocation,
                     "cudaMalloc(" + std::to_string(bytes >> 20) + " MiB): " + std::to_string(g_live_bytes >> 20) + " MiB in use of the H100's 80 GiB", false);
  Alloc a;
  a.size = bytes;
  const size_t body = (bytes + kAlign - 1) & ~(kAlign - 1);
  if (opts().dry) {  // address space only: never touched (PROT_NONE), so a stray access faults
    const size_t pg = size_t(sysconf(_SC_PAGESIZE));
    a.raw_size = ((body + 2 * kGuard + pg - 1) / pg) * pg;
    void* m = mmap(nullptr, a.raw_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return host_fail(cudaErrorMemoryAllocation, "dry run: cannot reserve address space", false);
    a.raw = static_cast<char*>(m);
    a.base = a.raw + kGuard;
  } else {
#ifdef GL_EMU_ASAN
    void* m = nullptr;
    if (posix_memalign(&m, kAlign, bytes)) return host_fail(cudaErrorMemoryAllocation, "host allocation failed", false);
    a.raw = static_cast<char*>(m);
    a.raw_size = bytes;
    a.base = a.raw;
#else
    a.raw_size = body + 2 * kGuard;
    a.raw = static_cast<char*>(std::aligned_alloc(kAlign, a.raw_size));
    if (!a.raw) return host_fail(cudaErrorMemoryAllocation, "host allocation of " + std::to_string(a.raw_size) + " bytes failed", false);
    a.base = a.raw + kGuard;
    std::memset(a.raw, kCanary, kGuard);
    std::memset(a.base + bytes, kCanary, a.raw_size - kGuard - bytes);
#endif
    std::memset(a.base, kFresh, bytes);
  }
  *out = a.base;
  g_live_bytes += bytes;
  g_peak_bytes = std::max(g_peak_bytes, g_live_bytes);
  g_allocs[uintptr_t(a.base)] = std::move(a);
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  if (!p) return cudaSuccess;
  auto it = g_allocs.find(uintptr_t(p));
  if (it == g_allocs.end()) return host_fail(cudaErrorInvalidValue, "cudaFree of a pointer that cudaMalloc did not return", false);
  Alloc& a = it->second;
  if (opts().dry) {
    munmap(a.raw, a.raw_size);
  } else {
#ifdef GL_EMU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(a.raw, a.raw_size);
#endif
    std::free(a.raw);
  }
  g_live_bytes -= a.size;
  g_allocs.erase(it);
  return cudaSuccess;  // like the GPU, freeing does not report earlier faults
}

static const char* kind_name(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToHost: return "HostToHost";
    case cudaMemcpyHostToDevice: return "HostToDevice";
    case cudaMemcpyDeviceToHost: return "DeviceToHost";
    case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
    default: return "Default";
  }
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  if (g_sticky) return g_last = g_sticky;
  const std::string what = std::string("cudaMemcpy(") + kind_name(kind) + ", " + std::to_string(bytes) + " bytes)";
  if (!stream_ok(s)) return host_fail(cudaErrorInvalidResourceHandle, what + ": stream is not a live stream", false);
  if (bytes == 0) return cudaSuccess;
  if (!dst || !src) return host_fail(cudaErrorInvalidValue, what + ": null pointer", false);
  const bool dd = is_device(dst), sd = is_device(src);
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice: ok = dd && !sd; break;
    case cudaMemcpyDeviceToHost: ok = !dd && sd; break;
    case cudaMemcpyDeviceToDevice: ok = dd && sd; break;
    case cudaMemcpyHostToHost: ok = !dd && !sd; break;
    default: break;
  }
  if (!ok)
    return host_fail(cudaErrorInvalidValue, what + ": destination is " + (dd ? "device" : "host") + " memory and source is " + (sd ? "device" : "host") + " memory",
                     false);
  std::string e;
  if (dd) e = range_error(dst, bytes, what + " destination");
  if (e.empty() && sd) e = range_error(src, bytes, what + " source");
  if (e.empty() && dd && sd && uintptr_t(dst) < uintptr_t(src) + bytes && uintptr_t(src) < uintptr_t(dst) + bytes)
    e = what + ": source and destination overlap";
  if (!e.empty()) return host_fail(cudaErrorInvalidValue, e, false);
  g_count.memcpys++;
  g_count.memcpy_bytes += double(bytes);
  if (!opts().dry) std::memcpy(dst, src, bytes);
  check_canaries(what);
  return g_sticky ? g_sticky : cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) { return cudaMemcpyAsync(dst, src, bytes, kind, nullptr); }

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  if (g_sticky) return g_last = g_sticky;
  const std::string what = "cudaMemset(" + std::to_string(bytes) + " bytes)";
  if (!stream_ok(s)) return host_fail(cudaErrorInvalidResourceHandle, what + ": stream is not a live stream", false);
  if (bytes == 0) return cudaSuccess;
  const std::string e = range_error(p, bytes, what);
  if (!e.empty()) return host_fail(cudaErrorInvalidValue, e, false);
  g_count.memsets++;
  if (!opts().dry) std::memset(p, value & 0xff, bytes);
  check_canaries(what);
  return g_sticky ? g_sticky : cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) { return cudaMemsetAsync(p, value, bytes, nullptr); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  if (g_sticky) return g_last = g_sticky;
  (void)flags;
  auto* o = new StreamObj{g_next_stream++};
  *s = reinterpret_cast<cudaStream_t>(o);
  g_streams.insert(*s);
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  if (!s || !g_streams.erase(s)) return host_fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy of a stream that is not live", false);
  delete reinterpret_cast<StreamObj*>(s);
  return cudaSuccess;
}
// Work runs when it is issued (like CUDA_LAUNCH_BLOCKING=1), so synchronising only reports errors.
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  if (g_sticky) return g_last = g_sticky;
  if (!stream_ok(s)) return host_fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize of a stream that is not live", false);
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { return g_sticky; }
cudaError_t cudaGetLastError() {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  const cudaError_t e = g_last;
  g_last = g_sticky;
  return e;
}
cudaError_t cudaPeekAtLastError() { return g_last; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoKernelImageForDevice: return "cudaErrorNoKernelImageForDevice";
    case cudaErrorUnsupportedPtxVersion: return "cudaErrorUnsupportedPtxVersion";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

// The standard text, plus the emulator's diagnosis of the last such error.
const char* cudaGetErrorString(cudaError_t e) {
  static thread_local std::string s;
  switch (e) {
    case cudaSuccess: s = "no error"; break;
    case cudaErrorInvalidValue: s = "invalid argument"; break;
    case cudaErrorMemoryAllocation: s = "out of memory"; break;
    case cudaErrorInvalidConfiguration: s = "invalid configuration argument"; break;
    case cudaErrorInvalidResourceHandle: s = "invalid resource handle"; break;
    case cudaErrorIllegalAddress: s = "an illegal memory access was encountered"; break;
    case cudaErrorLaunchFailure: s = "unspecified launch failure"; break;
    default: s = cudaGetErrorName(e); break;
  }
  if (int(e) == g_detail_code && !g_detail.empty()) s += " [gl-emu: " + g_detail + "]";
  return s.c_str();
}

// ======================================================================== cuBLAS

static thread_local std::string g_blas_detail;
static cublasStatus_t blas_fail(cublasStatus_t st, const std::string& msg) {
  std::fprintf(stderr, "gl-emu: %s\n", msg.c_str());
  g_blas_detail = msg;
  return st;
}

cublasStatus_t cublasCreate(cublasHandle_t* h) {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  *h = new cublasContext();
  g_handles.insert(*h);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  if (!g_handles.erase(h)) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasDestroy of a handle that is not live");
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  if (!g_handles.count(h)) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetStream on a handle that is not live");
  if (!stream_ok(s)) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetStream with a stream that is not live");
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusName(cublasStatus_t s) {
  static thread_local std::string out;
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: out = "CUBLAS_STATUS_SUCCESS"; break;
    case CUBLAS_STATUS_NOT_INITIALIZED: out = "CUBLAS_STATUS_NOT_INITIALIZED"; break;
    case CUBLAS_STATUS_ALLOC_FAILED: out = "CUBLAS_STATUS_ALLOC_FAILED"; break;
    case CUBLAS_STATUS_INVALID_VALUE: out = "CUBLAS_STATUS_INVALID_VALUE"; break;
    case CUBLAS_STATUS_ARCH_MISMATCH: out = "CUBLAS_STATUS_ARCH_MISMATCH"; break;
    case CUBLAS_STATUS_EXECUTION_FAILED: out = "CUBLAS_STATUS_EXECUTION_FAILED"; break;
    case CUBLAS_STATUS_NOT_SUPPORTED: out = "CUBLAS_STATUS_NOT_SUPPORTED"; break;
    default: out = "CUBLAS_STATUS_INTERNAL_ERROR"; break;
  }
  if (s != CUBLAS_STATUS_SUCCESS && !g_blas_detail.empty()) out += " [gl-emu: " + g_blas_detail + "]";
  return out.c_str();
}
const char* cublasGetStatusString(cublasStatus_t s) { return cublasGetStatusName(s); }

namespace {
size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF ? sizeof(__nv_bfloat16) : 2; }
float load_elem(const void* p, cudaDataType_t t, int64_t i) {
  return t == CUDA_R_32F ? static_cast<const float*>(p)[i] : float(static_cast<const __nv_bfloat16*>(p)[i]);
}
// Deterministic dot product: 8 interleaved fp32 partial sums, combined pairwise (vectorises; fixed order).
float dot8(const float* a, const float* b, int64_t k) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t l = 0;
  for (; l + 8 <= k; l += 8)
    for (int u = 0; u < 8; u++) acc[u] += a[l + u] * b[l + u];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; l < k; l++) s += a[l] * b[l];
  return s;
}
}  // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* alpha, const void* A,
                            cudaDataType_t Atype, int lda, const void* B, cudaDataType_t Btype, int ldb, const void* beta, void* C,
                            cudaDataType_t Ctype, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  (void)algo;
  if (!g_handles.count(h)) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasGemmEx on a handle that is not live");
  if (g_sticky) return blas_fail(CUBLAS_STATUS_EXECUTION_FAILED, std::string("cublasGemmEx after an earlier fault: ") + cudaGetErrorName(g_sticky));
  if (!stream_ok(h->stream)) return blas_fail(CUBLAS_STATUS_EXECUTION_FAILED, "cublasGemmEx: the handle's stream is no longer live");
  const std::string call = "cublasGemmEx(" + std::string(ta == CUBLAS_OP_N ? "N" : "T") + (tb == CUBLAS_OP_N ? "N" : "T") + ", m=" + std::to_string(m) +
                           ", n=" + std::to_string(n) + ", k=" + std::to_string(k) + ", lda=" + std::to_string(lda) + ", ldb=" + std::to_string(ldb) +
                           ", ldc=" + std::to_string(ldc) + ")";
  // cuBLAS's argument rules (column-major): op(A) m×k, op(B) k×n, C m×n.
  if (m < 0 || n < 0 || k < 0) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, call + ": negative dimension");
  if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T))
    return blas_fail(CUBLAS_STATUS_INVALID_VALUE, call + ": transa/transb must be N or T for real types");
  const int64_t lda_min = std::max(1, ta == CUBLAS_OP_N ? m : k), ldb_min = std::max(1, tb == CUBLAS_OP_N ? k : n), ldc_min = std::max(1, m);
  if (lda < lda_min) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, call + ": lda < max(1, " + (ta == CUBLAS_OP_N ? "m" : "k") + ")=" + std::to_string(lda_min));
  if (ldb < ldb_min) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, call + ": ldb < max(1, " + (tb == CUBLAS_OP_N ? "k" : "n") + ")=" + std::to_string(ldb_min));
  if (ldc < ldc_min) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, call + ": ldc < max(1, m)=" + std::to_string(ldc_min));
  if (Atype != Btype || (Atype != CUDA_R_16BF && Atype != CUDA_R_32F) || (Ctype != CUDA_R_32F && Ctype != CUDA_R_16BF) ||
      (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_16BF && compute != CUBLAS_COMPUTE_32F_FAST_TF32))
    return blas_fail(CUBLAS_STATUS_NOT_SUPPORTED, call + ": type combination not supported (A/B bf16 or fp32, C fp32 or bf16, fp32 compute)");
  if (!alpha || !beta) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, call + ": null alpha/beta");
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const size_t ea = type_bytes(Atype), ec = type_bytes(Ctype);
  const int64_t na = k == 0 ? 0 : ta == CUBLAS_OP_N ? int64_t(k - 1) * lda + m : int64_t(m - 1) * lda + k;
  const int64_t nb = k == 0 ? 0 : tb == CUBLAS_OP_N ? int64_t(n - 1) * ldb + k : int64_t(k - 1) * ldb + n;
  const int64_t nc = int64_t(n - 1) * ldc + m;
  std::string e = range_error(A, size_t(na) * ea, call + " operand A");
  if (e.empty()) e = range_error(B, size_t(nb) * ea, call + " operand B");
  if (e.empty()) e = range_error(C, size_t(nc) * ec, call + " operand C");
  auto overlap = [](const void* p, size_t pn, const void* q, size_t qn) {
    return pn && qn && uintptr_t(p) < uintptr_t(q) + qn && uintptr_t(q) < uintptr_t(p) + pn;
  };
  if (e.empty() && (overlap(C, size_t(nc) * ec, A, size_t(na) * ea) || overlap(C, size_t(nc) * ec, B, size_t(nb) * ea)))
    e = call + ": C overlaps an input operand";
  if (!e.empty()) {
    host_fail(cudaErrorIllegalAddress, e, true);  // on the GPU: a fault inside the GEMM kernel
    return blas_fail(CUBLAS_STATUS_EXECUTION_FAILED, e);
  }
  g_count.gemms++;
  g_count.gemm_flops += 2.0 * double(m) * double(n) * double(k);
  if (opts().dry) return CUBLAS_STATUS_SUCCESS;
  const auto t0 = std::chrono::steady_clock::now();
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  // op(A) as m rows of k, op(B)^T as n rows of k (fp32; bf16 converts exactly), then C(i,j) = al·dot + be·C.
  std::vector<float> Ap(size_t(m) * size_t(k)), Bp(size_t(n) * size_t(k));
  for (int64_t i = 0; i < m; i++)
    for (int64_t l = 0; l < k; l++) Ap[size_t(i * k + l)] = load_elem(A, Atype, ta == CUBLAS_OP_N ? i + l * lda : l + i * lda);
  for (int64_t j = 0; j < n; j++)
    for (int64_t l = 0; l < k; l++) Bp[size_t(j * k + l)] = load_elem(B, Btype, tb == CUBLAS_OP_N ? l + j * ldb : j + l * ldb);
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < m; i++) {
      const float d = dot8(Ap.data() + i * k, Bp.data() + j * k, k);
      const int64_t ci = i + j * ldc;
      if (Ctype == CUDA_R_32F) {
        float* c = static_cast<float*>(C) + ci;
        *c = be == 0.0f ? al * d : al * d + be * *c;  // beta = 0: C is not read (may hold NaN)
      } else {
        __nv_bfloat16* c = static_cast<__nv_bfloat16*>(C) + ci;
        *c = __nv_bfloat16(be == 0.0f ? al * d : al * d + be * float(*c));
      }
    }
  g_count.gemm_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check_canaries(call);
  return g_sticky ? CUBLAS_STATUS_EXECUTION_FAILED : CUBLAS_STATUS_SUCCESS;
}

// ======================================================================== host-side API (gl_emu_api.h)

namespace gl_emu {

const char* precision() {
#ifdef GL_EMU_EXACT
  return "exact";
#else
  return "bf16";
#endif
}
bool dry_run() { return opts().dry; }
bool reverse_order() {
  const int o = g_order_override.load(std::memory_order_relaxed);
  return o < 0 ? opts().reverse : o != 0;
}
void set_reverse_order(bool reverse) { g_order_override = reverse ? 1 : 0; }
bool asan() {
#ifdef GL_EMU_ASAN
  return true;
#else
  return false;
#endif
}

std::string stats_json() {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  std::string s = "{\"kernels\":{";
  bool first = true;
  for (auto& [name, c] : g_count.kernels) {
    s += (first ? "\"" : ",\"") + name + "\":{\"launches\":" + std::to_string(c.launches) + ",\"blocks\":" + std::to_string(c.blocks) +
         ",\"threads\":" + std::to_string(c.threads) + ",\"seconds\":" + std::to_string(c.seconds) + ",\"switches\":" + std::to_string(c.switches) + "}";
    first = false;
  }
  char buf[256];
  std::snprintf(buf, sizeof buf, "},\"gemms\":%lld,\"gemm_flops\":%.6g,\"gemm_seconds\":%.3f,\"memcpys\":%lld,\"memcpy_bytes\":%.6g,\"memsets\":%lld,\"peak_device_bytes\":%zu}",
                (long long)g_count.gemms, g_count.gemm_flops, g_count.gemm_seconds, (long long)g_count.memcpys, g_count.memcpy_bytes, (long long)g_count.memsets, g_peak_bytes);
  return s + buf;
}
void reset_stats() {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  g_count = Counters();
}
int64_t launches(const std::string& prefix) {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  int64_t n = 0;
  for (auto& [name, c] : g_count.kernels)
    if (name.compare(0, prefix.size(), prefix) == 0) n += c.launches;
  return n;
}
Live live() {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  Live l;
  l.streams = int(g_streams.size());
  l.blas_handles = int(g_handles.size());
  l.allocations = g_allocs.size();
  l.bytes = g_live_bytes;
  return l;
}
size_t peak_device_bytes() { return g_peak_bytes; }
void reset_errors() {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
#ifndef GL_EMU_ASAN
  if (!opts().dry)
    for (auto& [k, a] : g_allocs) {  // re-arm the canaries a faulting case overwrote
      std::memset(a.base - kGuard, kCanary, kGuard);
      std::memset(a.base + a.size, kCanary, a.raw_size - kGuard - a.size);
      for (auto& g : a.gaps) std::memset(a.base + g.first, kCanary, g.second);
    }
#endif
  g_sticky = g_last = cudaSuccess;
  g_detail.clear();
  g_detail_code = -1;
  g_blas_detail.clear();
}
std::string last_error_detail() {
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  return g_blas_detail.empty() || g_blas_detail == g_detail ? g_detail : g_detail.empty() ? g_blas_detail : g_detail + " | " + g_blas_detail;
}

}  // namespace gl_emu
