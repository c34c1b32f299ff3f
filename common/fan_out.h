// k3::fan_out: one stage spread over a few plain threads, outside oneTBB.
//
// The planning rank of a job works alone for seconds (joining the index, binding, planning
// every rank) while every other rank of its node sleeps in a collective; k3eval caps oneTBB at
// its --threads per rank for the whole process (dist/threads.h), so this stage takes the node's
// cores with threads of its own. Work is cut into contiguous chunks, so results written by
// index are the same as a serial loop's, and the exception of the lowest chunk is the one
// rethrown, as a serial loop would report it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

namespace k3 {

// Threads for `items` independent items: the hardware's, at most 16, at most one per item.
inline int fan_out_threads(std::size_t items) {
  const std::size_t hardware = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(std::max<std::size_t>(1, std::min({hardware, std::size_t{16}, items})));
}

// Calls body(begin, end) over contiguous chunks covering [0, items), on fan_out_threads(items)
// threads (the caller's among them).
template <class Body>
void fan_out(std::size_t items, Body&& body) {
  const int threads = fan_out_threads(items);
  if (threads <= 1) {
    if (items > 0) body(std::size_t{0}, items);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(threads));
  auto chunk = [&](int t) {
    const std::size_t begin = items * static_cast<std::size_t>(t) / threads;
    const std::size_t end = items * static_cast<std::size_t>(t + 1) / threads;
    try {
      if (begin < end) body(begin, end);
    } catch (...) {
      errors[static_cast<std::size_t>(t)] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) pool.emplace_back(chunk, t);
  chunk(0);
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace k3
