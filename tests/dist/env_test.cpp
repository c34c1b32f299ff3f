// dist::LaunchEnv: what Open MPI and Slurm tell a process, read through an injected getenv.
#include "dist/env.h"

#include <gtest/gtest.h>

#include <map>

#include "common/error.h"

namespace k3::dist {
namespace {

GetEnv fake(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(LaunchEnv, Singleton) {
  const LaunchEnv env = read_launch_env(fake({}));
  EXPECT_EQ(env.launcher, Launcher::kSingleton);
  EXPECT_EQ(env.job_id, "");
  EXPECT_EQ(env.cpus_per_task, 0);
  EXPECT_FALSE(env.hostname.empty());
  EXPECT_EQ(default_thread_count(env), 1);
}

TEST(LaunchEnv, OpenMpi) {
  const LaunchEnv env = read_launch_env(fake({{"OMPI_COMM_WORLD_SIZE", "8"},
                                              {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                                              {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"},
                                              {"OMPI_MCA_ess_base_jobid", "2099445761"}}));
  EXPECT_EQ(env.launcher, Launcher::kOpenMpi);
  EXPECT_EQ(env.local_rank, 3);
  EXPECT_EQ(env.local_size, 8);
  EXPECT_EQ(env.job_id, "2099445761");
}

TEST(LaunchEnv, SlurmStep) {
  const LaunchEnv env = read_launch_env(fake({{"SLURM_JOB_ID", "42"},
                                              {"SLURM_STEP_ID", "0"},
                                              {"SLURM_PROCID", "5"},
                                              {"SLURM_LOCALID", "5"},
                                              {"SLURM_JOB_NODELIST", "n[0-3]"},
                                              {"SLURM_CPUS_PER_TASK", "4"}}));
  EXPECT_EQ(env.launcher, Launcher::kSlurm);
  EXPECT_EQ(env.job_id, "42.0");
  EXPECT_EQ(env.node_list, "n[0-3]");
  EXPECT_EQ(env.local_rank, 5);
  EXPECT_EQ(env.cpus_per_task, 4);
  EXPECT_EQ(default_thread_count(env), 4);
}

TEST(LaunchEnv, MpirunInsideSlurmAllocationIsOpenMpi) {
  const LaunchEnv env = read_launch_env(
      fake({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", "vm"}, {"OMPI_COMM_WORLD_SIZE", "8"}}));
  EXPECT_EQ(env.launcher, Launcher::kOpenMpi);
  EXPECT_EQ(env.job_id, "42");
}

TEST(LaunchEnv, MalformedVariableIsNamed) {
  try {
    read_launch_env(fake({{"SLURM_CPUS_PER_TASK", "two"}}));
    FAIL() << "accepted a malformed SLURM_CPUS_PER_TASK";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "environment variable SLURM_CPUS_PER_TASK='two' is not an integer >= 1");
  }
  EXPECT_THROW(read_launch_env(fake({{"SLURM_CPUS_PER_TASK", "0"}})), InputError);
  EXPECT_THROW(
      read_launch_env(fake({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1x"}})),
      InputError);
}

// --progress auto draws a bar only for a person at a terminal: under mpirun, a rank's
// pseudo-terminal counts only when mpirun's own output is a terminal.
TEST(StdoutIsTerminal, UnderMpirunItIsMpirunsOutputThatCounts) {
  EXPECT_FALSE(stdout_is_terminal(false, "bash", "/dev/pts/0"));      // a file or a pipe
  EXPECT_TRUE(stdout_is_terminal(true, "bash", "/dev/pts/0"));        // run from a shell
  EXPECT_TRUE(stdout_is_terminal(true, "mpirun", "/dev/pts/3"));      // mpirun at a terminal
  EXPECT_FALSE(stdout_is_terminal(true, "mpirun", "/tmp/run.log"));   // mpirun ... > run.log
  EXPECT_FALSE(stdout_is_terminal(true, "mpirun", "pipe:[81235]"));   // mpirun ... | tee
  EXPECT_FALSE(stdout_is_terminal(true, "mpirun", ""));               // mpirun's output unknown
  EXPECT_FALSE(stdout_is_terminal(true, "orted", "/dev/null"));       // a remote host's rank
  EXPECT_TRUE(stdout_is_terminal(true, "orterun", "/dev/tty1"));
}

}  // namespace
}  // namespace k3::dist
