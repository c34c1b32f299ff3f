// What the launcher (mpirun, srun or none) tells a process through its environment.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace k3::dist {

enum class Launcher { kSingleton, kOpenMpi, kSlurm };

const char* launcher_name(Launcher launcher);

struct LaunchEnv {
  Launcher launcher = Launcher::kSingleton;
  std::string job_id;     // SLURM_JOB_ID[.SLURM_STEP_ID] or Open MPI's job id; empty if none
  std::string node_list;  // SLURM_JOB_NODELIST (compressed Slurm syntax); empty outside Slurm
  std::string hostname;   // this process's host
  int cpus_per_task = 0;  // SLURM_CPUS_PER_TASK, 0 when unset
  int local_rank = -1;    // rank on this host as the launcher numbers it, -1 when unknown
  int local_size = -1;
};

// Reads the environment through `getenv` (injectable so tests need not mutate the process env).
// A variable that is set but malformed (SLURM_CPUS_PER_TASK=abc) is a k3::InputError naming it.
using GetEnv = std::function<std::optional<std::string>(const char*)>;
LaunchEnv read_launch_env(const GetEnv& getenv);
LaunchEnv read_launch_env();  // the process environment

// Whether this process's stdout ends at a terminal a person is looking at. Open MPI gives the
// ranks it starts on its own host a pseudo-terminal whatever mpirun's output is (a file, a pipe,
// a batch job's log), so under mpirun it is mpirun's own stdout that counts; a rank started by a
// remote daemon (orted) writes through it, never to a terminal.
bool stdout_is_terminal();
// The same decision from what a process sees: whether its stdout is a tty, its parent's command
// name and where the parent's stdout goes (a /proc fd link: "/dev/pts/3", "/tmp/run.log",
// "pipe:[123]").
bool stdout_is_terminal(bool stdout_is_tty, std::string_view parent_command,
                        std::string_view parent_stdout);

// The oneTBB thread cap per rank: the --threads option if given, else the CPUs Slurm gave the
// task, else 1 (ranks are oversubscribed far more often than not).
int default_thread_count(const LaunchEnv& env);

}  // namespace k3::dist
