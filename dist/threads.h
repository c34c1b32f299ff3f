// The per-rank cap on oneTBB worker threads.
//
// oneTBB reads no environment variable and sizes itself from the affinity mask, which is the
// whole machine for oversubscribed ranks: 64 ranks x 2 workers on 2 cores. The cap is applied
// once in main() for the whole process lifetime.
#pragma once

#include <oneapi/tbb/global_control.h>

namespace k3::dist {

class ThreadCap {
 public:
  explicit ThreadCap(int threads);  // throws UsageError for threads < 1
  ThreadCap(const ThreadCap&) = delete;
  ThreadCap& operator=(const ThreadCap&) = delete;

  int threads() const { return threads_; }
  // What oneTBB will actually use now (min of the cap and the hardware it sees).
  static int active_parallelism();

 private:
  int threads_;
  oneapi::tbb::global_control control_;
};

}  // namespace k3::dist
