// Typed collectives over a dist::Comm: the handful the engine and evaluator need, with MPI's
// counts and displacements computed here rather than at every call site. Main thread only.
//
// Each is MPI's nonblocking form completed at once (`complete`): the call posts every message of
// its schedule together, where the blocking algorithms Open MPI picks for all-to-all and
// allgather go round by round, each round waiting for one peer. A round that waits for a peer
// the kernel has not scheduled costs a time slice; on a host with more ranks than cores (64
// ranks on 2 cores) that made a 64-rank job about 1.5x slower (docs/PERFORMANCE.md).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "dist/comm.h"
#include "dist/watchdog.h"

namespace k3::dist {

template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int8_t>)
    return MPI_INT8_T;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return MPI_UINT8_T;
  else if constexpr (std::is_same_v<T, std::int16_t>)
    return MPI_INT16_T;
  else if constexpr (std::is_same_v<T, std::uint16_t>)
    return MPI_UINT16_T;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, std::uint32_t>)
    return MPI_UINT32_T;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, std::uint64_t>)
    return MPI_UINT64_T;
  else if constexpr (std::is_same_v<T, char>)
    return MPI_CHAR;
  else
    static_assert(sizeof(T) == 0, "no MPI datatype for this type");
}

enum class ReduceOp { kSum, kMax, kMin, kLogicalOr, kLogicalAnd };
MPI_Op mpi_op(ReduceOp op);

// The bytes a member sends for its traffic count (dist/traffic.h): an allreduce of `bytes` moves
// 2 (P - 1) / P of them, as a ring does; a contribution every other member receives, (P - 1)
// times.
inline std::uint64_t allreduce_bytes(std::size_t bytes, int members) {
  return members > 1 ? 2 * (static_cast<std::uint64_t>(members) - 1) * bytes /
                           static_cast<std::uint64_t>(members)
                     : 0;
}
inline std::uint64_t to_others_bytes(std::size_t bytes, int members) {
  return static_cast<std::uint64_t>(bytes) * static_cast<std::uint64_t>(std::max(members - 1, 0));
}
// Of `counts` elements of `size` bytes per member, those not for `me`.
inline std::uint64_t not_mine_bytes(std::span<const int> counts, int me, std::size_t size) {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (static_cast<int>(i) != me) n += static_cast<std::uint64_t>(std::max(counts[i], 0));
  }
  return n * size;
}

// MPI counts are int; refuse sizes that would silently wrap.
int checked_count(std::size_t n, const char* what);
// A nonblocking collective, started (`started`: the MPI_I... call's code) and waited for at once:
// either call's error names `what`, the MPI call.
void complete(int started, MPI_Request& request, const char* what);
std::vector<int> displacements(std::span<const int> counts, const char* what);

// In place over `data` on every member.
template <class T>
void allreduce(const Comm& comm, std::span<T> data, ReduceOp op) {
  const WaitScope wait("allreduce", comm, allreduce_bytes(data.size_bytes(), comm.size()));
  MPI_Request request;
  complete(MPI_Iallreduce(MPI_IN_PLACE, data.data(), checked_count(data.size(), "allreduce"),
                          mpi_type<T>(), mpi_op(op), comm.handle(), &request),
           request, "MPI_Iallreduce");
}

template <class T>
T allreduce(const Comm& comm, T value, ReduceOp op) {
  allreduce(comm, std::span<T>(&value, 1), op);
  return value;
}

// Sums `data` over the members, in place on every member, adding each element's values in rank
// order ((v0 + v1) + v2 ...) whatever the length. MPI_Allreduce may pick its algorithm, and with
// it each element's order of summation, by message size, so a row's sum could depend on how many
// rows share the call; the engine's partial sums use this instead, so a sequence's numbers do
// not depend on its batch. Each member owns a contiguous segment: it receives every
// member's values of it (one all-to-all), adds them in rank order, and the segments are gathered
// back (one allgather): 2 (P-1)/P of the data in and out per member, as a ring allreduce.
void allreduce_sum_ordered(const Comm& comm, std::span<float> data);

