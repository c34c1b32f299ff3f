#include "dist/watchdog.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <optional>
#include <span>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.h"
#include "dist/layout.h"
#include "dist/logging.h"
#include "dist/traffic.h"

namespace k3::dist {

namespace {

using Clock = std::chrono::steady_clock;

// What the main thread is doing, read by the watchdog thread.
std::atomic<const char*> g_waiting_in{nullptr};    // the collective, null when not waiting
std::atomic<const char*> g_waiting_over{nullptr};  // the communicator's name
std::atomic<std::int64_t> g_waiting_since{0};      // Clock ticks
// The last collective the main thread left, and when: a heartbeat written between two
// collectives still names where the rank was (a launcher may end rank 0 before its next one).
std::atomic<const char*> g_left_in{nullptr};
std::atomic<const char*> g_left_over{nullptr};
std::atomic<std::int64_t> g_left_at{0};
std::mutex g_stage_mutex;
std::string g_stage = "start";
std::atomic<std::uint64_t> g_stage_step{0};  // 0: no step count in this stage
// The write end of the running watchdog's signal pipe, for the SIGTERM handler.
std::atomic<int> g_signal_fd{-1};

extern "C" void wake_on_sigterm(int) {
  const int fd = g_signal_fd.load();
  if (fd < 0) return;
  const char signal_byte = 'T';
  [[maybe_unused]] const ssize_t n = ::write(fd, &signal_byte, 1);  // async-signal-safe
}

std::string current_step() {
  const std::uint64_t step = g_stage_step.load(std::memory_order_relaxed);
  const std::lock_guard lock(g_stage_mutex);
  return step ? fmt::format("{}, step {}", g_stage, step) : g_stage;
}

double seconds_since(Clock::time_point then) {
  return std::chrono::duration<double>(Clock::now() - then).count();
}

constexpr int kBeatTag = 4242;     // every rank -> rank 0, every second: a Beat
constexpr int kAliveTag = 4243;    // rank 0 -> every rank, every second: one int
constexpr int kVerdictTag = 4244;  // rank 0 -> every rank: the message that ends the job
constexpr auto kInterval = std::chrono::seconds(1);
constexpr double kSilentAfter = 5.0;  // s without a heartbeat: stopped, dead or cut off
constexpr double kAliveWithin = 2.0;  // s: a rank heard this recently is running
// A rank terminated by the launcher names the ranks it has not heard from for this long.
constexpr double kSilentAtSignal = 2.5;
constexpr double kVerdictExitDelay = 3.0;  // s a told rank leaves to the launcher's kill
constexpr std::size_t kTextBytes = 128;
constexpr int kAlive = 1;

// One rank's heartbeat, sent every second to rank 0.
struct Beat {
  std::int32_t waiting = 0;  // 1: the main thread waits in a collective
  double waited_s = 0;
  std::array<char, kTextBytes> what{};  // "allreduce over attn-tp"
  std::array<char, kTextBytes> step{};  // "generation, step 12"
};

template <std::size_t N>
void copy_text(std::array<char, N>& to, const std::string& from) {
  from.copy(to.data(), N - 1);
}

Beat my_beat() {
  Beat b;
  const char* what = g_waiting_in.load();
  if (what) {
    b.waiting = 1;
    b.waited_s = seconds_since(Clock::time_point(Clock::duration(g_waiting_since.load())));
    const char* over = g_waiting_over.load();
    copy_text(b.what, fmt::format("{} over {}", what, over ? over : "?"));
  }
  copy_text(b.step, current_step());
  return b;
}

// Receives every message with `tag` waiting on `comm`, calling on_message(source, bytes).
template <class OnMessage>
void drain(const Comm& comm, int tag, OnMessage&& on_message) {
  for (;;) {
    int pending = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, tag, comm.handle(), &pending, &status);
    if (!pending) return;
    int bytes = 0;
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    std::vector<char> buffer(static_cast<std::size_t>(std::max(bytes, 0)));
    MPI_Recv(buffer.data(), bytes, MPI_BYTE, status.MPI_SOURCE, tag, comm.handle(),
             MPI_STATUS_IGNORE);
    on_message(status.MPI_SOURCE, std::span<const char>(buffer));
  }
}

// What rank 0 last heard from one rank.
struct Peer {
  Beat beat;
  Clock::time_point heard = Clock::now();
};

// Rank 0's latest view of every rank, copied after each tick for the signal thread: the thread
// that makes MPI calls can be held inside one (a TCP endpoint's lock, taken by a main thread
// that reports a lost peer), and a rank terminated then must still say what it saw.
std::mutex g_seen_mutex;
std::vector<Peer> g_seen;
Clock::time_point g_seen_at = Clock::now();

std::string host_of(const std::vector<std::string>& hosts, int rank) {
  return rank < static_cast<int>(hosts.size()) ? hosts[static_cast<std::size_t>(rank)] : "";
}

// The ranks silent for more than `silent_after` seconds at time `at`, a whole host at a time where
// every rank of a host is silent ("host h2 (ranks {4..7}, every rank of the host) silent for
// 21 s: ...").
std::vector<std::string> describe_silent(const std::vector<Peer>& peers,
                                         const std::vector<std::string>& hosts,
                                         double silent_after, Clock::time_point at) {
  const auto silent_for = [at](const Peer& p) {
    return std::chrono::duration<double>(at - p.heard).count();
  };
  const int world = static_cast<int>(peers.size());
  std::vector<std::string> out;
  for (int r = 0; r < world;) {
    const std::string host = host_of(hosts, r);
    int end = r + 1;  // the ranks of a host are one contiguous block (discover_nodes checks it)
    while (!host.empty() && end < world && host_of(hosts, end) == host) ++end;
    std::vector<int> silent;
    double least = 1e300;
    for (int q = r; q < end; ++q) {
      const double s = silent_for(peers[static_cast<std::size_t>(q)]);
      if (s > silent_after) {
        silent.push_back(q);
        least = std::min(least, s);
      }
    }
    const Beat& first = peers[static_cast<std::size_t>(r)].beat;
    if (!host.empty() && end - r > 0 && static_cast<int>(silent.size()) == end - r &&
        hosts.size() > 1) {
      out.push_back(fmt::format(
          "host {} (ranks {}, every rank of the host) silent for {:.0f} s: stopped, dead or cut "
          "off; last seen {} during {}",
          host, format_members(silent), least,
          first.waiting ? "in " + std::string(first.what.data()) : "outside collectives",
          first.step.data()));
    } else {
      for (int q : silent) {
        const Peer& p = peers[static_cast<std::size_t>(q)];
        out.push_back(fmt::format(
            "rank {} (silent for {:.0f} s: stopped or dead; last seen {} during {}{})", q,
            silent_for(p),
            p.beat.waiting ? "in " + std::string(p.beat.what.data()) : "outside collectives",
            p.beat.step.data(), host.empty() ? "" : "; on host " + host));
      }
    }
    r = end;
  }
  return out;
}

// Rank 0's judgement: the message that ends the job once some rank has waited past the timeout.
std::optional<std::string> judge(const std::vector<Peer>& peers,
                                 const std::vector<std::string>& hosts, double timeout_s) {
  const int world = static_cast<int>(peers.size());
  int longest = -1;
  for (int r = 0; r < world; ++r) {
    const Beat& b = peers[static_cast<std::size_t>(r)].beat;
    if (b.waiting && b.waited_s > timeout_s &&
        (longest < 0 || b.waited_s > peers[static_cast<std::size_t>(longest)].beat.waited_s)) {
      longest = r;
    }
  }
  if (longest < 0) return std::nullopt;
  // A rank last heard a few seconds ago may have just stopped or may be late by a beat: the
  // verdict waits (at most kSilentAfter - kAliveWithin s) until it is heard again or is silent.
  for (const Peer& p : peers) {
    const double silent = seconds_since(p.heard);
    if (silent > kAliveWithin && silent <= kSilentAfter) return std::nullopt;
  }
  std::vector<std::string> absent = describe_silent(peers, hosts, kSilentAfter, Clock::now());
  int waiting = 0;
  for (int r = 0; r < world; ++r) {
    const Peer& p = peers[static_cast<std::size_t>(r)];
    if (seconds_since(p.heard) > kSilentAfter) continue;
    if (p.beat.waiting) {
      ++waiting;
    } else {
      absent.push_back(
          fmt::format("rank {} (busy outside collectives during {})", r, p.beat.step.data()));
    }
  }
  std::string names;
  for (std::size_t i = 0; i < absent.size() && i < 16; ++i) names += (i ? ", " : "") + absent[i];
  if (absent.size() > 16) names += fmt::format(", and {} more", absent.size() - 16);
  const Beat& w = peers[static_cast<std::size_t>(longest)].beat;
  const std::string host = host_of(hosts, longest);
  return fmt::format(
      "collective timeout: rank {}{} has waited {:.0f} s in {} during {} (--collective-timeout "
      "{:g}); {} of {} ranks are waiting; did not arrive: {}",
      longest, host.empty() ? "" : " on host " + host, w.waited_s, w.what.data(), w.step.data(),
      timeout_s, waiting, world,
      absent.empty() ? "none (every rank waits: a deadlock between collectives)" : names);
}

// What a rank terminated by the launcher says: what it was waiting in, and on rank 0 the ranks
// it had not heard from (the launcher ends a job when it loses a rank or a host).
// "rank 0 on host h1 had waited 3 s in alltoallv over moe-ep during generation, step 67".
// "was outside collectives", with the last one the main thread left (a pair read without a lock:
// both are static names, at worst of neighbouring collectives).
std::string outside_collectives() {
  const char* what = g_left_in.load(std::memory_order_relaxed);
  if (!what) return "was outside collectives";
  const char* over = g_left_over.load(std::memory_order_relaxed);
  const double ago =
      seconds_since(Clock::time_point(Clock::duration(g_left_at.load(std::memory_order_relaxed))));
  return fmt::format("was outside collectives (last in {} over {}, {:.1f} s before)", what,
                     over ? over : "?", ago);
}

std::string describe_me(int me, const std::vector<std::string>& hosts) {
  const Beat mine = my_beat();
  return fmt::format(
      "rank {}{} {} during {}", me,
      host_of(hosts, me).empty() ? "" : " on host " + host_of(hosts, me),
      mine.waiting ? fmt::format("had waited {:.0f} s in {}", mine.waited_s, mine.what.data())
                   : outside_collectives(),
      mine.step.data());
}

std::string signal_message(int me, const std::vector<std::string>& hosts) {
  std::string message = "terminated by the launcher (SIGTERM): " + describe_me(me, hosts);
  if (me == 0) {
    std::vector<Peer> peers;
    Clock::time_point seen_at;
    {
      const std::lock_guard lock(g_seen_mutex);
      peers = g_seen;
      seen_at = g_seen_at;
    }
    // The watchdog thread updates its view every second unless MPI holds it; an older view is
    // named with its age, and judged as of then.
    const double age = seconds_since(seen_at);
    const std::string as_of =
        age > 2.0 ? fmt::format(" (as rank 0 saw it {:.0f} s before the signal)", age) : "";
    const std::vector<std::string> silent = describe_silent(peers, hosts, kSilentAtSignal, seen_at);
    std::string names;
    for (std::size_t i = 0; i < silent.size() && i < 16; ++i) names += (i ? ", " : "") + silent[i];
    message += silent.empty() ? "; every rank's watchdog had been heard from in the last "
                                "seconds" + as_of
                              : "; not heard from" + as_of + ": " + names;
  }
  return message;
}

// A non-blocking send per slot: a slot is reused once its previous send has completed, so a
// destination that stopped receiving holds one buffer, not one per second.
struct Sender {
  std::vector<MPI_Request> requests;
  std::vector<Beat> beats;  // the buffers of Beat sends

