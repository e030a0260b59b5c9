// A persistent pool of worker threads for the CPU engine. One job runs at a time (callers queue on
// a mutex); the calling thread takes part as worker 0, so a pool of N threads runs N-way parallel.
#pragma once
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace maxsim_cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls fn(worker) for worker in [0, min(workers, size())), in parallel, and waits for all.
  void Run(int workers, const std::function<void(int)>& fn);

 private:
  void Loop(int index);

  std::vector<std::thread> workers_;
  std::mutex job_mutex_;  // serializes Run calls
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int)>* job_ = nullptr;
  int active_workers_ = 0;  // workers taking part in the current job (besides the caller)
  int pending_ = 0;         // workers still running the current job
  unsigned long generation_ = 0;
  bool stop_ = false;
};

// The process-wide pool, created on first use with the machine's core count (or MAXSIM_THREADS).
ThreadPool& GlobalPool();

}  // namespace maxsim_cpu
