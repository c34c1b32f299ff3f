// The mutants of model/synth/mutants.h change exactly the tensor they name, by the amount they
// name, in the format's own encoding: compared byte for byte with the clean synthetic checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/checkpoint/checkpoint.h"
#include "model/synth/mutants.h"
#include "model/synth/synth.h"
#include "quant/fp.h"
#include "tests/model/test_dirs.h"

namespace k3::model {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

std::map<std::string, Bytes> stored_bytes(const fs::path& dir) {
  const Checkpoint ck = Checkpoint::open(dir);
  std::map<std::string, Bytes> out;
  for (const StoredTensor& t : ck.tensors()) {
    std::ifstream in(ck.files().at(t.file), std::ios::binary);
    Bytes b(t.entry.nbytes);
    in.seekg(static_cast<std::streamoff>(t.entry.offset));
    in.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(b.size()));
    out[t.entry.name] = std::move(b);
  }
  return out;
}

fs::path mutant(FormatKind format, const std::string& name, std::optional<double> amount = {}) {
  SynthOptions o;
  o.format = format;
  o.out = test::scratch_dir() / ("mutant-" + std::string(format_name(format)) + "-" + name);
  o.corpus = test::source_dir() / ".." / "shared" / "data" / "gsm8k" / "train.jsonl";
  o.mutant = Mutation{name, amount};
  fs::remove_all(o.out);
  synthesize_checkpoint(o);
  return o.out;
}

// The names of the tensors whose bytes differ (the two hold the same names).
std::vector<std::string> changed(const std::map<std::string, Bytes>& clean,
                                 const std::map<std::string, Bytes>& mutated) {
  EXPECT_EQ(clean.size(), mutated.size());
  std::vector<std::string> out;
  for (const auto& [name, bytes] : clean)
    if (mutated.at(name) != bytes) out.push_back(name);
  return out;
}

std::vector<float> bf16s(const Bytes& b) {
  std::vector<float> v(b.size() / 2);
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::uint16_t h;
    std::memcpy(&h, b.data() + 2 * i, 2);
    v[i] = quant::bf16_to_f32(h);
  }
  return v;
}

std::vector<float> f32s(const Bytes& b) {
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

const std::string kMlaOProj = "language_model.model.layers.2.self_attn.o_proj.weight";

TEST(Mutants, AScaledProjectionChangesThatMatrixAloneByItsAmount) {
  const auto clean = stored_bytes(test::synthetic_checkpoint(FormatKind::kHf));
  const auto mutated = stored_bytes(mutant(FormatKind::kHf, "mla_o_proj"));
  ASSERT_EQ(changed(clean, mutated), std::vector<std::string>{kMlaOProj});
  const auto want = bf16s(clean.at(kMlaOProj)), got = bf16s(mutated.at(kMlaOProj));
  for (std::size_t i = 0; i < want.size(); i += 97)
    EXPECT_NEAR(got[i], 1.2f * want[i], 0.01f * std::abs(want[i]) + 1e-6f) << i;
}

TEST(Mutants, TheExpertSwapExchangesTwoExpertsAndNothingElse) {
  const auto clean = stored_bytes(test::synthetic_checkpoint(FormatKind::kHf));
  const auto mutated = stored_bytes(mutant(FormatKind::kHf, "expert_swap"));
  const std::vector<std::string> diff = changed(clean, mutated);
  // w1, w2, w3 of experts 0 and 1, each its packed values and its scales.
  EXPECT_EQ(diff.size(), 12u);
  const std::string layer = "language_model.model.layers.3.block_sparse_moe.experts.";
  for (const auto& [name, bytes] : clean) {
    if (name.rfind(layer + "0.", 0) != 0) continue;
    const std::string other = layer + "1." + name.substr(layer.size() + 2);
    EXPECT_EQ(mutated.at(name), clean.at(other)) << name;
    EXPECT_EQ(mutated.at(other), bytes) << other;
  }
}

TEST(Mutants, OneExpertsOutputAndTheKdaDecayChangeOnlyTheirOwnValues) {
  const auto clean = stored_bytes(test::synthetic_checkpoint(FormatKind::kHf));
  const std::string w2 = "language_model.model.layers.3.block_sparse_moe.experts.0.w2.";
  const auto expert = changed(clean, stored_bytes(mutant(FormatKind::kHf, "routed_expert_down")));
  for (const auto& name : expert) EXPECT_EQ(name.rfind(w2, 0), 0u) << name;
  EXPECT_FALSE(expert.empty());

  const std::string a_log = "language_model.model.layers.3.self_attn.A_log";
  const auto mutated = stored_bytes(mutant(FormatKind::kHf, "kda_decay"));
  ASSERT_EQ(changed(clean, mutated), std::vector<std::string>{a_log});
  const auto want = f32s(clean.at(a_log)), got = f32s(mutated.at(a_log));
  // The decay's heads: the rate exp(A_log) 10 % larger; the release's unused tail stays zero.
  const int heads = Checkpoint::open(test::synthetic_checkpoint(FormatKind::kHf)).config().kda_num_heads;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (i >= static_cast<std::size_t>(heads)) {
      EXPECT_EQ(got[i], want[i]) << i;
      continue;
    }
    EXPECT_NEAR(std::exp(got[i]), 1.1 * std::exp(want[i]), 1e-5 * std::exp(want[i])) << i;
  }
}