  explicit Sender(std::size_t slots) : requests(slots, MPI_REQUEST_NULL), beats(slots) {}
  bool free(std::size_t slot) {
    int done = 0;
    MPI_Test(&requests[slot], &done, MPI_STATUS_IGNORE);  // a null request tests done
    return done != 0;
  }
  void finish() {
    for (MPI_Request& r : requests) {
      if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
    }
    MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  }
};

}  // namespace

Watchdog::Pipe Watchdog::make_pipe(const char* for_whom) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw InternalError(fmt::format("pipe2 for {} failed: {}", for_whom, std::strerror(errno)));
  }
  // A writer (the SIGTERM handler among them) never blocks; a reader waits.
  ::fcntl(fds[1], F_SETFL, O_NONBLOCK);
  return Pipe{fds[0], fds[1]};
}

WaitScope::WaitScope(const char* what, const Comm& over, std::uint64_t bytes_sent) {
  require_main_thread(what);
  count_traffic_bytes(bytes_sent);
  const char* none = nullptr;
  outer_ = g_waiting_in.compare_exchange_strong(none, what);
  if (outer_) {
    since_ = Clock::now().time_since_epoch().count();
    g_waiting_over.store(over.name());
    g_waiting_since.store(since_);
  }
}

WaitScope::~WaitScope() {
  if (!outer_) return;
  const Clock::time_point now = Clock::now();
  g_left_over.store(g_waiting_over.load(std::memory_order_relaxed), std::memory_order_relaxed);
  g_left_in.store(g_waiting_in.exchange(nullptr), std::memory_order_relaxed);
  g_left_at.store(now.time_since_epoch().count(), std::memory_order_relaxed);
  count_traffic_wait(
      std::chrono::duration<double>(now - Clock::time_point(Clock::duration(since_))).count());
}

