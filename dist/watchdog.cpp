#include "dist/watchdog.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.h"
#include "dist/logging.h"

namespace k3::dist {

namespace {

using Clock = std::chrono::steady_clock;

// What the main thread is doing, read by the watchdog thread.
std::atomic<const char*> g_waiting_in{nullptr};  // the collective, null when not waiting
std::atomic<std::int64_t> g_waiting_since{0};    // Clock ticks
std::mutex g_stage_mutex;
std::string g_stage = "start";
std::atomic<std::uint64_t> g_stage_step{0};  // 0: no step count in this stage

std::string current_step() {
  const std::uint64_t step = g_stage_step.load(std::memory_order_relaxed);
  const std::lock_guard lock(g_stage_mutex);
  return step ? fmt::format("{}, step {}", g_stage, step) : g_stage;
}

double seconds_since(std::int64_t ticks) {
  return std::chrono::duration<double>(Clock::now().time_since_epoch() - Clock::duration(ticks))
      .count();
}

constexpr int kTag = 4242;
constexpr auto kInterval = std::chrono::seconds(1);
constexpr double kSilentAfter = 5.0;  // s without a heartbeat: stopped or dead
constexpr std::size_t kTextBytes = 96;

// One rank's heartbeat, sent every second to rank 0.
struct Beat {
  std::int32_t waiting = 0;  // 1: the main thread waits in a collective
  double waited_s = 0;
  std::array<char, kTextBytes> what{};
  std::array<char, kTextBytes> step{};
};

Beat my_beat() {
  Beat b;
  const char* what = g_waiting_in.load();
  if (what) {
    b.waiting = 1;
    b.waited_s = seconds_since(g_waiting_since.load());
    std::strncpy(b.what.data(), what, kTextBytes - 1);
  }
  const std::string step = current_step();
  std::strncpy(b.step.data(), step.c_str(), kTextBytes - 1);
  return b;
}

// Receives every heartbeat waiting at rank 0, calling on_beat(source, beat) for each.
template <class OnBeat>
void drain_beats(const Comm& comm, OnBeat&& on_beat) {
  for (;;) {
    int pending = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kTag, comm.handle(), &pending, &status);
    if (!pending) return;
    Beat b;
    MPI_Recv(&b, sizeof b, MPI_BYTE, status.MPI_SOURCE, kTag, comm.handle(), MPI_STATUS_IGNORE);
    on_beat(status.MPI_SOURCE, b);
  }
}

}  // namespace

WaitScope::WaitScope(const char* what) {
  require_main_thread(what);
  const char* none = nullptr;
  outer_ = g_waiting_in.compare_exchange_strong(none, what);
  if (outer_) g_waiting_since.store(Clock::now().time_since_epoch().count());
}

WaitScope::~WaitScope() {
  if (outer_) g_waiting_in.store(nullptr);
}

void set_stage(std::string stage) {
  const std::lock_guard lock(g_stage_mutex);
  g_stage = std::move(stage);
  g_stage_step.store(0, std::memory_order_relaxed);
}

void set_stage_step(std::uint64_t step) { g_stage_step.store(step, std::memory_order_relaxed); }

Watchdog::Watchdog(const Comm& world, double timeout_s) : timeout_s_(timeout_s) {
  if (timeout_s <= 0) return;
  MPI_Comm dup = MPI_COMM_NULL;
  if (MPI_Comm_dup(world.handle(), &dup) != MPI_SUCCESS) {
    throw InternalError("MPI_Comm_dup for the watchdog failed");
  }
  comm_ = Comm(dup);
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  if (!thread_.joinable()) return;
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  // Heartbeats that reached rank 0 after its last drain are received, so that the communicator
  // is freed (collectively, by the Comm) with nothing waiting in it.
  if (comm_.rank() == 0) drain_beats(comm_, [](int, const Beat&) {});
}

