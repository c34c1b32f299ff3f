// The mutation run: plants every mutant of model/synth/mutants.h in the synthetic tiny checkpoint
// of each format and runs the project's regression checks on it. Each check compares the engine
// on the mutant with what the clean checkpoint defines, so a mutant stands for an engine (or a
// file) that computes one block wrongly:
//
//   golden          greedy tokens of GSM8K few-shot prompts in the default int8 mode, token for
//                   token against the clean checkpoint's (the golden tokens of the quickstart and
//                   the nightly job);
//   reference_exact the engine in fp32 activations against the double-precision reference over a
//                   40-token sequence, relative L2 of the logits <= 1e-5 (engine_tests'
//                   ExactModeMatchesReferenceWithin1e5);
//   reference_int8  the default mode against the reference on 16 fresh tokens, median <= 1 %,
//                   worst <= 2 % (DefaultModeNearReferenceOnFreshSequences).
//
// Layout invariance (1 against 8 and 64 ranks) is not run here: every layout reads the same
// mutated weights, so no weight mutant can change it; it checks the engine's split arithmetic.
//
// A mutant no check catches fails the run and names itself. With --bisect, the smallest amount
// each check catches is found for every mutant that takes an amount (docs/ENGINE.md, "Mutation
// score").
#include <mpi.h>

#include <algorithm>
#include <array>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "dist/runtime.h"
#include "eval/dataset.h"
#include "eval/prompt.h"
#include "eval/runner.h"
#include "model/checkpoint/tokenizer_files.h"
#include "model/reference/forward.h"
#include "model/synth/mutants.h"
#include "model/synth/synth.h"
#include "tests/model/engine/engine_support.h"

namespace k3::test {
namespace {

namespace fs = std::filesystem;
namespace po = boost::program_options;
using model::FormatKind;
using model::engine::Engine;
using model::engine::EngineOptions;
using model::engine::StepSequence;

struct RunOptions {
  std::vector<FormatKind> formats;
  std::vector<std::string> mutants;  // empty: every mutant of each format
  std::size_t questions = 20;  // the quickstart's
  std::size_t max_new_tokens = 64;
  bool bisect = false;
  fs::path work;
  fs::path data;
};

struct OneRank {
  dist::Layout layout = dist::Layout::make(dist::LayoutSpec{});
  dist::Comm self{MPI_COMM_SELF};
  dist::Groups groups{layout, self};
};

const char* const kChecks[] = {"golden", "reference_exact", "reference_int8"};
constexpr double kExactBound = 1e-5;
constexpr double kInt8Median = 0.01, kInt8Worst = 0.02;

// Logits of every position: one prefill step of `prefill` tokens, then one token at a time.
std::vector<std::vector<float>> engine_logits(Engine& e, const std::vector<std::int32_t>& tokens,
                                              std::size_t prefill) {
  std::vector<std::vector<float>> rows;
  const auto V = static_cast<std::size_t>(e.config().vocab_size);
  e.reset_slot(0);
  for (std::size_t at = 0; at < tokens.size();) {
    const std::size_t n = at == 0 ? prefill : 1;
    StepSequence s;
    s.slot = 0;
    s.tokens = std::span<const std::int32_t>(tokens).subspan(at, n);
    s.output = StepSequence::Output::kAllLogits;
    auto result = e.step(std::span<const StepSequence>(&s, 1));
    for (std::size_t r = 0; r < n; ++r)
      rows.emplace_back(result.logits[0].begin() + r * V, result.logits[0].begin() + (r + 1) * V);
    at += n;
  }
  return rows;
}

double rel_l2(const std::vector<std::vector<float>>& got,
              const std::vector<std::vector<double>>& want) {
  double num = 0, den = 0;
  for (std::size_t t = 0; t < want.size(); ++t)
    for (std::size_t i = 0; i < want[t].size(); ++i) {
      num += (got[t][i] - want[t][i]) * (got[t][i] - want[t][i]);
      den += want[t][i] * want[t][i];
    }
  return std::sqrt(num / den);
}

// What one checkpoint gives under each check.
struct Observation {
  std::vector<std::vector<std::int32_t>> tokens;  // greedy completions, default mode
  double exact = 0;                               // fp32 engine vs clean reference
  double int8_median = 0, int8_worst = 0;         // default engine vs clean reference
};

// The clean checkpoint of one format: the reference's logits and the golden tokens.
struct Clean {
  fs::path dir;
  std::vector<std::int32_t> sequence;               // 40 tokens
  std::vector<std::vector<std::int32_t>> fresh;     // 16 single tokens
  std::vector<std::vector<double>> sequence_logits; // reference
  std::vector<std::vector<std::vector<double>>> fresh_logits;
  std::vector<std::int32_t> prefix;
  std::vector<std::vector<std::int32_t>> prompts;
  std::vector<std::vector<std::int32_t>> golden;
};

class MutationRun {
 public:
  explicit MutationRun(RunOptions o) : o_(std::move(o)) {}

