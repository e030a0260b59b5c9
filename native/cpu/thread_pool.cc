#include "thread_pool.h"

#include "../common/maxsim_constants.h"

#include <cstdlib>

namespace maxsim_cpu {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; i++) workers_.emplace_back([this, i] { Loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Run(int workers, const std::function<void(int)>& fn) {
  std::lock_guard<std::mutex> job_lock(job_mutex_);
  if (workers > size()) workers = size();
  if (workers <= 1) {
    fn(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    active_workers_ = workers - 1;
    pending_ = workers - 1;
    generation_++;
  }
  wake_.notify_all();
  fn(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::Loop(int index) {
  unsigned long seen = 0;
  for (;;) {
    const std::function<void(int)>* job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index > active_workers_) continue;  // not needed for this job
      job = job_;
    }
    (*job)(index);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

ThreadPool& GlobalPool() {
  // Leaked on purpose: joining threads from a static destructor at process exit can deadlock.
  static ThreadPool* pool = [] {
    int n = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("MAXSIM_THREADS")) {
      const int v = std::atoi(env);
      if (v > 0) n = v;
    }
    if (n < 1) n = 1;
    if (n > MAXSIM_MAX_THREADS) n = MAXSIM_MAX_THREADS;  // the cap of the threads option (constants.json)
    return new ThreadPool(n);
  }();
  return *pool;
}

}  // namespace maxsim_cpu
