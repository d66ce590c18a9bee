// Fixed pool of workers; parallel_for blocks until every index ran. Work is split over output elements only, so
// results never depend on the thread count. A job ends when all its indices are done, whichever threads ran them:
// a worker the OS has descheduled (a loaded machine) does not hold up the caller, and it cannot run an index of a
// job it joins late (indices are claimed together with the job's tag). Between jobs a worker spins briefly before
// it sleeps, so the many small dispatches of a decoding step do not each pay a condition-variable wake-up.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gl {

class ThreadPool {
 public:
  explicit ThreadPool(int n) {
    for (int i = 1; i < n; i++) workers_.emplace_back([this] { loop(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> g(mu_);
      quit_ = true;
      gen_.fetch_add(1);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return int(workers_.size()) + 1; }

  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
    if (n <= 0) return;
    if (workers_.empty() || n == 1) {
      for (int64_t i = 0; i < n; i++) fn(i);
      return;
    }
    Job job{&fn, n, 0};
    {
      std::lock_guard<std::mutex> g(mu_);
      job.tag = uint32_t(gen_.fetch_add(1) + 1);
      job_ = job;
      done_.store(0);
      claim_.store(uint64_t(job.tag) << 32);
    }
    if (sleeping_.load() > 0) cv_.notify_all();
    run(job);
    if (!spin([&] { return done_.load() == n; })) {
      std::unique_lock<std::mutex> g(mu_);
      done_cv_.wait(g, [&] { return done_.load() == n; });
    }
  }

 private:
  struct Job {
    const std::function<void(int64_t)>* fn;
    int64_t n;
    uint32_t tag;
  };

  // Polls `ready` for up to ~20 µs; true when it became true.
  template <typename F>
  static bool spin(F&& ready) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
    for (int i = 0;; i++) {
      if (ready()) return true;
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return false;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }

  // Claims indices of `job` while it is the current job (tag in the high half of claim_, next index in the low).
  // An index is only ever claimed below n while the job's caller waits for it, so job.fn is alive when called.
  void run(const Job& job) {
    uint64_t c = claim_.load();
    while (true) {
      if (uint32_t(c >> 32) != job.tag) return;  // a later job: this one is over
      const int64_t i = int64_t(c & 0xffffffffu);
      if (i >= job.n) return;
      if (!claim_.compare_exchange_weak(c, c + 1)) continue;  // c reloaded
      (*job.fn)(i);
      if (done_.fetch_add(1) + 1 == job.n) {
        std::lock_guard<std::mutex> g(mu_);
        done_cv_.notify_one();
      }
      c = claim_.load();
    }
  }

  void loop() {
    uint64_t seen = 0;
    while (true) {
      if (!spin([&] { return gen_.load() != seen; })) {
        std::unique_lock<std::mutex> g(mu_);
        sleeping_.fetch_add(1);
        cv_.wait(g, [&] { return gen_.load() != seen; });
        sleeping_.fetch_sub(1);
      }
      Job job;
      {
        std::lock_guard<std::mutex> g(mu_);  // a consistent snapshot of the current job
        if (quit_) return;
        seen = gen_.load();
        job = job_;
      }
      run(job);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  Job job_{nullptr, 0, 0};
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> done_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<uint64_t> gen_{0};
  bool quit_ = false;
};

}  // namespace gl
