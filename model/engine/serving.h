// engine::build_serving: everything that serves requests on this rank, built from one options
// value: the checkpoint's tokenizer (opened once), the draft checked against its target, the
// memory the engine and drafter will hold checked against what this host has, then the engine
// over this rank's slice and, when speculating, the DSpark drafter beside it. The apps parse
// their options into ServingOptions, call, and print.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "dist/groups.h"
#include "dist/runtime.h"
#include "model/config.h"
#include "model/engine/dspark.h"
#include "model/engine/engine.h"
#include "model/engine/speculation.h"
#include "model/load/weights.h"
#include "model/tokenizer/tokenizer.h"

namespace k3::model::engine {

struct ServingOptions {
  std::filesystem::path model_path;  // where the tokenizer is read (tiktoken.model or GGUF keys)
  bool exact = false;                // EngineOptions::exact
  bool repack_weights = true;        // EngineOptions::repack_weights
  bool trace_layers = false;         // EngineOptions::trace_layers
  int running_requests = 1;          // sequences decoded at once
  int slots = 0;                     // sequence state slots; 0: running_requests + 1
  std::size_t context_length = 4096;
  // Build the drafter (ServingModel::draft_config must be set).
  bool speculative = false;
  int speculative_block_size = 0;  // 0: the draft checkpoint's block size
  SpeculationOptions speculation;  // how many drafts each request verifies per step
  // Bytes this rank may use; 0: /proc/meminfo's MemAvailable shared by the ranks of this node.
  std::uint64_t available_bytes = 0;
};

// This rank's loaded weights: the target's and, for speculation, the draft's.
struct ServingModel {
  const ModelConfig* config = nullptr;
  const WeightStore* weights = nullptr;
  const ModelConfig* draft_config = nullptr;
  const WeightStore* draft_weights = nullptr;
  std::string draft_root;  // the draft checkpoint's directory, for errors
};

struct Serving {
  Tokenizer tokenizer;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Drafter> drafter;  // null without speculation
  int block_size = 0;                // the drafter's tokens per round (0 without one)
  std::unique_ptr<Speculation> speculation;  // beside the drafter: the draft-length policy
  // The prefix snapshots the engine's slots hold between runs (the warm-up's, for the timed run).
  std::unique_ptr<ResidentPrefixes> resident_prefixes = std::make_unique<ResidentPrefixes>();
};

// Collective over the world: one clear error on every rank if any rank's part fails
// (a tokenizer the config contradicts, a draft that does not fit, a budget over the host's
// memory).
Serving build_serving(dist::Runtime& runtime, const dist::Groups& groups,
                      const ServingModel& model, const ServingOptions& options);

// A draft is served beside its target only when the two fit together: it reads the target's
// hidden states at its taps, embeds with the target's embedding and adds its Markov logits to the
// target's LM head. Each refusal is an InputError naming the draft's config.json
// (`draft_root`/config.json), the key and both values.
void check_draft_fits(const ModelConfig& draft, const std::string& draft_root,
                      const ModelConfig& target);

// MemAvailable of this host shared by the ranks of `groups`' node.
std::uint64_t available_bytes_per_rank(const dist::Groups& groups);

}  // namespace k3::model::engine
