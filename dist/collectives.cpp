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

void complete(int started, MPI_Request& request, const char* what) {
  check_mpi(started, what);
  check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), what);
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

std::string scatter_parts(const Comm& comm, std::span<const std::string> parts, int root) {
  std::uint64_t sent = 0;
  if (comm.rank() == root) {
    for (std::size_t r = 0; r < parts.size(); ++r)
      if (static_cast<int>(r) != root) sent += parts[r].size() + sizeof(int);
  }
  const WaitScope wait("scatter_parts", comm, sent);
  std::vector<int> counts;
  if (comm.rank() == root) {
    if (static_cast<int>(parts.size()) != comm.size()) {
      throw InternalError("scatter_parts: " + std::to_string(parts.size()) + " parts for " +
                          std::to_string(comm.size()) + " members");
    }
    for (const std::string& p : parts) counts.push_back(checked_count(p.size(), "scatter_parts"));
  }
  int mine = 0;
  MPI_Request request;
  complete(
      MPI_Iscatter(counts.data(), 1, MPI_INT, &mine, 1, MPI_INT, root, comm.handle(), &request),
      request, "MPI_Iscatter");
  std::string out(static_cast<std::size_t>(mine), '\0');
  constexpr int kTag = 7301;
  if (comm.rank() == root) {
    std::vector<MPI_Request> sends;
    for (int r = 0; r < comm.size(); ++r) {
      if (r == root) continue;
      sends.emplace_back();
      check_mpi(
          MPI_Isend(parts[static_cast<std::size_t>(r)].data(), counts[static_cast<std::size_t>(r)],
                    MPI_CHAR, r, kTag, comm.handle(), &sends.back()),
          "MPI_Isend");
    }
    out = parts[static_cast<std::size_t>(root)];
    check_mpi(MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE),
              "MPI_Waitall");
  } else {
    check_mpi(MPI_Recv(out.data(), mine, MPI_CHAR, root, kTag, comm.handle(), MPI_STATUS_IGNORE),
              "MPI_Recv");
  }
  return out;
}

void barrier(const Comm& comm) {
  const WaitScope wait("barrier", comm);
  MPI_Request request;
  complete(MPI_Ibarrier(comm.handle(), &request), request, "MPI_Ibarrier");
}

}  // namespace k3::dist

namespace k3::dist {

void allreduce_sum_ordered(const Comm& comm, std::span<float> data) {
  const int members = comm.size();
  if (members == 1) return;
  checked_count(data.size(), "allreduce_sum_ordered");
  const auto p = static_cast<std::size_t>(members);
  // Segment s = [n s / P, n (s + 1) / P): member s adds it up, then every member gets them all.
  std::vector<int> counts(p), displs(p);
  for (std::size_t s = 0; s < p; ++s) {
    displs[s] = static_cast<int>(data.size() * s / p);
    counts[s] = static_cast<int>(data.size() * (s + 1) / p) - displs[s];
  }
  const auto me = static_cast<std::size_t>(comm.rank());
  // The gather's bytes here, the reduce-scatter's in its own scope.
  const WaitScope wait("allreduce_sum_ordered", comm,
                       to_others_bytes(static_cast<std::size_t>(counts[me]) * sizeof(float),
                                       members));
  const std::vector<float> sum = reduce_scatter_sum_ordered(comm, data, counts);
  std::copy(sum.begin(), sum.end(), data.begin() + displs[me]);
  MPI_Request request;
  complete(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data.data(), counts.data(),
                           displs.data(), MPI_FLOAT, comm.handle(), &request),
           request, "MPI_Iallgatherv");
}

std::vector<float> reduce_scatter_sum_ordered(const Comm& comm, std::span<const float> data,
                                              std::span<const int> counts) {
  const std::vector<int> displs = alltoallv_send_displs(comm, data.size(), counts);
  const auto me = static_cast<std::size_t>(comm.rank());
  const int mine = counts[me];
  if (comm.size() == 1) return std::vector<float>(data.begin(), data.end());
  const WaitScope wait("reduce_scatter_sum_ordered", comm,
                       not_mine_bytes(counts, comm.rank(), sizeof(float)));
  const auto p = static_cast<std::size_t>(comm.size());
  std::vector<int> recv_counts(p, mine), recv_displs(p);
  for (std::size_t r = 0; r < p; ++r) recv_displs[r] = static_cast<int>(r) * mine;
  std::vector<float> parts(p * static_cast<std::size_t>(mine));
  MPI_Request request;
  complete(
      MPI_Ialltoallv(data.data(), counts.data(), displs.data(), MPI_FLOAT, parts.data(),
                     recv_counts.data(), recv_displs.data(), MPI_FLOAT, comm.handle(), &request),
      request, "MPI_Ialltoallv");
  std::vector<float> sum(parts.begin(), parts.begin() + mine);
  for (std::size_t r = 1; r < p; ++r) {
    const float* part = parts.data() + r * static_cast<std::size_t>(mine);
    for (int i = 0; i < mine; ++i) sum[static_cast<std::size_t>(i)] += part[i];
  }
  return sum;
}

void allreduce_maxloc(const Comm& comm, std::span<float> values, std::span<std::int32_t> ids) {
  const WaitScope wait("allreduce_maxloc", comm,
                       allreduce_bytes(values.size() * (sizeof(float) + sizeof(int)), comm.size()));
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
  MPI_Request request;
  complete(
      MPI_Iallreduce(MPI_IN_PLACE, pairs.data(), checked_count(pairs.size(), "allreduce_maxloc"),
                     MPI_FLOAT_INT, MPI_MAXLOC, comm.handle(), &request),
      request, "MPI_Iallreduce(MAXLOC)");
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = pairs[i].value;
    ids[i] = pairs[i].id;
  }
}

}  // namespace k3::dist
