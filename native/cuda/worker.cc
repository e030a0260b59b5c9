#include "worker.h"

#include <utility>

namespace maxsim_cuda {

void Worker::Post(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!started_) {
    started_ = true;
    thread_ = std::thread(&Worker::Loop, this);
  }
  queue_.push_back(std::move(job));
  cv_.notify_one();
}

void Worker::Loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return !queue_.empty(); });
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

}  // namespace maxsim_cuda
