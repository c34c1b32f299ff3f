#pragma once

#include <string>

#include "dist/layout.h"
#include "dist/runtime.h"

namespace k3::apps {

// The table `k3eval --check-layout` prints: one line per group kind with its member lists, the
// weight-family placements the flags choose, and the nodes.
// With hosts from the launcher (not simulated by --ranks-per-node) it ends with one line per host
// and group kind: the groups with members on that host, and how many of each group's members
// are there, so that a group spanning hosts (its collectives cross the network) stands out.
std::string layout_table(const dist::Layout& layout, const dist::NodeInfo& nodes);

// The artifacts' hosts.txt: one line "HOST FIRST-LAST" per node, its host name and its block of
// world ranks (a launcher wrapper names a lost host's ranks from it).
std::string hosts_file(const dist::NodeInfo& nodes);

}  // namespace k3::apps
