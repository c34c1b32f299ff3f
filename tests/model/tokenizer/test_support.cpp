#include "test_support.h"

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "model/tokenizer/bpe_trainer.h"

namespace k3::model::test {
namespace {

struct Trained {
  Vocabulary vocab;
  double seconds;
};

const Trained& trained() {
  static const Trained t = [] {
    const std::vector<std::string> texts = read_gsm8k("train");
    const auto start = std::chrono::steady_clock::now();
    Vocabulary v = train_bpe(texts, BpeTrainOptions{.vocab_size = 4096, .min_pair_count = 2});
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    return Trained{std::move(v), elapsed.count()};
  }();
  return t;
}

}  // namespace

std::vector<std::string> read_gsm8k(const std::string& split) {
  const std::string path = std::string(K3_GSM8K_DIR) + "/" + split + ".jsonl";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path + " (the shared GSM8K data)");
  std::vector<std::string> texts;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    texts.push_back(j.at("question").get<std::string>());
    texts.push_back(j.at("answer").get<std::string>());
  }
  return texts;
}

const Vocabulary& trained_vocabulary() { return trained().vocab; }
double trained_vocabulary_seconds() { return trained().seconds; }

Vocabulary byte_vocabulary(const std::vector<std::string>& extra) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  tokens.insert(tokens.end(), extra.begin(), extra.end());
  return Vocabulary::from_ranked_tokens(tokens, "test vocabulary");
}

}  // namespace k3::model::test
