// The worker thread of a runtime: runs queued jobs one at a time in FIFO order. It starts with the
// first job and lives as long as the process (runtimes are never destroyed).
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace maxsim_cuda {

class Worker {
 public:
  // After a job, the thread polls the queue this long before it sleeps on the condition variable:
  // a caller that submits its next job within it (a server's next request, a loop of small calls)
  // skips the futex wake-up of a sleeping thread. It costs at most this much of one core per job
  // (none on a machine of fewer than 4 hardware threads, where it would compete with the JS thread).
  static constexpr int kSpinMicroseconds = 100;

  // Queues a job (thread-safe; never blocks on the GPU). The job must not throw.
  void Post(std::function<void()> job);

 private:
  void Loop();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::atomic<int64_t> queued_{0};  // queue_.size(), readable without the mutex while polling
  bool started_ = false;
  bool sleeping_ = false;  // the thread waits on cv_ (Post notifies only then)
  std::thread thread_;
};

}  // namespace maxsim_cuda
