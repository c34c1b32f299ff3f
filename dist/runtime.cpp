#include "dist/runtime.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include <spdlog/spdlog.h>

#include "dist/watchdog.h"

#include "dist/logging.h"

namespace k3::dist {

namespace {

std::thread::id g_main_thread;

constexpr int kTokenBytes = 64;
// How much longer than rank 0 the other ranks wait out a teardown, and how long rank 0 gives
// MPI_Abort before it leaves without it (Runtime::bound_teardown).
constexpr double kNonRootExitMargin = 5.0;
constexpr int kHostBytes = 256;

// Completes `request`, sleeping between tests rather than spinning: with ranks oversubscribed on
// few cores, a spinning wait takes the CPU from the rank everyone waits for. The naps stay short
// (at most 1 ms): a non-blocking collective advances only inside some rank's MPI_Test, so every
// nap of a rank inside the reduction tree delays the whole job's exit from the stage. With naps
// of up to 25 ms the 8-rank quickstart spent 0.2-0.37 s planning a checkpoint that one rank plans
// in 0.01 s; at 1 ms, 0.02 s, and a waiting rank's wake-ups cost well under 1 % of a core.
// Returns MPI_Test's error code.
int wait_napping(MPI_Request& request) {
  auto nap = std::chrono::microseconds(50);
  for (;;) {
    int done = 0;
    const int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || done) return rc;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(1000));
  }
}

// The first process on this host to bind the abstract socket name wins; the kernel releases the
// name when the process dies, so nothing is left behind by an aborted job.
bool first_on_host(const std::string& token) {
  static int fd = -1;  // kept open until the process ends
  if (token.empty()) return true;
  fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return true;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string name = "k3eval-fatal-" + token;
  const size_t len = std::min(name.size(), sizeof(addr.sun_path) - 2);
  std::memcpy(addr.sun_path + 1, name.data(), len);  // sun_path[0] == 0: abstract namespace
  const auto addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len);
  return bind(fd, reinterpret_cast<sockaddr*>(&addr), addr_len) == 0;
}

}  // namespace

std::thread::id Runtime::main_thread_id() { return g_main_thread; }

Runtime::Runtime(int& argc, char**& argv) {
  // The main thread makes every MPI call of the job (FUNNELED discipline, dist/comm.h); the
  // watchdog thread (dist/watchdog.h) makes its own on its own communicator, hence MULTIPLE.
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    throw InternalError("MPI_Init_thread failed");
  }
  thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  g_main_thread = std::this_thread::get_id();
  // Errors surface as return codes, which check_mpi turns into exceptions with context.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  world_ = Comm::world();
  MPI_Comm_dup(MPI_COMM_WORLD, &teardown_);
  init_logging(world_.rank(), world_.size());
  if (provided < MPI_THREAD_FUNNELED) {
    fatal("the MPI library provides thread level " + std::to_string(provided) +
              ", k3eval needs MPI_THREAD_FUNNELED",
          ExitCode::kInternal);
  }
  try {
    env_ = read_launch_env();
  } catch (const Error& e) {
    fatal(e.what(), e.exit_code());
  }
  // A token every rank shares, naming this job for the once-per-host fatal message.
  std::array<char, kTokenBytes> token{};
  if (world_.rank() == 0) {
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    std::snprintf(token.data(), token.size(), "%s-%ld-%lld", env_.hostname.c_str(),
                  static_cast<long>(getpid()), static_cast<long long>(now));
  }
  MPI_Bcast(token.data(), kTokenBytes, MPI_CHAR, 0, MPI_COMM_WORLD);
  token.back() = '\0';
  job_token_ = token.data();
}

Runtime::~Runtime() {
  flush_logs();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // Every rank meets in a plain barrier before MPI_Finalize, whose own wait is a PMIx fence: a
  // rank that never comes keeps the others here, not in the fence, when bound_teardown ends the
  // job. Ranks killed inside that fence can leave Open MPI 4.1's mpirun hung in its finalize
  // (PMIx_server_finalize), after every rank has gone.
  MPI_Request arrived = MPI_REQUEST_NULL;
  if (teardown_ != MPI_COMM_NULL && MPI_Ibarrier(teardown_, &arrived) == MPI_SUCCESS) {
    wait_napping(arrived);  // an error here leaves MPI_Finalize to report it
  }
  MPI_Finalize();
}

