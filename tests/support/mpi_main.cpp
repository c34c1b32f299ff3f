// GoogleTest main for tests that run under `mpirun -np N`.
//
// Every rank runs every test in the same order; only rank 0 prints the normal report and writes
// --gtest_output, other ranks print just their failed assertions (tagged with the rank), and all
// ranks exit with the worst result, so a failure on any rank fails the run.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "dist/runtime.h"
#include "tests/support/mpi_test.h"

// Open MPI keeps allocations (and its dlopen'ed components) alive until the process exits, by
// design; LeakSanitizer would report them, never ours. Only the MPI test binaries turn leak
// detection off (this is their main); the other test binaries keep it.
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }

namespace k3::test {

namespace {
dist::Runtime* g_runtime = nullptr;

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] FAILURE %s:%d\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }

 private:
  int rank_;
};
}  // namespace

dist::Runtime& runtime() { return *g_runtime; }

}  // namespace k3::test

int main(int argc, char** argv) {
  // Started without mpirun (a one-rank test, one process per test under ctest), Open MPI would
  // fork a daemon for the singleton, about a quarter of a second per process, that these tests
  // never use (they spawn no processes): the singleton runs without one.
  setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0);
  k3::dist::Runtime runtime(argc, argv);
  k3::test::g_runtime = &runtime;
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (runtime.rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    delete listeners.Release(listeners.default_xml_generator());
    listeners.Append(new k3::test::FailurePrinter(runtime.rank()));
  }
  const int local = RUN_ALL_TESTS();
  int global = local;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (runtime.rank() == 0 && global != 0 && local == 0) {
    std::fprintf(stderr, "a test failed on another rank (see its [rank N] FAILURE lines)\n");
  }
  k3::test::g_runtime = nullptr;
  return global;
}