void set_stage(std::string stage) {
  const std::lock_guard lock(g_stage_mutex);
  g_stage = std::move(stage);
  g_stage_step.store(0, std::memory_order_relaxed);
}

void set_stage_step(std::uint64_t step) { g_stage_step.store(step, std::memory_order_relaxed); }

Watchdog::Watchdog(const Comm& world, double timeout_s, RecordFailure record_failure,
                   std::filesystem::path heartbeat_file)
    : timeout_s_(timeout_s),
      record_failure_(std::move(record_failure)),
      heartbeat_file_(std::move(heartbeat_file)) {
  if (timeout_s <= 0) return;
  MPI_Comm dup = MPI_COMM_NULL;
  if (MPI_Comm_dup(world.handle(), &dup) != MPI_SUCCESS) {
    throw InternalError("MPI_Comm_dup for the watchdog failed");
  }
  comm_ = Comm(dup);
  wake_ = make_pipe("the watchdog");
  signal_ = make_pipe("the watchdog's monitor thread");
  {
    const std::lock_guard lock(g_seen_mutex);
    g_seen.assign(static_cast<std::size_t>(comm_.size()), Peer{});
  }
  g_signal_fd.store(signal_.write);
  struct sigaction action {};
  action.sa_handler = wake_on_sigterm;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  thread_ = std::thread([this] { run(); });
  monitor_thread_ = std::thread([this] { monitor(); });
}

