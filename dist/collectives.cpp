#include "dist/collectives.h"

namespace k3::dist {

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kLogicalOr:
      return MPI_LOR;
    case ReduceOp::kLogicalAnd:
      return MPI_LAND;
  }
  throw InternalError("unknown reduce op");
}

int checked_count(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT_MAX)) {
    throw InternalError(std::string(what) + ": " + std::to_string(n) +
                        " elements exceed MPI's int count");
  }
  return static_cast<int>(n);
}

std::vector<int> displacements(std::span<const int> counts, const char* what) {
  std::vector<int> displs(counts.empty() ? 1 : counts.size(), 0);
  long long offset = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0) {
      throw InternalError(std::string(what) + ": negative count " + std::to_string(counts[i]));
    }
    displs[i] = static_cast<int>(offset);
    offset += counts[i];
    if (offset > INT_MAX) {
      throw InternalError(std::string(what) + ": total exceeds MPI's int displacement");
    }
  }
  return displs;
}

void bcast(const Comm& comm, std::string& text, int root) {
  std::uint64_t size = text.size();
  bcast(comm, std::span<std::uint64_t>(&size, 1), root);
  text.resize(size);
  bcast(comm, std::span<char>(text.data(), text.size()), root);
}

void barrier(const Comm& comm) {
  require_main_thread("barrier");
  check_mpi(MPI_Barrier(comm.handle()), "MPI_Barrier");
}

}  // namespace k3::dist

namespace k3::dist {

void allreduce_maxloc(const Comm& comm, std::span<float> values, std::span<std::int32_t> ids) {
  require_main_thread("allreduce_maxloc");
  if (values.size() != ids.size()) {
    throw InternalError("allreduce_maxloc: " + std::to_string(values.size()) + " values and " +
                        std::to_string(ids.size()) + " ids");
  }
  struct Pair {
    float value;
    int id;
  };
  std::vector<Pair> pairs(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) pairs[i] = {values[i], ids[i]};
  check_mpi(
      MPI_Allreduce(MPI_IN_PLACE, pairs.data(), checked_count(pairs.size(), "allreduce_maxloc"),
                    MPI_FLOAT_INT, MPI_MAXLOC, comm.handle()),
      "MPI_Allreduce(MAXLOC)");
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = pairs[i].value;
    ids[i] = pairs[i].id;
  }
}

}  // namespace k3::dist
