#pragma once

#include <string>

#include "dist/layout.h"
#include "dist/runtime.h"

namespace k3::apps {

// The table `k3eval --check-layout` prints: one line per group kind with its member lists, the
// weight-family placements the flags choose, and the nodes.
std::string layout_table(const dist::Layout& layout, const dist::NodeInfo& nodes);

}  // namespace k3::apps
