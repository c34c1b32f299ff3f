// Encode throughput on GSM8K with one thread (target >= 10 MB/s).
//   bench_tokenizer --benchmark_filter=Encode
// The vocabulary is the 4,096-token one trained on GSM8K train (trained once at start-up).
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "model/tokenizer/bpe_trainer.h"
#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/tokenizer.h"
#include "test_support.h"

namespace {

using k3::model::AllowedSpecial;
using k3::model::Tokenizer;

const Tokenizer& tokenizer() {
  static const Tokenizer t(k3::model::test::trained_vocabulary());
  return t;
}

const std::vector<std::string>& texts(const std::string& split) {
  static const std::vector<std::string> test = k3::model::test::read_gsm8k("test");
  static const std::vector<std::string> train = k3::model::test::read_gsm8k("train");
  return split == "test" ? test : train;
}

std::size_t total_bytes(const std::vector<std::string>& v) {
  std::size_t n = 0;
  for (const auto& s : v) n += s.size();
  return n;
}

// Each question and answer encoded separately, as the evaluator does with prompts.
void BM_EncodeGsm8k(benchmark::State& state, const std::string& split) {
  const Tokenizer& t = tokenizer();
  const auto& v = texts(split);
  std::vector<std::int32_t> ids;
  for (auto _ : state) {
    for (const auto& s : v) {
      ids.clear();
      t.encode_into(s, AllowedSpecial::none(), ids);
      benchmark::DoNotOptimize(ids.data());
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * total_bytes(v)));
}
BENCHMARK_CAPTURE(BM_EncodeGsm8k, test, std::string("test"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeGsm8k, train, std::string("train"))->Unit(benchmark::kMillisecond);

// The whole test split as one text (a long prompt).
void BM_EncodeGsm8kOneText(benchmark::State& state) {
  const Tokenizer& t = tokenizer();
  std::string all;
  for (const auto& s : texts("test")) all += s + "\n\n";
  std::vector<std::int32_t> ids;
  for (auto _ : state) {
    ids.clear();
    t.encode_into(all, AllowedSpecial::all(), ids);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * all.size()));
}
BENCHMARK(BM_EncodeGsm8kOneText)->Unit(benchmark::kMillisecond);

// The pre-tokenizer alone (the PCRE2 part of the cost).
void BM_PretokenizeGsm8k(benchmark::State& state) {
  static const k3::model::Pretokenizer p;
  k3::model::Pretokenizer::Cursor cursor(p);
  const auto& v = texts("test");
  for (auto _ : state) {
    std::size_t pieces = 0;
    for (const auto& s : v) {
      cursor.reset(s);
      std::string_view piece;
      while (cursor.next(piece)) ++pieces;
    }
    benchmark::DoNotOptimize(pieces);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * total_bytes(v)));
}
BENCHMARK(BM_PretokenizeGsm8k)->Unit(benchmark::kMillisecond);

void BM_DecodeGsm8k(benchmark::State& state) {
  const Tokenizer& t = tokenizer();
  std::vector<std::vector<std::int32_t>> all;
  for (const auto& s : texts("test")) all.push_back(t.encode(s));
  for (auto _ : state) {
    for (const auto& ids : all) benchmark::DoNotOptimize(t.decode(ids));
  }
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * total_bytes(texts("test"))));
}
BENCHMARK(BM_DecodeGsm8k)->Unit(benchmark::kMillisecond);

// Training the 4,096-token vocabulary on GSM8K train.
void BM_TrainBpe(benchmark::State& state) {
  const auto& v = texts("train");
  for (auto _ : state) {
    benchmark::DoNotOptimize(k3::model::train_bpe(v, {.vocab_size = 4096, .min_pair_count = 2}));
  }
}
BENCHMARK(BM_TrainBpe)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
