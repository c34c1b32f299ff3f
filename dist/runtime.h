// dist::Runtime: the MPI lifetime of one k3eval process and its fatal-error policy.
//
// Policy: an error that every rank can detect together (bad option, impossible layout, a
// checkpoint that fails a data-free check) goes through collectively(): the lowest failing rank
// prints it once and all ranks leave with its exit code. Any other exception on any rank is
// fatal: that rank logs one message with its rank and MPI_Abort ends the whole job at once, so a
// failure never leaves 63 ranks waiting in a collective.
#pragma once

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "dist/comm.h"
#include "dist/env.h"
#include "common/error.h"

namespace k3::dist {

// Where this process runs: its (possibly simulated) node and rank on it.
struct NodeInfo {
  int node = 0;
  int node_count = 1;
  int local_rank = 0;
  int local_size = 1;
  int ranks_per_node = 1;               // equal for every node
  bool simulated = false;               // from --ranks-per-node rather than MPI_COMM_TYPE_SHARED
  std::vector<std::string> node_hosts;  // host name of each node, by node index
};

// An error that has already been reported (by collectively()); main() only exits with its code.
// Every rank knows which rank reported it and what it said (for the artifacts' failure record).
class ReportedError : public Error {
 public:
  explicit ReportedError(ExitCode code, int reporting_rank = -1, std::string message = "")
      : Error(code, "error already reported"),
        reporting_rank_(reporting_rank),
        message_(std::move(message)) {}
  int reporting_rank() const { return reporting_rank_; }  // -1: unknown
  const std::string& message() const { return message_; }

 private:
  int reporting_rank_;
  std::string message_;
};

class Runtime {
 public:
  // MPI_Init_thread(MPI_THREAD_FUNNELED); sets up logging with the rank in every line.
  Runtime(int& argc, char**& argv);
  ~Runtime();  // MPI_Finalize
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return world_.rank(); }
  int world_size() const { return world_.size(); }
  const Comm& world() const { return world_; }
  const LaunchEnv& env() const { return env_; }

  // Runs the body of main() under the fatal-error policy and returns the process exit code.
  int run(const std::function<int()>& body);

  // Runs `fn` on every rank. If it throws on any rank, the lowest such rank logs its message,
  // and every rank throws ReportedError with that rank's exit code. `fn` must not throw between
  // collectives of its own (finish them, then throw), or the other ranks would wait forever.
  void collectively(const std::function<void()>& fn);

  // Node discovery (collective). ranks_per_node > 0 simulates nodes of that many consecutive
  // ranks (4 x 16 on one host); 0 uses MPI_COMM_TYPE_SHARED and requires that each host holds
  // one contiguous block of ranks of equal size, as SGLang places TP ranks on nodes.
  NodeInfo discover_nodes(int ranks_per_node);

  // Bounds what follows the end of the job (the watchdog's stop, the communicators' free,
  // MPI_Finalize): if this process is still alive `seconds` from now, it logs why and leaves with
  // `code`: rank 0 through MPI_Abort (the launcher then ends the others), any other rank 5 s later
  // on its own. Called once the job's results and status are written, so a launcher never waits
  // for ever on a rank that hangs on its way out. 0: no bound.
  void bound_teardown(double seconds, int code);

  // Logs `message` with this rank, once per host, and aborts the whole job with `code`.
  [[noreturn]] void fatal(const std::string& message, ExitCode code);

  static std::thread::id main_thread_id();
  // Whether the MPI library gave MPI_THREAD_MULTIPLE (the watchdog needs it).
  bool thread_multiple() const { return thread_multiple_; }

 private:
  bool thread_multiple_ = false;
  Comm world_;
  // A copy of the world for the barrier before MPI_Finalize alone, so that it never matches a
  // collective another rank is still in when one leaves early on an error.
  MPI_Comm teardown_ = MPI_COMM_NULL;
  LaunchEnv env_;
  std::string job_token_;  // unique per job, the same on every rank
};

}  // namespace k3::dist