  int run() {
    std::vector<std::string> uncaught;
    std::printf("%-10s %-20s %8s  %-22s %-28s %-28s\n", "format", "mutant", "amount", "golden",
                "reference_exact", "reference_int8");
    for (FormatKind format : o_.formats) {
      const Clean& clean = prepare(format);
      for (const model::MutantInfo& info : model::mutant_catalog()) {
        if (std::find(info.formats.begin(), info.formats.end(), format) == info.formats.end())
          continue;
        if (!o_.mutants.empty() &&
            std::find(o_.mutants.begin(), o_.mutants.end(), info.name) == o_.mutants.end())
          continue;
        const auto t0 = std::chrono::steady_clock::now();
        const double amount = info.default_amount;
        const Observation seen = observe_mutant(format, std::string(info.name), amount);
        const auto caught = verdicts(clean, seen);
        std::printf("%-10s %-20s %8g  %-22s %-28s %-28s  (%.1f s)\n",
                    std::string(model::format_name(format)).c_str(),
                    std::string(info.name).c_str(), amount, describe_golden(clean, seen).c_str(),
                    describe(caught[1], "rel L2 " + number(seen.exact)).c_str(),
                    describe(caught[2], "median " + number(seen.int8_median) + " worst " +
                                            number(seen.int8_worst))
                        .c_str(),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        std::fflush(stdout);
        if (!caught[0] && !caught[1] && !caught[2])
          uncaught.push_back(std::string(model::format_name(format)) + " " +
                             std::string(info.name));
        if (o_.bisect && amount > 0) bisect(format, clean, std::string(info.name), amount);
      }
    }
    if (!uncaught.empty()) {
      std::fprintf(stderr, "mutants no check catches (%zu):\n", uncaught.size());
      for (const auto& u : uncaught) std::fprintf(stderr, "  %s\n", u.c_str());
      return 1;
    }
    std::printf("every mutant is caught\n");
    return 0;
  }

 private:
  static std::string number(double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3g", x);
    return b;
  }
  static std::string describe(bool caught, const std::string& value) {
    return std::string(caught ? "CAUGHT " : "missed ") + value;
  }
  static std::string describe_golden(const Clean& clean, const Observation& seen) {
    std::size_t differ = 0;
    for (std::size_t i = 0; i < clean.golden.size(); ++i) differ += seen.tokens[i] != clean.golden[i];
    return describe(differ > 0, std::to_string(differ) + "/" + std::to_string(clean.golden.size()) +
                                    " differ");
  }

  // Which checks fail on `seen`: golden, reference_exact, reference_int8.
  static std::array<bool, 3> verdicts(const Clean& clean, const Observation& seen) {
    return {seen.tokens != clean.golden, seen.exact > kExactBound,
            seen.int8_median > kInt8Median || seen.int8_worst > kInt8Worst};
  }

  fs::path synthesize(FormatKind format, const std::optional<model::Mutation>& mutant) {
    model::SynthOptions s;
    s.format = format;
    s.out = o_.work / (std::string(model::format_name(format)) + "-" +
                       (mutant ? mutant->name : std::string("clean")));
    s.shards = 1;
    s.corpus = o_.data.parent_path() / "train.jsonl";
    s.mutant = mutant;
    fs::remove_all(s.out);
    model::synthesize_checkpoint(s);
    return s.out;
  }

  Clean prepare(FormatKind format) {
    Clean c;
    c.dir = synthesize(format, std::nullopt);
    const LoadedSlice slice = load_slice(c.dir, one_.layout, 0);
    const model::ModelConfig& config = slice.checkpoint->config();
    const model::ReferenceModel reference(config, slice.loaded.weights);
    c.sequence = random_prompts(1, 40, 40, config.vocab_size, 7)[0];
    c.fresh = random_prompts(16, 1, 1, config.vocab_size, 11);
    c.sequence_logits = reference.forward(c.sequence);
    for (const auto& f : c.fresh) c.fresh_logits.push_back(reference.forward(f));

    const std::vector<eval::Question> data = eval::read_gsm8k(o_.data);
    eval::PromptOptions po;
    po.num_questions = o_.questions;
    const eval::PromptSet set = eval::build_prompts(data, po, o_.data.string());
    const model::Tokenizer tokenizer = model::open_tokenizer(c.dir, config);
    const eval::TokenizedPrompts tokens = eval::tokenize_prompts(tokenizer, set);
    c.prefix = tokens.prefix;
    c.prompts = tokens.prompts;
    c.golden = observe(c, c.dir).tokens;
    return clean_[format] = std::move(c);
  }

  Observation observe_mutant(FormatKind format, const std::string& name, double amount) {
    return observe(clean_.at(format), synthesize(format, model::Mutation{name, amount}));
  }

  // Every check's measurement of the checkpoint in `dir` against the clean one.
  Observation observe(const Clean& clean, const fs::path& dir) {
    Observation seen;
    const LoadedSlice slice = load_slice(dir, one_.layout, 0);
    const model::ModelConfig& config = slice.checkpoint->config();
    {
      EngineOptions exact;
      exact.exact = true;
      exact.slots = 1;
      Engine e(config, slice.loaded.weights, one_.groups, exact);
      seen.exact = rel_l2(engine_logits(e, clean.sequence, 30), clean.sequence_logits);
    }
    EngineOptions fast;
    fast.slots = static_cast<int>(clean.prompts.size()) + 2;
    Engine e(config, slice.loaded.weights, one_.groups, fast);
    std::vector<double> errors;
    for (std::size_t i = 0; i < clean.fresh.size(); ++i)
      errors.push_back(rel_l2(engine_logits(e, clean.fresh[i], 1), clean.fresh_logits[i]));
    std::sort(errors.begin(), errors.end());
    seen.int8_median = errors[errors.size() / 2];
    seen.int8_worst = errors.back();
    seen.tokens = greedy(e, config, clean);
    return seen;
  }

  std::vector<std::vector<std::int32_t>> greedy(Engine& e, const model::ModelConfig& config,
                                                const Clean& clean) {
    model::engine::GeneratorOptions go;
    go.max_running_requests = static_cast<int>(clean.prompts.size());
    model::engine::Generator gen(e, one_.groups, go);
    gen.add_prefix(clean.prefix);
    std::vector<model::engine::Request> requests;
    for (std::size_t i = 0; i < clean.prompts.size(); ++i) {
      model::engine::Request r;
      r.id = i;
      r.prompt = clean.prompts[i];
      r.max_new_tokens = o_.max_new_tokens;
      r.stop_tokens = {config.eos_token_id};
      requests.push_back(std::move(r));
    }
    gen.validate(requests);
    std::vector<std::vector<std::int32_t>> out(requests.size());
    gen.run(requests, {},
            [&](const model::engine::Request& r, const model::engine::Completion& c) {
              out[r.id] = c.tokens;
            });
    return out;
  }

  // The smallest amount each check catches, by bisection on a log scale from 1e-4 up to the
  // first of the default, 0.5, 1, 2, 5 and 10 it catches ("-": not even at 10; "<= 1e-4").
  void bisect(FormatKind format, const Clean& clean, const std::string& name, double amount) {
    std::map<double, std::array<bool, 3>> seen;
    auto caught_at = [&](double a) {
      auto it = seen.find(a);
      if (it == seen.end())
        it = seen.emplace(a, verdicts(clean, observe_mutant(format, name, a))).first;
      return it->second;
    };
    constexpr double kLowest = 1e-4;
    std::string line = "  smallest caught:";
    for (int check = 0; check < 3; ++check) {
      double top = 0;
      for (double a : {amount, 0.5, 1.0, 2.0, 5.0, 10.0}) {
        if (a < amount || !caught_at(a)[check]) continue;
        top = a;
        break;
      }
      if (top == 0) {
        line += std::string(" ") + kChecks[check] + " >10";
        continue;
      }
      if (caught_at(kLowest)[check]) {
        line += std::string(" ") + kChecks[check] + " <=" + number(kLowest);
        continue;
      }
      double lo = std::log(kLowest), hi = std::log(top);  // lo missed, hi caught
      for (int step = 0; step < 7; ++step) {
        const double mid = 0.5 * (lo + hi);
        (caught_at(std::exp(mid))[check] ? hi : lo) = mid;
      }
      line += std::string(" ") + kChecks[check] + " " + number(std::exp(hi));
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }

  RunOptions o_;
  OneRank one_;
  std::map<FormatKind, Clean> clean_;
};

RunOptions parse(int argc, char** argv) {
  RunOptions o;
  std::string formats = "hf,modelslim,gguf", mutants, work, data;
  po::options_description desc("mutation_run");
  desc.add_options()("help", "this help")("formats", po::value(&formats),
                                          "comma-separated formats (hf,modelslim,gguf)")(
      "mutants", po::value(&mutants), "comma-separated mutants (default: all)")(
      "questions", po::value(&o.questions), "GSM8K questions for the golden tokens (default 20, the quickstart's)")(
      "max-new-tokens", po::value(&o.max_new_tokens), "tokens per golden completion (default 64)")(
      "bisect", po::bool_switch(&o.bisect), "find the smallest amount each check catches")(
      "work", po::value(&work)->required(), "scratch directory for the checkpoints")(
      "data", po::value(&data)->required(), "GSM8K test.jsonl (train.jsonl beside it)");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  if (vm.count("help")) {
    std::ostringstream s;
    s << desc;
    std::printf("usage: mutation_run --work DIR --data test.jsonl [options]\n%s", s.str().c_str());
    std::exit(0);
  }
  po::notify(vm);
  std::stringstream fs_list(formats);
  for (std::string f; std::getline(fs_list, f, ',');) {
    const auto kind = model::format_from_name(f);
    if (!kind || *kind == FormatKind::kDraft)
      throw UsageError("--formats: '" + f + "' is not one of hf, modelslim, gguf");
    o.formats.push_back(*kind);
  }
  std::stringstream m_list(mutants);
  for (std::string m; std::getline(m_list, m, ',');) {
    model::find_mutant(m);
    o.mutants.push_back(m);
  }
  o.work = work;
  o.data = data;
  fs::create_directories(o.work);
  return o;
}

}  // namespace
}  // namespace k3::test

int main(int argc, char** argv) {
  k3::dist::Runtime runtime(argc, argv);
  return runtime.run([&] { return k3::test::MutationRun(k3::test::parse(argc, argv)).run(); });
}
