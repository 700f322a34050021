#include "runtime/host/compute_workers.h"

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "runtime/memory.h"

namespace kiln::host {
namespace {

// Idle workers kept beyond this many exit after their task.
int MaxIdleWorkers() {
  static const int max_idle =
      static_cast<int>(std::max(4u, 2 * std::thread::hardware_concurrency()));
  return max_idle;
}

thread_local bool on_worker = false;
thread_local int worker_index = -1;

// One worker thread and its mailbox, shared by the thread and its pool (so
// either may go first).
struct Worker {
  int index = 0;
  absl::Mutex mu;
  absl::FunctionRef<void()>* task ABSL_GUARDED_BY(mu) = nullptr;
  std::shared_ptr<runtime::MemoryAccount> account ABSL_GUARDED_BY(mu);
  bool stop ABSL_GUARDED_BY(mu) = false;

  static void Loop(std::shared_ptr<Worker> self) {
    on_worker = true;
    worker_index = self->index;
    absl::MutexLock lock(&self->mu);
    while (true) {
      self->mu.Await(absl::Condition(
          +[](Worker* w) { return w->task != nullptr || w->stop; },
          self.get()));
      if (self->task == nullptr) return;  // stopped
      absl::FunctionRef<void()>* task = self->task;
      std::shared_ptr<runtime::MemoryAccount> account = self->account;
      self->mu.Unlock();
      {
        runtime::AccountScope scope(std::move(account));
        (*task)();
      }
      self->mu.Lock();
      self->task = nullptr;
      self->account.reset();
    }
  }
};

class Pool {
 public:
  std::shared_ptr<Worker> Take() {
    {
      absl::MutexLock lock(&mu_);
      if (!idle_.empty()) {
        std::shared_ptr<Worker> w = std::move(idle_.back());
        idle_.pop_back();
        return w;
      }
    }
    auto w = std::make_shared<Worker>();
    {
      absl::MutexLock lock(&mu_);
      w->index = started_++;
    }
    std::thread(Worker::Loop, w).detach();
    return w;
  }
  void Give(std::shared_ptr<Worker> w) {
    {
      absl::MutexLock lock(&mu_);
      if (static_cast<int>(idle_.size()) < MaxIdleWorkers()) {
        idle_.push_back(std::move(w));  // the most recent on top
        return;
      }
    }
    absl::MutexLock lock(&w->mu);
    w->stop = true;
  }
  int idle() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(idle_.size());
  }

 private:
  absl::Mutex mu_;
  std::vector<std::shared_ptr<Worker>> idle_ ABSL_GUARDED_BY(mu_);
  int started_ ABSL_GUARDED_BY(mu_) = 0;
};

Pool& ThePool() {
  static Pool* pool = new Pool();  // workers outlive static destruction
  return *pool;
}

}  // namespace

void RunOnComputeWorker(absl::FunctionRef<void()> fn) {
  if (on_worker) {
    fn();
    return;
  }
  std::shared_ptr<Worker> w = ThePool().Take();
  {
    absl::MutexLock lock(&w->mu);
    w->task = &fn;
    w->account = runtime::AccountScope::Current();
    w->mu.Await(absl::Condition(
        +[](Worker* w) { return w->task == nullptr; },
        w.get()));
  }
  ThePool().Give(std::move(w));
}

int IdleComputeWorkers() { return ThePool().idle(); }

int ComputeWorkerIndex() { return worker_index; }

}  // namespace kiln::host