TEST(Mutants, StoredEncodingsChangeInTheFormatThatHasThem) {
  {
    const auto clean = stored_bytes(test::synthetic_checkpoint(FormatKind::kModelSlim));
    const auto mutated = stored_bytes(mutant(FormatKind::kModelSlim, "modelslim_scale"));
    const std::string scale = kMlaOProj + "_scale";
    ASSERT_EQ(changed(clean, mutated), std::vector<std::string>{scale});
    const auto want = f32s(clean.at(scale)), got = f32s(mutated.at(scale));
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], 1.1f * want[i]);
  }
  {
    const auto clean = stored_bytes(test::synthetic_checkpoint(FormatKind::kGguf));
    const auto mutated = stored_bytes(mutant(FormatKind::kGguf, "gguf_block_scale", 1.0));
    const std::string o_proj = "blk.2.attn_output.weight";
    ASSERT_EQ(changed(clean, mutated), std::vector<std::string>{o_proj});
    const Bytes &want = clean.at(o_proj), &got = mutated.at(o_proj);
    // Only the first Q8_0 block's fp16 scale, doubled.
    EXPECT_TRUE(std::equal(want.begin() + 2, want.end(), got.begin() + 2));
    std::uint16_t a, b;
    std::memcpy(&a, want.data(), 2);
    std::memcpy(&b, got.data(), 2);
    EXPECT_FLOAT_EQ(quant::fp16_to_f32(b), 2 * quant::fp16_to_f32(a));
  }
}

TEST(Mutants, TheDraftsRotaryBaseChangesItsConfigAndNoTensor) {
  const fs::path clean = test::synthetic_checkpoint(FormatKind::kDraft);
  const fs::path mutated = mutant(FormatKind::kDraft, "draft_rope_base");
  EXPECT_TRUE(changed(stored_bytes(clean), stored_bytes(mutated)).empty());
  const double want = Checkpoint::open(clean).config().dspark->rope_theta;
  EXPECT_DOUBLE_EQ(Checkpoint::open(mutated).config().dspark->rope_theta, 1.05 * want);
}

TEST(Mutants, AMutantTheFormatLacksOrThatCannotBeWrittenIsRefused) {
  auto refused = [](SynthOptions o, const std::string& expect) {
    o.out = test::scratch_dir() / "mutant-refused";
    try {
      synthesize_checkpoint(o);
      ADD_FAILURE() << "accepted; expected: " << expect;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
  };
  SynthOptions o;
  o.format = FormatKind::kHf;
  o.mutant = Mutation{"gguf_block_scale", {}};
  refused(o, "does not apply to the hf format");
  o.format = FormatKind::kDraft;
  o.mutant = Mutation{"lm_head", {}};
  refused(o, "does not apply to the draft format");
  o.format = FormatKind::kGguf;
  o.mutant = Mutation{"draft_rope_base", {}};
  refused(o, "does not apply to the gguf format");
  o.format = FormatKind::kHf;
  o.mutant = Mutation{"lm_head", -1.0};
  refused(o, "expected > -1");
  o.mutant = Mutation{"lm_head", {}};
  o.header_only = true;
  refused(o, "needs tensor values");
  EXPECT_THROW(find_mutant("no_such_mutant"), UsageError);
}

}  // namespace
}  // namespace k3::model