void Runtime::bound_teardown(double seconds, int code) {
  if (seconds <= 0) return;
  const int me = rank();
  // Rank 0 leaves first, through MPI_Abort with the job's code, and the others later. When every
  // rank of a job left on the same instant without MPI_Finalize, Open MPI 4.1's mpirun sometimes
  // deadlocked in its own finalize (PMIx_server_finalize); an abort is its routine path: it ends
  // the other ranks with SIGTERM and exits with that code. A launcher that does not end them (srun
  // by default) lets them wait out the margin and leave alone.
  const double wait = me == 0 ? seconds : seconds + kNonRootExitMargin;
  // Detached: a teardown that finishes ends the process, and the thread with it.
  std::thread([seconds, wait, code, me] {
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    if (me != 0) silence_console();  // every rank's log says it; the console once
    spdlog::warn(
        "rank {}: the job has ended, but its teardown (the watchdog's stop, MPI_Finalize) has "
        "not finished in {:g} s (--exit-timeout{}); the rank exits with code {} without it",
        me, wait, me == 0 ? "" : fmt::format(" {:g} s, ranks other than 0 {:g} s more", seconds,
                                             kNonRootExitMargin),
        code);
    flush_logs();
    if (me == 0) {
      // MPI_Abort lets mpirun end the job on its own path; should it block too, leave anyway.
      std::thread([code] {
        std::this_thread::sleep_for(std::chrono::duration<double>(kNonRootExitMargin));
        std::_Exit(code);
      }).detach();
      MPI_Abort(MPI_COMM_WORLD, code);
    }
    std::_Exit(code);
  }).detach();
}

int Runtime::run(const std::function<int()>& body) {
  try {
    return body();
  } catch (const ReportedError& e) {
    return static_cast<int>(e.exit_code());
  } catch (const Error& e) {
    fatal(e.what(), e.exit_code());
  } catch (const std::exception& e) {
    fatal(std::string("unexpected error: ") + e.what(), ExitCode::kInternal);
  } catch (...) {
    fatal("unexpected non-standard exception", ExitCode::kInternal);
  }
}

void Runtime::collectively(const std::function<void()>& fn) {
  std::string message;
  int code = 0;
  int reported_by = -1;
  try {
    fn();
  } catch (const ReportedError& e) {  // a nested collectively() logged it already
    message = e.message();
    reported_by = e.reporting_rank();
    code = static_cast<int>(e.exit_code());
  } catch (const Error& e) {
    message = e.what();
    code = static_cast<int>(e.exit_code());
  } catch (const std::exception& e) {
    message = std::string("unexpected error: ") + e.what();
    code = static_cast<int>(ExitCode::kInternal);
  }
  const WaitScope wait("the end of a stage (Runtime::collectively)", world_);
  int mine = code != 0 ? rank() : world_size();
  int first = world_size();
  // The ranks that finish early sleep rather than spin while the others work: a stage such as
  // the planning rank's binding runs for seconds.
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, world_.handle(), &request),
            "MPI_Iallreduce");
  check_mpi(wait_napping(request), "MPI_Test");
  if (first == world_size()) return;
  const bool logged = reported_by >= 0;
  std::array<int, 2> outcome = {code, logged ? reported_by : rank()};
  check_mpi(MPI_Bcast(outcome.data(), 2, MPI_INT, first, world_.handle()), "MPI_Bcast");
  // The message travels too (at most 4 KiB of it), so that rank 0 can record why the job ended.
  constexpr std::size_t kMessageBytes = 4096;
  std::array<char, kMessageBytes> text{};
  if (rank() == first) message.copy(text.data(), kMessageBytes - 1);
  check_mpi(
      MPI_Bcast(text.data(), static_cast<int>(kMessageBytes), MPI_CHAR, first, world_.handle()),
      "MPI_Bcast");
  text.back() = '\0';
  if (rank() == first && !logged && !message.empty()) spdlog::error("{}", message);
  flush_logs();
  throw ReportedError(static_cast<ExitCode>(outcome[0]), outcome[1], text.data());
}