Watchdog::~Watchdog() {
  if (!thread_.joinable()) return;
  const char stop_byte = 'S';
  [[maybe_unused]] ssize_t n = ::write(wake_.write, &stop_byte, 1);
  thread_.join();
  signal(SIGTERM, SIG_DFL);
  g_signal_fd.store(-1);
  n = ::write(signal_.write, &stop_byte, 1);
  monitor_thread_.join();
  for (int fd : {wake_.read, wake_.write, signal_.read, signal_.write}) ::close(fd);
  // Messages that arrived after the thread's last drain are received, so that the communicator
  // is freed (collectively, by the Comm) with nothing waiting in it.
  drain(comm_, comm_.rank() == 0 ? kBeatTag : kAliveTag, [](int, std::span<const char>) {});
}

void Watchdog::set_hosts(std::vector<std::string> host_of_rank) {
  const std::lock_guard lock(hosts_mutex_);
  hosts_ = std::move(host_of_rank);
}

std::vector<std::string> Watchdog::hosts() const {
  const std::lock_guard lock(hosts_mutex_);
  return hosts_;
}

void Watchdog::end_on_signal(int me, const std::string& message) {
  // Once every other rank fails at once, the console would repeat this; the launcher's own
  // message is the one the user sees there, and the rank logs keep each rank's line.
  silence_console();
  spdlog::critical("{}", message);
  flush_logs();
  if (me == 0 && record_failure_) record_failure_(message);
  signal(SIGTERM, SIG_DFL);
  raise(SIGTERM);
  std::_Exit(128 + SIGTERM);
}

