#include "dist/groups.h"

#include <string>

#include <fmt/format.h>

#include "dist/collectives.h"

namespace k3::dist {

Groups::Groups(const Layout& layout, const Comm& world) : layout_(layout) {
  if (world.size() != layout.world()) {
    throw InternalError("layout for " + std::to_string(layout.world()) +
                        " ranks used on a world of " + std::to_string(world.size()));
  }
  const int me = world.rank();
  std::string mismatches;
  for (GroupKind kind : kAllGroupKinds) {
    // The world group too is split from `world` (one colour: a duplicate), so Groups over a
    // sub-communicator (e.g. MPI_COMM_SELF for a one-rank engine beside a job) stays inside it.
    Comm comm = world.split(layout.group_index(kind, me), /*key=*/me);
    comm.set_name(group_kind_name(kind).data());
    const std::vector<int> actual = allgather(comm, me);
    const std::vector<int> expected = layout.members(kind, me);
    if (actual != expected) {
      mismatches += fmt::format(" {}: communicator has {}, layout says {};", group_kind_name(kind),
                                format_members(actual), format_members(expected));
    }
    comms_[static_cast<int>(kind)] = std::move(comm);
  }
  if (!mismatches.empty()) {
    throw InternalError("rank " + std::to_string(me) +
                        " communicators disagree with the layout:" + mismatches);
  }
}

}  // namespace k3::dist
