#include "apps/common/layout_options.h"

#include <boost/program_options.hpp>

#include "common/error.h"

namespace k3::apps {

namespace po = boost::program_options;

po::options_description layout_options(dist::LayoutSpec& spec) {
  po::options_description parallel("Parallel layout (SGLang semantics)");
  // clang-format off
  parallel.add_options()
      ("tp", po::value(&spec.tp)->value_name("N")->notifier([](int tp) {
         // 0 is the layout's "not given"; said on the command line it is a mistake, as --dp 0 is.
         if (tp < 1) {
           throw UsageError("invalid parallel layout: --tp " + std::to_string(tp) +
                            " must be >= 1 (leave --tp out for the world size)");
         }
       }),
       "tensor-parallel size >= 1 (default: the world size, or world / dp without DP attention)")
      ("dp", po::value(&spec.dp)->value_name("N"), "data-parallel size (default 1)")
      ("ep", po::value(&spec.ep)->value_name("N"), "expert-parallel size; must divide tp (default 1)")
      ("enable-dp-attention", po::bool_switch(&spec.enable_dp_attention),
       "split the TP group into dp attention-TP groups of tp/dp ranks")
      ("enable-dp-lm-head", po::bool_switch(&spec.enable_dp_lm_head),
       "shard the LM head vocabulary over the attention-TP group (needs DP attention)")
      ("enable-shared-experts-attn-tp", po::bool_switch(&spec.enable_shared_experts_attn_tp),
       "split the shared experts over the attention-TP group instead of TP")
      ("enable-dense-mlp-attn-tp", po::bool_switch(&spec.enable_dense_mlp_attn_tp),
       "split the dense MLP over the attention-TP group instead of TP")
      ("ranks-per-node", po::value(&spec.ranks_per_node)->value_name("N"),
       "nodes of N consecutive ranks (simulates e.g. 4 nodes x 16 on one host)");
  // clang-format on
  return parallel;
}

}  // namespace k3::apps