void Watchdog::monitor() {
  const int me = comm_.rank();
  bool heartbeat_failed = false;
  for (;;) {
    pollfd signal_pipe{signal_.read, POLLIN, 0};
    const int ready = ::poll(&signal_pipe, 1, 1000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      if (me == 0 && !heartbeat_file_.empty() && !heartbeat_failed) {
        heartbeat_failed = !write_heartbeat(describe_me(me, hosts()));
      }
      continue;
    }
    char byte = 0;
    const ssize_t n = ::read(signal_.read, &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || byte == 'S') return;
    if (byte == 'T') end_on_signal(me, signal_message(me, hosts()));
  }
}

bool Watchdog::write_heartbeat(const std::string& line) const {
  // Replaced whole by a rename, without fsync: a reader sees one whole line, and a second's
  // heartbeat is not worth a disk flush.
  const std::filesystem::path tmp = heartbeat_file_.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << fmt::format("{:%Y-%m-%dT%H:%M:%SZ} {}\n",
                       std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now()),
                       line);
    if (!out) {
      spdlog::warn("cannot write the heartbeat file {}: no more heartbeats", tmp.string());
      return false;
    }
  }
  std::error_code error;
  std::filesystem::rename(tmp, heartbeat_file_, error);
  if (error) {
    spdlog::warn("cannot rename {} to {}: {}; no more heartbeats", tmp.string(),
                 heartbeat_file_.string(), error.message());
    return false;
  }
  return true;
}

