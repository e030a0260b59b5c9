// The worker thread of a runtime: runs queued jobs one at a time in FIFO order. It starts with the
// first job and lives as long as the process (runtimes are never destroyed).
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace maxsim_cuda {

class Worker {
 public:
  // Queues a job (thread-safe; never blocks on the GPU). The job must not throw.
  void Post(std::function<void()> job);

 private:
  void Loop();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool started_ = false;
  std::thread thread_;
};

}  // namespace maxsim_cuda
