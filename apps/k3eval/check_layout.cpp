#include "apps/k3eval/check_layout.h"

#include <fmt/format.h>

namespace k3::apps {

std::string layout_table(const dist::Layout& layout, const dist::NodeInfo& nodes) {
  std::string out = fmt::format("layout: {}\n", layout.summary());
  out += fmt::format("{:<15} {:>6} {:>5}  {}\n", "group", "groups", "size", "members");
  for (dist::GroupKind kind : dist::kAllGroupKinds) {
    std::string lists;
    for (const auto& members : layout.groups(kind)) {
      if (!lists.empty()) lists += ' ';
      lists += dist::format_members(members);
    }
    out += fmt::format("{:<15} {:>6} {:>5}  {}\n", dist::group_kind_name(kind),
                       layout.group_count(kind), layout.group_size(kind), lists);
  }
  out += fmt::format("{:<15} {}\n", "dense-mlp",
                     "split over " + std::string(group_kind_name(layout.dense_mlp_group())));
  out += fmt::format("{:<15} {}\n", "shared-experts",
                     "split over " + std::string(group_kind_name(layout.shared_experts_group())));
  out += fmt::format("{:<15} {}\n", "lm-head",
                     fmt::format("vocabulary split {}-way over {}", layout.vocab_shard(0).count,
                                 group_kind_name(layout.lm_head_group())));
  const auto node_groups = layout.groups(dist::GroupKind::kNode);
  for (size_t n = 0; n < node_groups.size(); ++n) {
    const std::string host = n < nodes.node_hosts.size() ? nodes.node_hosts[n] : "?";
    out += fmt::format("node {:<10} {:>6} {:>5}  {} on {}{}\n", n, "", node_groups[n].size(),
                       dist::format_members(node_groups[n]), host,
                       nodes.simulated ? " (simulated by --ranks-per-node)" : "");
  }
  return out;
}

}  // namespace k3::apps
