// k3eval: the MPI batch job. It builds and verifies the parallel layout, plans, loads and audits
// each rank's checkpoint slice, and runs the GSM8K evaluation on the Kimi-K3 engine (or
// --mode throughput, `k3eval logits`, `k3eval score`, --load-only, --check-layout).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include <spdlog/spdlog.h>

#include "apps/k3eval/check_layout.h"
#include "apps/k3eval/evaluate.h"
#include "apps/k3eval/load_only.h"
#include "apps/k3eval/options.h"
#include "common/heap.h"
#include "common/text_file.h"
#include "dist/collectives.h"
#include "dist/groups.h"
#include "dist/logging.h"
#include "dist/runtime.h"
#include "dist/threads.h"
#include "dist/watchdog.h"
#include "eval/report.h"

namespace {

using namespace k3;

int run_job(dist::Runtime& runtime, const apps::K3evalOptions& options, dist::Watchdog* watchdog);

int run_k3eval(dist::Runtime& runtime, int argc, char** argv) {
  apps::K3evalOptions options;
  std::optional<eval::ArtifactsLock> lock;  // rank 0's, for the whole job
  const bool root = runtime.rank() == 0;
  runtime.collectively([&] {
    options = apps::parse_k3eval_options(argc, argv);
    dist::set_console_level(dist::parse_log_level(options.log_level));
    // Before any rank opens (and truncates) its log there: another job may own the directory.
    if (root && !options.help && !options.version && !options.artifacts_dir.empty())
      lock.emplace(options.artifacts_dir);
  });
  if (options.help || options.version) {
    if (root) {
      std::fputs(options.help ? apps::k3eval_usage().c_str() : "k3eval " K3_VERSION "\n", stdout);
    }
    return 0;
  }
  const std::filesystem::path artifacts = options.artifacts_dir;
  runtime.collectively([&] {
    if (artifacts.empty()) return;
    dist::add_rank_log_file(artifacts, runtime.rank());
    if (root) {
      eval::write_status(artifacts / "status", eval::RunStatus::kRunning);
      std::filesystem::remove(artifacts / "heartbeat");  // an earlier run's, when resuming
    }
  });
  // What the artifacts directory says when the job ends on an error k3eval sees (a killed rank
  // is recorded by the launcher wrappers, jobs/lib/record.sh): status failed, with the rank and
  // its message, and a summary.json of what finished.
  const nlohmann::json failure_config = {{"command_line", options.command_line}};
  auto record_failure = [&](ExitCode code, const std::string& reason) {
    if (!root || artifacts.empty()) return;
    try {
      eval::write_failure(artifacts, static_cast<int>(code), reason, failure_config);
    } catch (const std::exception& e) {
      spdlog::error("could not record the failure in {}: {}", artifacts.string(), e.what());
    }
  };
  std::optional<dist::Watchdog> watchdog;
  if (options.collective_timeout > 0) {
    if (runtime.thread_multiple()) {
      watchdog.emplace(
          runtime.world(), options.collective_timeout,
          [&](const std::string& reason) { record_failure(ExitCode::kInternal, reason); },
          artifacts.empty() ? std::filesystem::path() : artifacts / "heartbeat");
    } else if (root) {
      spdlog::warn(
          "the MPI library gives no MPI_THREAD_MULTIPLE: no watchdog, so a hung rank "
          "would hang the job (--collective-timeout {:g} ignored)",
          options.collective_timeout);
    }
  }
  // From the moment the job's outcome is recorded, its way out is bounded (--exit-timeout).
  auto bound_teardown = [&](ExitCode code) {
    runtime.bound_teardown(options.exit_timeout, static_cast<int>(code));
  };
  int code = 0;
  try {
    code = run_job(runtime, options, watchdog ? &*watchdog : nullptr);
  } catch (const dist::ReportedError& e) {
    record_failure(e.exit_code(),
                   e.reporting_rank() >= 0
                       ? "rank " + std::to_string(e.reporting_rank()) + ": " + e.message()
                       : e.message());
    bound_teardown(e.exit_code());
    throw;
  } catch (const Error& e) {
    record_failure(e.exit_code(), "rank " + std::to_string(runtime.rank()) + ": " + e.what());
    bound_teardown(e.exit_code());
    throw;
  } catch (const std::exception& e) {
    record_failure(ExitCode::kInternal,
                   "rank " + std::to_string(runtime.rank()) + ": unexpected error: " + e.what());
    bound_teardown(ExitCode::kInternal);
    throw;
  }
  // Modes without a verdict of their own (load-only, throughput, logits) end as "ok". The other
  // ranks wait for rank 0 to have written it (in a collective the watchdog watches, as rank 0's
  // report and history before it), so that none is on its bounded way out, or ended by the
  // launcher after it, while rank 0 still writes the job's record.
  try {
    runtime.collectively([&] {
      if (root && !artifacts.empty() &&
          eval::read_status_word(artifacts / "status") ==
              eval::status_word(eval::RunStatus::kRunning)) {
        eval::write_status(artifacts / "status",
                           code == 0 ? eval::RunStatus::kOk : eval::RunStatus::kFailed,
                           code == 0 ? "" : "exit code " + std::to_string(code));
      }
    });
  } catch (const dist::ReportedError& e) {
    bound_teardown(e.exit_code());
    throw;
  }
  runtime.bound_teardown(options.exit_timeout, code);
  if (options.debug_hang_at_exit && *options.debug_hang_at_exit == runtime.rank()) {
    spdlog::warn("injected hang on the way out (--debug-hang-at-exit {})", runtime.rank());
    dist::flush_logs();
    for (;;) ::pause();
  }
  return code;
}

// The host of every world rank: node n holds the contiguous block of ranks_per_node ranks.
std::vector<std::string> rank_hosts(const dist::NodeInfo& nodes) {
  std::vector<std::string> hosts;
  for (const std::string& host : nodes.node_hosts)
    hosts.insert(hosts.end(), nodes.ranks_per_node, host);
  return hosts;
}

int run_job(dist::Runtime& runtime, const apps::K3evalOptions& options, dist::Watchdog* watchdog) {
  spdlog::debug("command line: {}", options.command_line);
  if (options.command == "score") {
    // Re-scoring needs no model and no layout: rank 0 does it, the lowest failing rank reports.
    int code = 0;
    runtime.collectively([&] {
      if (runtime.rank() == 0) code = apps::run_score(options);
    });
    return code;
  }

  std::optional<dist::ThreadCap> threads;
  dist::NodeInfo nodes;
  std::optional<dist::Layout> layout;
  runtime.collectively([&] {
    threads.emplace(options.threads.value_or(dist::default_thread_count(runtime.env())));
    dist::LayoutSpec spec = options.layout;
    spec.world = runtime.world_size();
    spec.ranks_per_node = options.ranks_per_node;
    dist::Layout::make(spec);  // reject an impossible layout before any further collective
    nodes = runtime.discover_nodes(options.ranks_per_node);
    spec.ranks_per_node = nodes.ranks_per_node;
    layout = dist::Layout::make(spec);
    // Which host holds which ranks, for a launcher wrapper that must name a lost host's ranks.
    if (runtime.rank() == 0 && !options.artifacts_dir.empty()) {
      write_file_atomically(std::filesystem::path(options.artifacts_dir) / "hosts.txt",
                            apps::hosts_file(nodes));
    }
  });
  if (watchdog) watchdog->set_hosts(rank_hosts(nodes));
  spdlog::info("{} ranks ({} via {}), {} oneTBB thread(s) per rank, job {}", runtime.world_size(),
               nodes.simulated ? "simulated nodes" : "hosts",
               dist::launcher_name(runtime.env().launcher), threads->threads(),
               runtime.env().job_id.empty() ? "-" : runtime.env().job_id);
  spdlog::info("layout: {}", layout->summary());

  std::optional<dist::Groups> groups;
  runtime.collectively([&] { groups.emplace(*layout, runtime.world()); });
  spdlog::info("{} group kinds built and verified against the layout", dist::kAllGroupKinds.size());

  if (options.debug_fail_rank &&
      (*options.debug_fail_rank == -1 || *options.debug_fail_rank == runtime.rank())) {
    throw InternalError("injected failure (--debug-fail-rank " +
                        std::to_string(*options.debug_fail_rank) + ")");
  }
  if (options.debug_log_error && *options.debug_log_error == runtime.rank()) {
    spdlog::error("injected error line (--debug-log-error {})", *options.debug_log_error);
  }
  // Ranks without an injected failure wait here, as they would in any collective.
  dist::barrier(groups->world());

  if (options.check_layout) {
    if (runtime.rank() == 0) std::fputs(apps::layout_table(*layout, nodes).c_str(), stdout);
    std::fflush(stdout);
    // With a model the job goes on (--load-only, or the evaluation) after the table.
    if (!options.load_only && !options.plan_only && options.model_path.empty()) return 0;
  }
  if (options.plan_only || options.load_only) {
    runtime.collectively([&] {
      const char* mode = options.plan_only ? "--plan-only" : "--load-only";
      if (options.plan_only && options.load_only)
        throw UsageError("--plan-only and --load-only exclude each other");
      if (options.model_path.empty()) throw UsageError(std::string(mode) + " needs --model-path");
    });
    return options.plan_only ? apps::run_plan_only(runtime, *groups, options)
                             : apps::run_load_only(runtime, *groups, options);
  }
  if (options.command == "logits") return apps::run_logits(runtime, *groups, options);
  if (options.mode == "throughput") return apps::run_throughput_mode(runtime, *groups, options);
  return apps::run_evaluation(runtime, *groups, options);
}

}  // namespace

int main(int argc, char** argv) {
  k3::keep_freed_memory_in_heap();
  k3::dist::Runtime runtime(argc, argv);
  return runtime.run([&] { return run_k3eval(runtime, argc, argv); });
}
