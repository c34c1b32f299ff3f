// The serving builder on one rank: what it builds from one options value, and each refusal
// (a draft that does not fit its target, a budget over the memory given) as one error naming
// what is wrong.
#include <gtest/gtest.h>

#include <string>

#include "dist/groups.h"
#include "dist/runtime.h"
#include "model/engine/serving.h"
#include "tests/model/engine/engine_support.h"
#include "tests/model/test_dirs.h"
#include "tests/support/mpi_test.h"

namespace k3::test {
namespace {

using model::FormatKind;
using model::engine::build_serving;
using model::engine::ServingModel;
using model::engine::ServingOptions;

struct Pair {
  dist::Layout layout = dist::Layout::make(dist::LayoutSpec{});
  dist::Comm self{MPI_COMM_SELF};
  dist::Groups groups{layout, self};
  LoadedSlice target = load_slice(synthetic_checkpoint(FormatKind::kHf), layout, 0);
  LoadedSlice draft = load_slice(synthetic_checkpoint(FormatKind::kDraft), layout, 0);

  ServingModel model(bool with_draft) const {
    ServingModel m;
    m.config = &target.checkpoint->config();
    m.weights = &target.loaded.weights;
    if (with_draft) {
      m.draft_config = &draft.checkpoint->config();
      m.draft_weights = &draft.loaded.weights;
      m.draft_root = draft.checkpoint->root();
    }
    return m;
  }
};

Pair& pair() {
  static Pair p;
  return p;
}

ServingOptions options() {
  ServingOptions o;
  o.model_path = synthetic_checkpoint(FormatKind::kHf);
  o.running_requests = 2;
  o.context_length = 512;
  return o;
}

// The message of the error collectively() reported.
std::string refusal(const ServingModel& model, const ServingOptions& o) {
  try {
    build_serving(runtime(), pair().groups, model, o);
  } catch (const dist::ReportedError& e) {
    return e.message();
  }
  return "";
}

TEST(ServingBuilder, BuildsTheEngineWithTheCheckpointsTokenizer) {
  const auto serving = build_serving(runtime(), pair().groups, pair().model(false), options());
  ASSERT_NE(serving.engine, nullptr);
  EXPECT_EQ(serving.drafter, nullptr);
  EXPECT_EQ(serving.block_size, 0);
  EXPECT_GT(serving.tokenizer.size(), 256);
  EXPECT_EQ(serving.engine->options().slots, 3);  // running requests + 1 (the prefix)
  EXPECT_EQ(serving.engine->options().context_length, 512u);
}

TEST(ServingBuilder, BuildsTheDrafterWithItsBlockSize) {
  ServingOptions o = options();
  o.speculative = true;
  o.speculative_block_size = 3;
  const auto serving = build_serving(runtime(), pair().groups, pair().model(true), o);
  ASSERT_NE(serving.drafter, nullptr);
  EXPECT_EQ(serving.block_size, 3);
  EXPECT_EQ(serving.drafter->block_size(), 3);
  EXPECT_FALSE(serving.engine->options().tap_layers.empty());
}

TEST(ServingBuilder, RefusesABudgetOverTheMemoryGiven) {
  ServingOptions o = options();
  o.available_bytes = 1 << 20;
  const std::string message = refusal(pair().model(false), o);
  EXPECT_NE(message.find("available per rank"), std::string::npos) << message;
  EXPECT_NE(message.find("--max-running-requests"), std::string::npos) << message;
}

TEST(ServingBuilder, RefusesSpeculationWithoutADraft) {
  ServingOptions o = options();
  o.speculative = true;
  EXPECT_NE(refusal(pair().model(false), o).find("--draft-model-path"), std::string::npos);
}

TEST(ServingBuilder, RefusesADraftThatDoesNotFitItsTarget) {
  model::ModelConfig draft = pair().draft.checkpoint->config();
  const model::ModelConfig& target = pair().target.checkpoint->config();
  draft.hidden_size += 64;
  try {
    model::engine::check_draft_fits(draft, "/ckpt/draft", target);
    FAIL() << "a draft with another hidden_size was accepted";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("/ckpt/draft/config.json: draft hidden_size"), std::string::npos) << m;
  }
  draft = pair().draft.checkpoint->config();
  draft.dspark->target_layer_ids.push_back(target.num_hidden_layers);
  EXPECT_THROW(model::engine::check_draft_fits(draft, "/ckpt/draft", target), InputError);
  draft = pair().draft.checkpoint->config();
  draft.dspark->mask_token_id = target.vocab_size;
  EXPECT_THROW(model::engine::check_draft_fits(draft, "/ckpt/draft", target), InputError);
  EXPECT_NO_THROW(
      model::engine::check_draft_fits(pair().draft.checkpoint->config(), "/ckpt/draft", target));
}

}  // namespace
}  // namespace k3::test
