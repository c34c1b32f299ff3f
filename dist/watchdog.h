// dist::Watchdog: a hung rank ends the job.
//
// A rank that stops (SIGSTOP, a node that hangs, a deadlock in one rank's code) leaves every
// other rank waiting in its next collective forever. Each rank runs a watchdog thread beside the
// main thread: every second it tells rank 0's watchdog, over a communicator of its own, whether
// the main thread is waiting in a collective (which one, since when, during which step; the
// collective wrappers of dist/ mark their waits with WaitScope). When a rank has waited longer
// than --collective-timeout, rank 0 names the ranks that did not arrive (those it has not heard
// from for several seconds: stopped or dead; and those busy outside any collective), logs one
// message and aborts the job. If rank 0 itself is the one that stopped, the waiting ranks abort
// after the timeout plus a grace period, saying that rank 0 does not answer.
//
// The watchdog thread makes MPI calls of its own, on its own communicator, so the runtime asks
// for MPI_THREAD_MULTIPLE; the main thread's discipline (dist/comm.h) is unchanged.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "dist/comm.h"

namespace k3::dist {

// Marks the main thread as waiting in the collective `what` while it lives (checks the main
// thread, as require_main_thread does). Nested scopes keep the outer mark.
class WaitScope {
 public:
  explicit WaitScope(const char* what);
  ~WaitScope();
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  bool outer_ = false;
};

// The stage the job is in ("pre-flight and loading", "generation"), named in the watchdog's
// message; it resets the stage's step count.
void set_stage(std::string stage);
// The step within the stage (the generator's engine steps): one relaxed atomic store, so the
// hot loop pays nothing; the watchdog thread formats "<stage>, step N" for its heartbeat.
void set_stage_step(std::uint64_t step);

class Watchdog {
 public:
  // Collective over `world`. `timeout_s` <= 0 starts nothing.
  Watchdog(const Comm& world, double timeout_s);
  ~Watchdog();  // stops the thread (collective: every rank destroys its watchdog)
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void run();
  Comm comm_;
  double timeout_s_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
};

}  // namespace k3::dist
