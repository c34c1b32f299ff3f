#include "dist/env.h"

#include <unistd.h>

#include <charconv>
#include <climits>
#include <cstdlib>
#include <fstream>

#include "common/error.h"

namespace k3::dist {

const char* launcher_name(Launcher launcher) {
  switch (launcher) {
    case Launcher::kSingleton:
      return "singleton";
    case Launcher::kOpenMpi:
      return "mpirun";
    case Launcher::kSlurm:
      return "slurm";
  }
  return "unknown";
}

namespace {

std::optional<int> parse_positive(const GetEnv& getenv, const char* name, int min_value) {
  auto text = getenv(name);
  if (!text) return std::nullopt;
  int value = 0;
  const char* first = text->data();
  const char* last = first + text->size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || ptr != last || value < min_value) {
    throw InputError("environment variable " + std::string(name) + "='" + *text +
                     "' is not an integer >= " + std::to_string(min_value));
  }
  return value;
}

std::string host_name() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

}  // namespace

LaunchEnv read_launch_env(const GetEnv& getenv) {
  LaunchEnv env;
  env.hostname = host_name();
  // Under srun both sets may appear (mpirun inside an allocation); the direct launcher wins:
  // SLURM_STEP_ID without OMPI_COMM_WORLD_SIZE means srun started us.
  const bool ompi = getenv("OMPI_COMM_WORLD_SIZE").has_value();
  const bool slurm_step = getenv("SLURM_STEP_ID").has_value() && getenv("SLURM_PROCID").has_value();
  if (ompi) {
    env.launcher = Launcher::kOpenMpi;
    env.local_rank = parse_positive(getenv, "OMPI_COMM_WORLD_LOCAL_RANK", 0).value_or(-1);
    env.local_size = parse_positive(getenv, "OMPI_COMM_WORLD_LOCAL_SIZE", 1).value_or(-1);
  } else if (slurm_step) {
    env.launcher = Launcher::kSlurm;
    env.local_rank = parse_positive(getenv, "SLURM_LOCALID", 0).value_or(-1);
  }
  if (auto job = getenv("SLURM_JOB_ID")) {
    env.job_id = *job;
    if (auto step = getenv("SLURM_STEP_ID")) env.job_id += "." + *step;
  } else if (auto jobid = getenv("OMPI_MCA_ess_base_jobid")) {
    env.job_id = *jobid;
  }
  env.node_list = getenv("SLURM_JOB_NODELIST").value_or(getenv("SLURM_NODELIST").value_or(""));
  env.cpus_per_task = parse_positive(getenv, "SLURM_CPUS_PER_TASK", 1).value_or(0);
  return env;
}

LaunchEnv read_launch_env() {
  return read_launch_env([](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

int default_thread_count(const LaunchEnv& env) {
  return env.cpus_per_task > 0 ? env.cpus_per_task : 1;
}

bool stdout_is_terminal(bool stdout_is_tty, std::string_view parent_command,
                        std::string_view parent_stdout) {
  if (!stdout_is_tty) return false;
  if (parent_command == "orted" || parent_command == "prted") return false;
  if (parent_command != "mpirun" && parent_command != "mpiexec" && parent_command != "orterun" &&
      parent_command != "prterun")
    return true;
  return parent_stdout.rfind("/dev/pts/", 0) == 0 || parent_stdout.rfind("/dev/tty", 0) == 0;
}

bool stdout_is_terminal() {
  const bool tty = isatty(STDOUT_FILENO) != 0;
  if (!tty) return false;
  const std::string parent = "/proc/" + std::to_string(getppid());
  // /proc/<pid>/comm: the command name and a newline.
  std::string command;
  std::ifstream(parent + "/comm") >> command;
  char target[4096];
  const ssize_t n = readlink((parent + "/fd/1").c_str(), target, sizeof target - 1);
  const std::string parent_stdout = n > 0 ? std::string(target, static_cast<std::size_t>(n)) : "";
  return stdout_is_terminal(tty, command, parent_stdout);
}

}  // namespace k3::dist