// The first half of that: `data` holds counts[m] values for each member m, in member order;
// returns this member's segment summed over the members in rank order (the same bits
// allreduce_sum_ordered gives it). One all-to-all.
std::vector<float> reduce_scatter_sum_ordered(const Comm& comm, std::span<const float> data,
                                              std::span<const int> counts);

// Per element i: the largest values[i] over the members and the id that came with it (the
// smallest id when several members hold the same value), in place on every member. Greedy
// decoding over a vocabulary-sharded LM head reduces (logit, token id) pairs this way.
void allreduce_maxloc(const Comm& comm, std::span<float> values, std::span<std::int32_t> ids);

// One value from every member, in rank order.
template <class T>
std::vector<T> allgather(const Comm& comm, const T& value) {
  const WaitScope wait("allgather", comm, to_others_bytes(sizeof(T), comm.size()));
  std::vector<T> out(comm.size());
  MPI_Request request;
  complete(MPI_Iallgather(&value, 1, mpi_type<T>(), out.data(), 1, mpi_type<T>(), comm.handle(),
                          &request),
           request, "MPI_Iallgather");
  return out;
}

template <class T>
struct Gathered {
  std::vector<T> data;      // every member's contribution, concatenated in rank order
  std::vector<int> counts;  // elements contributed by each member
  std::vector<int> displs;  // where each member's contribution starts in data
};

// Variable-length contributions from every member, to every member.
template <class T>
Gathered<T> allgatherv(const Comm& comm, std::span<const T> mine, std::vector<int> counts);
template <class T>
Gathered<T> allgatherv(const Comm& comm, std::span<const T> mine) {
  return allgatherv(comm, mine, allgather(comm, checked_count(mine.size(), "allgatherv")));
}

// The same when every member already knows what each member contributes (`counts`, one per
// member, the same on all of them): no count exchange, one collective instead of two.
template <class T>
Gathered<T> allgatherv(const Comm& comm, std::span<const T> mine, std::vector<int> counts) {
  const WaitScope wait("allgatherv", comm, to_others_bytes(mine.size_bytes(), comm.size()));
  if (static_cast<int>(counts.size()) != comm.size() ||
      counts[static_cast<std::size_t>(comm.rank())] != checked_count(mine.size(), "allgatherv")) {
    throw InternalError("allgatherv: known counts do not match this member's " +
                        std::to_string(mine.size()) + " elements or the communicator's " +
                        std::to_string(comm.size()) + " members");
  }
  Gathered<T> out;
  out.counts = std::move(counts);
  out.displs = displacements(out.counts, "allgatherv");
  out.data.resize(static_cast<std::size_t>(out.displs.back() + out.counts.back()));
  MPI_Request request;
  complete(
      MPI_Iallgatherv(mine.data(), static_cast<int>(mine.size()), mpi_type<T>(), out.data.data(),
                      out.counts.data(), out.displs.data(), mpi_type<T>(), comm.handle(), &request),
      request, "MPI_Iallgatherv");
  return out;
}

// Variable-length contributions to `root`; other members get an empty result.
template <class T>
Gathered<T> gatherv(const Comm& comm, std::span<const T> mine, int root) {
  const WaitScope wait("gatherv", comm, comm.rank() == root ? 0 : mine.size_bytes() + sizeof(int));
  const int count = checked_count(mine.size(), "gatherv");
  Gathered<T> out;
  if (comm.rank() == root) out.counts.resize(comm.size());
  MPI_Request request;
  complete(
      MPI_Igather(&count, 1, MPI_INT, out.counts.data(), 1, MPI_INT, root, comm.handle(), &request),
      request, "MPI_Igather");
  if (comm.rank() == root) {
    out.displs = displacements(out.counts, "gatherv");
    out.data.resize(static_cast<std::size_t>(out.displs.back() + out.counts.back()));
  }
  complete(MPI_Igatherv(mine.data(), count, mpi_type<T>(), out.data.data(), out.counts.data(),
                        out.displs.data(), mpi_type<T>(), root, comm.handle(), &request),
           request, "MPI_Igatherv");
  return out;
}