NodeInfo Runtime::discover_nodes(int ranks_per_node) {
  require_main_thread("Runtime::discover_nodes");
  const int world = world_size();
  const int me = rank();
  NodeInfo info;
  std::vector<int> node_of(world, 0);
  if (ranks_per_node > 0) {
    if (world % ranks_per_node != 0) {
      throw UsageError("--ranks-per-node " + std::to_string(ranks_per_node) +
                       " must divide the world size " + std::to_string(world));
    }
    info.simulated = true;
    for (int r = 0; r < world; ++r) node_of[r] = r / ranks_per_node;
  } else {
    // Each shared-memory domain is named by its lowest world rank.
    MPI_Comm shared = MPI_COMM_NULL;
    check_mpi(
        MPI_Comm_split_type(world_.handle(), MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &shared),
        "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
    Comm local(shared);
    int leader = me;
    check_mpi(MPI_Allreduce(&me, &leader, 1, MPI_INT, MPI_MIN, local.handle()), "MPI_Allreduce");
    std::vector<int> leaders(world);
    check_mpi(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, world_.handle()),
              "MPI_Allgather");
    std::vector<int> distinct = leaders;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (int r = 0; r < world; ++r) {
      node_of[r] = static_cast<int>(std::lower_bound(distinct.begin(), distinct.end(), leaders[r]) -
                                    distinct.begin());
    }
  }
  // Every node must be one contiguous block of ranks, all of the same size.
  info.node_count = node_of.back() + 1;
  info.ranks_per_node = world / info.node_count;
  for (int r = 0; r < world; ++r) {
    if (node_of[r] != r / info.ranks_per_node || world % info.node_count != 0) {
      throw UsageError(
          "ranks are not placed on hosts in equal contiguous blocks (rank " + std::to_string(r) +
          " is on host #" + std::to_string(node_of[r]) + " of " + std::to_string(info.node_count) +
          "); launch with 'mpirun --map-by slot' or 'srun --distribution=block', or simulate "
          "nodes with --ranks-per-node");
    }
  }
  info.node = node_of[me];
  info.local_rank = me % info.ranks_per_node;
  info.local_size = info.ranks_per_node;

  // Host name of each node, as its first rank sees it.
  std::array<char, kHostBytes> host{};
  std::snprintf(host.data(), host.size(), "%s", env_.hostname.c_str());
  std::vector<char> hosts(static_cast<size_t>(world) * kHostBytes);
  check_mpi(MPI_Allgather(host.data(), kHostBytes, MPI_CHAR, hosts.data(), kHostBytes, MPI_CHAR,
                          world_.handle()),
            "MPI_Allgather");
  for (int n = 0; n < info.node_count; ++n) {
    const char* h = hosts.data() + static_cast<size_t>(n) * info.ranks_per_node * kHostBytes;
    info.node_hosts.emplace_back(h, strnlen(h, kHostBytes));
  }
  return info;
}

void Runtime::fatal(const std::string& message, ExitCode code) {
  // One message per host: the first rank to claim the host's name speaks, the others log to
  // their files only. The claim lives as long as its process, so the speaker holds it a moment
  // before aborting (ranks failing at the same time then find it taken, whatever their speed),
  // and the others wait as long for its line to be out before their abort ends the job.
  const bool first = first_on_host(job_token_);
  if (!first) silence_console();
  spdlog::critical("fatal: {} (aborting the job with exit code {})", message,
                   static_cast<int>(code));
  flush_logs();
  std::this_thread::sleep_for(first ? std::chrono::milliseconds(500)
                                    : std::chrono::milliseconds(200));
  MPI_Abort(MPI_COMM_WORLD, static_cast<int>(code));
  std::_Exit(static_cast<int>(code));  // MPI_Abort does not return; this satisfies [[noreturn]]
}

}  // namespace k3::dist