void Watchdog::run() {
  const int me = comm_.rank();
  const int world = comm_.size();
  std::vector<Beat> beats(static_cast<std::size_t>(world));
  std::vector<Clock::time_point> heard(static_cast<std::size_t>(world), Clock::now());
  // Heartbeats in flight to rank 0, each buffer untouched until its send completes; a rank 0
  // that stopped leaves them pending (small, eager), and no more are sent once all are in use.
  std::array<Beat, 8> in_flight{};
  std::array<MPI_Request, 8> sends;
  sends.fill(MPI_REQUEST_NULL);
  // A rank that outwaits the timeout by this much assumes rank 0's watchdog cannot act.
  const double grace = std::max(15.0, timeout_s_ * 0.5);
  auto abort_job = [&](const std::string& message) {
    spdlog::critical("{}", message);
    flush_logs();
    MPI_Abort(comm_.handle(), static_cast<int>(ExitCode::kInternal));
  };
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      if (wake_.wait_for(lock, kInterval, [this] { return stop_; })) break;
    }
    const Beat mine = my_beat();
    if (me != 0) {
      for (std::size_t i = 0; i < sends.size(); ++i) {
        int done = 0;
        MPI_Test(&sends[i], &done, MPI_STATUS_IGNORE);  // a null request tests done
        if (!done) continue;
        in_flight[i] = mine;
        MPI_Isend(&in_flight[i], sizeof(Beat), MPI_BYTE, 0, kTag, comm_.handle(), &sends[i]);
        break;
      }
      if (mine.waiting && mine.waited_s > timeout_s_ + grace) {
        abort_job(fmt::format(
            "collective timeout: rank {} has waited {:.0f} s in {} during {} (--collective-timeout "
            "{:g}), and rank 0, which names the ranks that did not arrive, does not answer: rank 0 "
            "is stopped or dead",
            me, mine.waited_s, mine.what.data(), mine.step.data(), timeout_s_));
      }
      continue;
    }
    // Rank 0: drain every heartbeat, then judge.
    drain_beats(comm_, [&](int source, const Beat& b) {
      beats[static_cast<std::size_t>(source)] = b;
      heard[static_cast<std::size_t>(source)] = Clock::now();
    });
    beats[0] = mine;
    heard[0] = Clock::now();
    int longest = -1;
    for (int r = 0; r < world; ++r) {
      const Beat& b = beats[static_cast<std::size_t>(r)];
      if (b.waiting && b.waited_s > timeout_s_ &&
          (longest < 0 || b.waited_s > beats[static_cast<std::size_t>(longest)].waited_s)) {
        longest = r;
      }
    }
    if (longest < 0) continue;
    const auto now = Clock::now();
    std::vector<std::string> absent;
    int waiting = 0;
    for (int r = 0; r < world; ++r) {
      const Beat& b = beats[static_cast<std::size_t>(r)];
      const double silent =
          std::chrono::duration<double>(now - heard[static_cast<std::size_t>(r)]).count();
      if (silent > kSilentAfter) {
        absent.push_back(fmt::format("rank {} (silent for {:.0f} s: stopped or dead; last seen {} "
                                     "during {})",
                                     r, silent, b.waiting ? b.what.data() : "outside collectives",
                                     b.step.data()));
      } else if (!b.waiting) {
        absent.push_back(fmt::format("rank {} (busy outside collectives during {})", r,
                                     b.step.data()));
      } else {
        ++waiting;
      }
    }
    const Beat& w = beats[static_cast<std::size_t>(longest)];
    std::string names;
    for (std::size_t i = 0; i < absent.size() && i < 16; ++i)
      names += (i ? ", " : "") + absent[i];
    if (absent.size() > 16) names += fmt::format(", and {} more", absent.size() - 16);
    abort_job(fmt::format(
        "collective timeout: rank {} has waited {:.0f} s in {} during {} (--collective-timeout "
        "{:g}); {} of {} ranks are waiting; did not arrive: {}",
        longest, w.waited_s, w.what.data(), w.step.data(), timeout_s_, waiting, world,
        absent.empty() ? "none (every rank waits: a deadlock between collectives)" : names));
  }
  for (MPI_Request& r : sends) {
    if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
  }
  MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
}

}  // namespace k3::dist
