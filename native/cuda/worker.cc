#include "worker.h"

#include <chrono>
#include <utility>

namespace maxsim_cuda {

namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

void Worker::Post(std::function<void()> job) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!started_) {
      started_ = true;
      thread_ = std::thread(&Worker::Loop, this);
    }
    queue_.push_back(std::move(job));
    queued_.fetch_add(1, std::memory_order_release);
    wake = sleeping_;
  }
  if (wake) cv_.notify_one();
}

void Worker::Loop() {
  // with fewer than 4 hardware threads the poll would take the JS thread's core: sleep at once
  const bool spin = std::thread::hardware_concurrency() >= 4;
  for (;;) {
    if (spin && queued_.load(std::memory_order_acquire) == 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicroseconds);
      while (queued_.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < until) {
        for (int i = 0; i < 32; i++) CpuRelax();
      }
    }
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      sleeping_ = true;
      cv_.wait(lock, [&] { return !queue_.empty(); });
      sleeping_ = false;
      job = std::move(queue_.front());
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
    }
    job();
  }
}

}  // namespace maxsim_cuda
