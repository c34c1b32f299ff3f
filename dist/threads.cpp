#include "dist/threads.h"

#include <string>

#include "common/error.h"

namespace k3::dist {

namespace {

int checked_threads(int threads) {
  if (threads < 1) throw UsageError("--threads " + std::to_string(threads) + " must be >= 1");
  return threads;
}

}  // namespace

ThreadCap::ThreadCap(int threads)
    : threads_(checked_threads(threads)),
      control_(oneapi::tbb::global_control::max_allowed_parallelism,
               static_cast<size_t>(threads_)) {}

int ThreadCap::active_parallelism() {
  return static_cast<int>(oneapi::tbb::global_control::active_value(
      oneapi::tbb::global_control::max_allowed_parallelism));
}

}  // namespace k3::dist
