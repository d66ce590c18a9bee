// Fixed pool of workers; parallel_for blocks until every index ran. Work is split over output elements only, so
// results never depend on the thread count. Between jobs a worker spins briefly before it sleeps, so the many
// small dispatches of a decoding step do not each pay a condition-variable wake-up.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
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
    {
      std::lock_guard<std::mutex> g(mu_);
      fn_ = &fn;
      n_ = n;
      next_.store(0);
      active_.store(int(workers_.size()));
      gen_.fetch_add(1);
    }
    if (sleeping_.load() > 0) cv_.notify_all();
    run();
    if (!spin([this] { return active_.load() == 0; })) {
      std::unique_lock<std::mutex> g(mu_);
      done_cv_.wait(g, [this] { return active_.load() == 0; });
    }
    fn_ = nullptr;
  }

 private:
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
  void run() {
    for (int64_t i; (i = next_.fetch_add(1)) < n_;) (*fn_)(i);
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
      {
        std::lock_guard<std::mutex> g(mu_);  // the job's fields were written under the lock
        if (quit_) return;
        seen = gen_.load();
      }
      run();
      if (active_.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> g(mu_);
        done_cv_.notify_one();
      }
    }
  }
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int> active_{0}, sleeping_{0};
  std::atomic<uint64_t> gen_{0};
  bool quit_ = false;
};

}  // namespace gl
