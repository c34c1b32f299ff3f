// Shared by tokenizer_tests and bench_tokenizer: GSM8K text and small vocabularies.
#pragma once

#include <string>
#include <vector>

#include "model/tokenizer/vocabulary.h"

namespace k3::model::test {

// Questions and answers of ../shared/data/gsm8k/<split>.jsonl, interleaved (q0, a0, q1, ...).
// K3_GSM8K_DIR is set by CMake from the source tree; the data is never copied into the repo.
std::vector<std::string> read_gsm8k(const std::string& split);

// The 4,096-token vocabulary trained on GSM8K train (questions and answers), built once per
// process; the seconds training took.
const Vocabulary& trained_vocabulary();
double trained_vocabulary_seconds();

// Bytes 0..255 at ranks 0..255, then `extra` at ranks 256, 257, ...
Vocabulary byte_vocabulary(const std::vector<std::string>& extra = {});

}  // namespace k3::model::test
