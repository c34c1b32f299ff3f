#include "apps/k3eval/check_layout.h"

#include <algorithm>

#include <fmt/format.h>

namespace k3::apps {

namespace {

// "host h1  attn-tp  {0..3}  moe-ep  {0..7} (4 of 8 here)": per host, every group kind but the
// world and the node, with the groups that have members there.
std::string host_groups(const dist::Layout& layout, const dist::NodeInfo& nodes) {
  std::string out;
  const auto node_groups = layout.groups(dist::GroupKind::kNode);
  for (size_t n = 0; n < node_groups.size() && n < nodes.node_hosts.size(); ++n) {
    const std::vector<int>& on_host = node_groups[n];
    out += fmt::format("host {}: ranks {}\n", nodes.node_hosts[n], dist::format_members(on_host));
    for (dist::GroupKind kind : dist::kAllGroupKinds) {
      if (kind == dist::GroupKind::kWorld || kind == dist::GroupKind::kNode) continue;
      std::string lists;
      for (const auto& members : layout.groups(kind)) {
        const auto here = std::count_if(members.begin(), members.end(), [&](int r) {
          return r >= on_host.front() && r <= on_host.back();
        });
        if (here == 0) continue;
        if (!lists.empty()) lists += ' ';
        lists += dist::format_members(members);
        if (static_cast<size_t>(here) < members.size())
          lists += fmt::format(" ({} of {} here)", here, members.size());
      }
      out += fmt::format("  {:<13} {}\n", dist::group_kind_name(kind), lists);
    }
  }
  return out;
}

}  // namespace

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
  if (!nodes.simulated && node_groups.size() > 1) out += host_groups(layout, nodes);
  return out;
}

std::string hosts_file(const dist::NodeInfo& nodes) {
  std::string out;
  for (size_t n = 0; n < nodes.node_hosts.size(); ++n) {
    const size_t first = n * static_cast<size_t>(nodes.ranks_per_node);
    out += fmt::format("{} {}-{}\n", nodes.node_hosts[n], first,
                       first + static_cast<size_t>(nodes.ranks_per_node) - 1);
  }
  return out;
}

}  // namespace k3::apps
