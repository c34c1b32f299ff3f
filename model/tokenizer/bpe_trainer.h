// A deterministic byte-level BPE trainer, for the synthetic checkpoints' small vocabulary.
//
// Texts are split with the same pre-tokenizer as encoding; ranks 0..255 are the single bytes
// (rank b is byte b); then, until the target size, the most frequent adjacent pair of symbols
// within a piece (weighted by piece count) becomes the next rank. Ties go to the smallest
// (left rank, right rank). The result is a tiktoken vocabulary like Kimi's, only smaller, so
// the synthetic checkpoints tokenize GSM8K the way a real model would (in spirit, not in ids).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "model/tokenizer/vocabulary.h"

namespace k3::model {

struct BpeTrainOptions {
  // Base vocabulary size including the 256 single bytes (the specials come on top).
  std::int32_t vocab_size = 4096;
  // Stop early when the most frequent pair occurs fewer times than this.
  std::int64_t min_pair_count = 2;
};

// Same inputs and options give the same vocabulary, on any platform.
Vocabulary train_bpe(std::span<const std::string> texts, const BpeTrainOptions& options = {});

}  // namespace k3::model
