// dist::Groups: the MPI communicators of one Layout, each verified against it after creation.
#pragma once

#include <array>

#include "dist/comm.h"
#include "dist/layout.h"
#include "dist/runtime.h"

namespace k3::dist {

class Groups {
 public:
  // Collective over the world. Builds one communicator per GroupKind (the node one from
  // MPI_Comm_split by the Layout's node blocks, which discover_nodes() has checked against
  // MPI_COMM_TYPE_SHARED or the simulated --ranks-per-node), then allgathers each one's members
  // and compares them with the Layout. A mismatch on any rank is an InternalError on that rank,
  // thrown only after every collective has completed.
  Groups(const Layout& layout, const Comm& world);

  const Layout& layout() const { return layout_; }
  const Comm& get(GroupKind kind) const { return comms_[static_cast<int>(kind)]; }
  const Comm& world() const { return get(GroupKind::kWorld); }
  const Comm& tp() const { return get(GroupKind::kTp); }
  const Comm& attn_tp() const { return get(GroupKind::kAttnTp); }
  const Comm& attn_dp() const { return get(GroupKind::kAttnDp); }
  const Comm& moe_ep() const { return get(GroupKind::kMoeEp); }
  const Comm& moe_tp() const { return get(GroupKind::kMoeTp); }
  const Comm& node() const { return get(GroupKind::kNode); }

 private:
  Layout layout_;
  std::array<Comm, kAllGroupKinds.size()> comms_;
};

}  // namespace k3::dist