void Watchdog::run() {
  const int me = comm_.rank();
  const int world = comm_.size();
  std::vector<Peer> peers(static_cast<std::size_t>(world));
  Clock::time_point root_heard = Clock::now();  // on other ranks: rank 0's last word
  // Rank 0 keeps one send in flight per rank; the others up to 8 heartbeats to rank 0 (a rank 0
  // that stopped leaves them pending: small, eager), and no more once all are in use.
  Sender sender(me == 0 ? static_cast<std::size_t>(world) : 8);
  // A rank that outwaits the timeout by this much while rank 0 still answers gives up on it.
  const double grace = std::max(15.0, timeout_s_ * 0.5);
  auto next_tick = Clock::now() + kInterval;
  for (;;) {
    const auto wait_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(next_tick - Clock::now());
    pollfd wake{wake_.read, POLLIN, 0};
    if (::poll(&wake, 1, static_cast<int>(std::max<std::int64_t>(wait_ms.count(), 0))) > 0) {
      char bytes[16];
      const ssize_t n = ::read(wake_.read, bytes, sizeof bytes);
      if (n > 0 && std::memchr(bytes, 'S', static_cast<std::size_t>(n))) break;
      continue;
    }
    next_tick = Clock::now() + kInterval;
    const Beat mine = my_beat();
    if (me != 0) {
      for (std::size_t i = 0; i < sender.requests.size(); ++i) {
        if (!sender.free(i)) continue;
        sender.beats[i] = mine;
        MPI_Isend(&sender.beats[i], sizeof(Beat), MPI_BYTE, 0, kBeatTag, comm_.handle(),
                  &sender.requests[i]);
        break;
      }
      drain(comm_, kAliveTag, [&](int, std::span<const char>) { root_heard = Clock::now(); });
      std::optional<std::string> verdict;
      drain(comm_, kVerdictTag,
            [&](int, std::span<const char> text) { verdict.emplace(text.data(), text.size()); });
      if (verdict) {
        // Rank 0 printed it and ends the job; this rank ends on its own should that not reach it.
        silence_console();
        spdlog::error("rank 0 ends the job: {}", *verdict);
        flush_logs();
        std::this_thread::sleep_for(std::chrono::duration<double>(kVerdictExitDelay));
        std::_Exit(static_cast<int>(ExitCode::kInternal));
      }
      const double root_silent = seconds_since(root_heard);
      if (mine.waiting && mine.waited_s > timeout_s_ &&
          (root_silent > kSilentAfter || mine.waited_s > timeout_s_ + grace)) {
        const std::vector<std::string> hosts = this->hosts();
        const std::string host = host_of(hosts, me);
        const std::string root_host = host_of(hosts, 0);
        spdlog::critical(
            "collective timeout: rank {}{} has waited {:.0f} s in {} during {} "
            "(--collective-timeout {:g}), and rank 0{}, which names the ranks that did not "
            "arrive, has not answered for {:.0f} s: {}; rank {} ends on its own",
            me, host.empty() ? "" : " on host " + host, mine.waited_s, mine.what.data(),
            mine.step.data(), timeout_s_, root_host.empty() ? "" : " on host " + root_host,
            root_silent,
            host != root_host ? "this host is cut off from rank 0's, or rank 0 is stopped or dead"
                              : "rank 0 is stopped or dead",
            me);
        flush_logs();
        std::_Exit(static_cast<int>(ExitCode::kInternal));
      }
      continue;
    }
    // Rank 0: drain every heartbeat, answer every rank, then judge.
    drain(comm_, kBeatTag, [&](int source, std::span<const char> bytes) {
      Peer& p = peers[static_cast<std::size_t>(source)];
      if (bytes.size() == sizeof(Beat)) std::memcpy(&p.beat, bytes.data(), sizeof(Beat));
      p.heard = Clock::now();
    });
    peers[0] = Peer{mine, Clock::now()};
    {
      const std::lock_guard lock(g_seen_mutex);
      g_seen = peers;
      g_seen_at = Clock::now();
    }
    for (int r = 1; r < world; ++r) {
      if (!sender.free(static_cast<std::size_t>(r))) continue;
      MPI_Isend(&kAlive, 1, MPI_INT, r, kAliveTag, comm_.handle(),
                &sender.requests[static_cast<std::size_t>(r)]);
    }
    const std::optional<std::string> verdict = judge(peers, hosts(), timeout_s_);
    if (!verdict) continue;
    spdlog::critical("{}", *verdict);
    flush_logs();
    if (record_failure_) record_failure_(*verdict);
    // Every rank it can reach hears why the job ends (their requests are never waited for: the
    // abort ends this process).
    std::vector<MPI_Request> told(static_cast<std::size_t>(world), MPI_REQUEST_NULL);
    for (int r = 1; r < world; ++r) {
      MPI_Isend(verdict->data(), static_cast<int>(verdict->size()), MPI_BYTE, r, kVerdictTag,
                comm_.handle(), &told[static_cast<std::size_t>(r)]);
    }
    MPI_Abort(comm_.handle(), static_cast<int>(ExitCode::kInternal));
    std::_Exit(static_cast<int>(ExitCode::kInternal));
  }
  sender.finish();
}

}  // namespace k3::dist