// One byte string from `root` to each member, parts[i] to member i (`parts` is read on the root
// only): like scatterv, without one buffer holding every part at once.
std::string scatter_parts(const Comm& comm, std::span<const std::string> parts, int root);

// Checks an alltoallv's send side (one count per member, adding up to `send_size`) and returns
// its displacements; InternalError otherwise.
inline std::vector<int> alltoallv_send_displs(const Comm& comm, std::size_t send_size,
                                              std::span<const int> send_counts) {
  if (static_cast<int>(send_counts.size()) != comm.size()) {
    throw InternalError("alltoallv: " + std::to_string(send_counts.size()) +
                        " send counts for a communicator of " + std::to_string(comm.size()));
  }
  std::vector<int> displs = displacements(send_counts, "alltoallv send");
  if (static_cast<std::size_t>(displs.back() + send_counts.back()) != send_size) {
    throw InternalError("alltoallv: send counts add up to " +
                        std::to_string(displs.back() + send_counts.back()) + " but " +
                        std::to_string(send_size) + " elements were given");
  }
  return displs;
}

// Personalised exchange: `send` holds send_counts[i] elements for member i, in member order.
// Counts are exchanged first, so receivers need not know them; a member with nothing to send
// still joins with zero counts.
template <class T>
Gathered<T> alltoallv(const Comm& comm, std::span<const T> send, std::span<const int> send_counts,
                      std::vector<int> recv_counts);
template <class T>
Gathered<T> alltoallv(const Comm& comm, std::span<const T> send, std::span<const int> send_counts) {
  const WaitScope wait("alltoallv", comm, to_others_bytes(sizeof(int), comm.size()));
  alltoallv_send_displs(comm, send.size(), send_counts);  // argument errors before any call
  std::vector<int> recv_counts(comm.size());
  MPI_Request request;
  complete(MPI_Ialltoall(send_counts.data(), 1, MPI_INT, recv_counts.data(), 1, MPI_INT,
                         comm.handle(), &request),
           request, "MPI_Ialltoall");
  return alltoallv(comm, send, send_counts, std::move(recv_counts));
}

// The same when each member already knows what it receives from every member (`recv_counts`,
// e.g. the answers to its own requests): no count exchange, one collective instead of two.
template <class T>
Gathered<T> alltoallv(const Comm& comm, std::span<const T> send, std::span<const int> send_counts,
                      std::vector<int> recv_counts) {
  const WaitScope wait("alltoallv", comm, not_mine_bytes(send_counts, comm.rank(), sizeof(T)));
  const std::vector<int> send_displs = alltoallv_send_displs(comm, send.size(), send_counts);
  if (static_cast<int>(recv_counts.size()) != comm.size()) {
    throw InternalError("alltoallv: " + std::to_string(recv_counts.size()) +
                        " receive counts for a communicator of " + std::to_string(comm.size()));
  }
  Gathered<T> out;
  out.counts = std::move(recv_counts);
  out.displs = displacements(out.counts, "alltoallv receive");
  out.data.resize(static_cast<std::size_t>(out.displs.back() + out.counts.back()));
  MPI_Request request;
  complete(MPI_Ialltoallv(send.data(), send_counts.data(), send_displs.data(), mpi_type<T>(),
                          out.data.data(), out.counts.data(), out.displs.data(), mpi_type<T>(),
                          comm.handle(), &request),
           request, "MPI_Ialltoallv");
  return out;
}

template <class T>
void bcast(const Comm& comm, std::span<T> data, int root) {
  const WaitScope wait("bcast", comm,
                       comm.rank() == root ? to_others_bytes(data.size_bytes(), comm.size()) : 0);
  MPI_Request request;
  complete(MPI_Ibcast(data.data(), checked_count(data.size(), "bcast"), mpi_type<T>(), root,
                      comm.handle(), &request),
           request, "MPI_Ibcast");
}

// A string of any length from `root` to every member.
void bcast(const Comm& comm, std::string& text, int root);

void barrier(const Comm& comm);

}  // namespace k3::dist
