// dist::Watchdog: a hung, stopped or lost rank ends the job, and the job says which.
//
// A rank that stops (SIGSTOP, a node that hangs, a deadlock in one rank's code) or a host whose
// link is cut leaves every other rank waiting in its next collective forever. Each rank runs a
// watchdog thread beside the main thread: every second it tells rank 0's watchdog, over a
// communicator of its own, whether the main thread is waiting in a collective (which one, over
// which group, since when, during which step; the collective wrappers of dist/ mark their waits
// with WaitScope), and rank 0's watchdog answers each rank that it is alive. When a rank has
// waited longer than --collective-timeout, rank 0 names the ranks that did not arrive (silent
// ones: stopped, dead or cut off, grouped by host when a whole host is silent; busy ones: outside
// any collective), records the failure, tells every rank it can reach, and aborts the job.
//
// Every rank that can still act ends on its own, so that a launcher that cannot reach a lost
// host (mpirun waits for its daemon) leaves no rank behind: a rank told rank 0's verdict exits;
// a rank that has waited past the timeout without hearing from rank 0 for several seconds (its
// own host is cut off, or rank 0's is) says so and exits. A rank terminated by the launcher
// (SIGTERM, as mpirun ends a job whose rank or host it lost) logs what it was waiting in, and
// rank 0 records it as the job's end before the signal takes the process. A second thread, the
// monitor, which makes no MPI call, does that: the watchdog thread may then be held inside MPI
// (Open MPI's TCP transport holds an endpoint's lock while the main thread reports the lost
// peer). On rank 0 the monitor also rewrites a heartbeat file every second with what rank 0 is
// doing, so that a rank 0 ended without a word (Open MPI's own abort on a reset connection
// _exits, an OOM kill) still leaves its last state for the launcher wrappers to record.
//
// The watchdog thread makes MPI calls of its own, on its own communicator, so the runtime asks
// for MPI_THREAD_MULTIPLE; the main thread's discipline (dist/comm.h) is unchanged.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/comm.h"

namespace k3::dist {

// Marks the main thread as waiting in the collective `what` over `over` while it lives (checks
// the main thread, as require_main_thread does), and counts the wait and the `bytes_sent` to
// other members in the current traffic kind (dist/traffic.h). Nested scopes keep the outer mark
// and add only their bytes: the outer scope's time holds theirs.
class WaitScope {
 public:
  WaitScope(const char* what, const Comm& over, std::uint64_t bytes_sent = 0);
  ~WaitScope();
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  bool outer_ = false;
  std::int64_t since_ = 0;  // steady-clock ticks at the start of an outer scope
};

// The stage the job is in ("pre-flight and loading", "generation"), named in the watchdog's
// message; it resets the stage's step count.
void set_stage(std::string stage);
// The step within the stage (the generator's engine steps): one relaxed atomic store, so the
// hot loop pays nothing; the watchdog thread formats "<stage>, step N" for its heartbeat.
void set_stage_step(std::uint64_t step);

class Watchdog {
 public:
  // Writes the job's failure record (the artifacts' status and summary) with `reason`; called on
  // rank 0's watchdog thread just before the job ends, while the main thread waits.
  using RecordFailure = std::function<void(const std::string& reason)>;

  // Collective over `world`. `timeout_s` <= 0 starts nothing. A non-empty `heartbeat_file` is
  // rewritten by rank 0 every second: "<UTC time> rank 0 on host H had waited N s in <collective>
  // over <group> during <stage>, step S".
  Watchdog(const Comm& world, double timeout_s, RecordFailure record_failure = {},
           std::filesystem::path heartbeat_file = {});
  ~Watchdog();  // stops the thread (collective: every rank destroys its watchdog)
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // The host of every world rank, once the nodes are known: messages then name each rank's host,
  // and a host whose every rank is silent is named as the host that was lost.
  void set_hosts(std::vector<std::string> host_of_rank);

 private:
  struct Pipe {
    int read = -1;
    int write = -1;
  };
  static Pipe make_pipe(const char* for_whom);
  void run();
  void monitor();  // the monitor thread: a SIGTERM ends the rank with what it was doing
  bool write_heartbeat(const std::string& line) const;  // false once it cannot
  std::vector<std::string> hosts() const;
  [[noreturn]] void end_on_signal(int me, const std::string& message);

  Comm comm_;
  double timeout_s_ = 0;
  RecordFailure record_failure_;
  std::thread thread_;
  std::filesystem::path heartbeat_file_;
  std::thread monitor_thread_;
  Pipe wake_;    // 'S' stops the watchdog thread (its poll is also its one-second tick)
  Pipe signal_;  // 'T' from the SIGTERM handler, 'S' stops the monitor thread
  mutable std::mutex hosts_mutex_;
  std::vector<std::string> hosts_;
};

}  // namespace k3::dist
