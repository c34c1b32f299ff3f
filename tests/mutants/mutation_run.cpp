// The mutation run: plants every mutant of model/synth/mutants.h in the synthetic tiny checkpoint
// of each format (the draft's with the clean hf target) and runs the project's regression checks
// on it. Each check compares the engine
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
//                   worst <= 2 % (DefaultModeNearReferenceOnFreshSequences);
//   draft_acceptance (a DSpark draft's mutants, which cannot change a token) the golden prompts
//                   decoded with the draft at its full block: the clean draft's count of
//                   accepted drafts, exactly;
//   draft_context   the keys the draft's layers hold for 40 seeded context rows (fp32) against
//                   the clean draft's, relative L2 <= 1e-5.
//
// Layout invariance (1 against 8 and 64 ranks) is not run here: every layout reads the same
// mutated weights, so no weight mutant can change it; it checks the engine's split arithmetic.
//
// A mutant no check catches fails the run and names itself. A target mutant's checks run cheapest
// first (reference_exact, reference_int8, golden) and stop at the first that catches it, which is
// all the verdict needs; --every-check runs each check on every mutant (which checks see which
// mutant), and --bisect, which implies it, finds the smallest amount each check catches for every
// mutant that takes an amount (docs/ENGINE.md, "Mutation score"). A draft mutant always goes
// through both of its checks: its acceptance run also proves that speculation kept the tokens.
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
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "dist/runtime.h"
#include "eval/dataset.h"
#include "eval/prompt.h"
#include "eval/runner.h"
#include "model/checkpoint/tokenizer_files.h"
#include "model/engine/dspark.h"
#include "model/engine/speculation.h"
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
using model::engine::GeneratorStats;

struct RunOptions {
  std::vector<FormatKind> formats;
  std::vector<std::string> mutants;  // empty: every mutant of each format
  std::size_t questions = 20;  // the quickstart's
  std::size_t max_new_tokens = 64;
  bool every_check = false;  // implied by bisect
  bool bisect = false;
  fs::path work;
  fs::path data;
};

constexpr double kExactBound = 1e-5;
constexpr std::size_t kTargetChecks = 3;  // reference_exact, reference_int8, golden
constexpr double kInt8Median = 0.01, kInt8Worst = 0.02;


// One check's verdict on one checkpoint: whether it fails (the mutant is caught) and what it
// measured.
struct Verdict {
  const char* check;
  bool caught;
  std::string measured;
};

std::string number(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}

// The clean checkpoint of one format: the reference's logits and the golden tokens; for the
// draft, its acceptance with the clean target.
struct Clean {
  fs::path dir;
  std::vector<std::int32_t> sequence;                // 40 tokens
  std::vector<std::vector<std::int32_t>> fresh;      // 16 single tokens
  std::vector<std::vector<double>> sequence_logits;  // reference
  std::vector<std::vector<std::vector<double>>> fresh_logits;
  std::vector<std::int32_t> prefix;
  std::vector<std::vector<std::int32_t>> prompts;
  // Target formats: the clean engine's greedy tokens, decoded the first time the golden check
  // runs. Draft: the clean draft's speculative tokens.
  std::optional<std::vector<std::vector<std::int32_t>>> golden;
  std::size_t verify_rounds = 0, accepted_drafts = 0;  // draft
  std::vector<float> draft_keys;                       // draft
};

class MutationRun {
 public:
  explicit MutationRun(RunOptions o) : o_(std::move(o)) {}

  int run() {
    std::vector<std::string> uncaught;
    for (FormatKind format : o_.formats) {
      Clean& clean = prepare(format);
      for (const model::MutantInfo& info : model::mutant_catalog()) {
        if (std::find(info.formats.begin(), info.formats.end(), format) == info.formats.end())
          continue;
        if (!o_.mutants.empty() &&
            std::find(o_.mutants.begin(), o_.mutants.end(), info.name) == o_.mutants.end())
          continue;
        const auto t0 = std::chrono::steady_clock::now();
        const std::string name(info.name);
        const double amount = info.default_amount;
        const std::vector<Verdict> verdicts = judge(format, clean, name, amount);
        std::string line = std::string(model::format_name(format)) + " " + name + " " +
                           number(amount) + ":";
        bool caught = false;
        for (const Verdict& v : verdicts) {
          line += std::string("  ") + v.check + " " + (v.caught ? "CAUGHT" : "missed") + " (" +
                  v.measured + ")";
          caught = caught || v.caught;
        }
        if (format != FormatKind::kDraft && verdicts.size() < kTargetChecks)
          line += "  (the other checks not run: --every-check)";
        std::printf("%s  [%.1f s]\n", line.c_str(),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        std::fflush(stdout);
        if (!caught) uncaught.push_back(std::string(model::format_name(format)) + " " + name);
        if (o_.bisect && amount > 0) bisect(format, clean, name, amount);
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

  // The clean checkpoint of `format` and what the checks expect of it (a draft goes with the
  // clean hf target).
  Clean& prepare(FormatKind format) {
    if (auto it = clean_.find(format); it != clean_.end()) return it->second;
    if (format == FormatKind::kDraft) {
      Clean c = prepare(FormatKind::kHf);
      c.dir = synthesize(format, std::nullopt);
      c.golden.emplace();
      const GeneratorStats stats = speculate(c, c.dir, *c.golden);
      c.verify_rounds = stats.verify_rounds;
      c.accepted_drafts = stats.accepted_drafts;
      c.draft_keys = draft_keys(c.dir);
      return clean_[format] = std::move(c);
    }
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
    return clean_[format] = std::move(c);
  }

  // The clean checkpoint's golden tokens (default int8 mode, one rank), decoded once.
  const std::vector<std::vector<std::int32_t>>& golden(Clean& clean) {
    if (!clean.golden) {
      const LoadedSlice slice = load_slice(clean.dir, one_.layout, 0);
      const model::ModelConfig& config = slice.checkpoint->config();
      Engine e(config, slice.loaded.weights, one_.groups, fast_options(clean));
      clean.golden = greedy(e, config, clean, {});
    }
    return *clean.golden;
  }

  static EngineOptions fast_options(const Clean& clean) {
    EngineOptions fast;
    fast.slots = static_cast<int>(clean.prompts.size()) + 2;
    return fast;
  }

  // Every check's verdict on the mutant `name` at `amount` of `format`.
  // The mutant's files are removed once judged (42 tiny checkpoints would hold 2.7 GB).
  std::vector<Verdict> judge(FormatKind format, Clean& clean, const std::string& name,
                             double amount) {
    const fs::path dir = synthesize(format, model::Mutation{name, amount});
    std::vector<Verdict> out = format == FormatKind::kDraft ? judge_draft(clean, dir)
                                                            : judge_target(clean, dir);
    fs::remove_all(dir);
    return out;
  }

  // The target checks, cheapest first; after the first that catches the mutant, the rest only
  // with --every-check.
  std::vector<Verdict> judge_target(Clean& clean, const fs::path& dir) {
    std::vector<Verdict> out;
    const LoadedSlice slice = load_slice(dir, one_.layout, 0);
    const model::ModelConfig& config = slice.checkpoint->config();
    const auto done = [&] { return !o_.every_check && out.back().caught; };
    {
      EngineOptions exact;
      exact.exact = true;
      exact.slots = 1;
      Engine e(config, slice.loaded.weights, one_.groups, exact);
      const double err = rel_l2(engine_logits(e, clean.sequence, 30), clean.sequence_logits);
      out.push_back({"reference_exact", err > kExactBound, "rel L2 " + number(err)});
    }
    if (done()) return out;
    Engine e(config, slice.loaded.weights, one_.groups, fast_options(clean));
    std::vector<double> errors;
    for (std::size_t i = 0; i < clean.fresh.size(); ++i)
      errors.push_back(rel_l2(engine_logits(e, clean.fresh[i], 1), clean.fresh_logits[i]));
    std::sort(errors.begin(), errors.end());
    const double median = errors[errors.size() / 2], worst = errors.back();
    out.push_back({"reference_int8", median > kInt8Median || worst > kInt8Worst,
                   "median " + number(median) + " worst " + number(worst)});
    if (done()) return out;
    out.push_back(golden_verdict(golden(clean), greedy(e, config, clean, {})));
    return out;
  }

  static Verdict golden_verdict(const std::vector<std::vector<std::int32_t>>& want,
                                const std::vector<std::vector<std::int32_t>>& tokens) {
    std::size_t differ = 0;
    for (std::size_t i = 0; i < want.size(); ++i) differ += tokens[i] != want[i];
    return {"golden", differ > 0,
            std::to_string(differ) + "/" + std::to_string(want.size()) + " differ"};
  }

  // A draft cannot change the tokens (verification keeps exactly the target's), only how many
  // of its proposals the target accepts: the check is the clean draft's accepted count at a
  // fixed draft length. Changed tokens would be a broken speculative path, not a caught mutant.
  std::vector<Verdict> judge_draft(const Clean& clean, const fs::path& dir) {
    std::vector<std::vector<std::int32_t>> tokens;
    const GeneratorStats s = speculate(clean, dir, tokens);
    if (tokens != *clean.golden)
      throw InternalError("a mutated draft changed the target's tokens: speculation is not exact");
    const bool caught =
        s.accepted_drafts != clean.accepted_drafts || s.verify_rounds != clean.verify_rounds;
    const double err = rel_l2(draft_keys(dir), clean.draft_keys);
    return {{"draft_acceptance", caught,
             std::to_string(s.accepted_drafts) + " of " + std::to_string(s.drafted_tokens) +
                 " drafts accepted, clean " + std::to_string(clean.accepted_drafts)},
            {"draft_context", err > kExactBound, "keys rel L2 " + number(err)}};
  }

  // The keys every draft layer holds for 40 context rows of seeded target features (fp32):
  // what the drafter's attention reads, and where its rotary position enters. (The synthetic
  // drafter's proposals hardly depend on its context, so acceptance alone cannot see it.)
  std::vector<float> draft_keys(const fs::path& draft_dir) {
    const LoadedSlice& target = hf_target();
    const LoadedSlice draft = load_slice(draft_dir, one_.layout, 0);
    const model::ModelConfig& dc = draft.checkpoint->config();
    EngineOptions o;
    o.exact = true;
    o.slots = 1;
    model::engine::tap_for_drafter(*dc.dspark, o);
    Engine e(target.checkpoint->config(), target.loaded.weights, one_.groups, o);
    model::engine::Drafter drafter(dc, draft.loaded.weights, e, one_.groups,
                                   model::engine::drafter_options(*dc.dspark, o));
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::vector<float> taps(40 * drafter.tap_width());
    for (float& t : taps) t = value(rng);
    drafter.extend(0, taps, 40);
    const model::engine::DraftRequest anchor{0, 11, {}};
    drafter.propose(std::span<const model::engine::DraftRequest>(&anchor, 1));  // projects
    std::vector<float> keys;
    for (int l = 0; l < dc.num_hidden_layers; ++l) {
      const auto k = drafter.context_keys(0, l);
      keys.insert(keys.end(), k.begin(), k.end());
    }
    return keys;
  }

  // The golden prompts decoded by the clean hf target with the draft in `draft_dir`, every
  // request verifying the whole block each step (default int8 mode); `tokens` gets the
  // completions.
  GeneratorStats speculate(const Clean& clean, const fs::path& draft_dir,
                           std::vector<std::vector<std::int32_t>>& tokens) {
    const LoadedSlice& target = hf_target();
    const LoadedSlice draft = load_slice(draft_dir, one_.layout, 0);
    const model::ModelConfig& dc = draft.checkpoint->config();
    EngineOptions o;
    o.slots = static_cast<int>(clean.prompts.size()) + 2;
    model::engine::tap_for_drafter(*dc.dspark, o);
    Engine e(target.checkpoint->config(), target.loaded.weights, one_.groups, o);
    model::engine::Drafter drafter(dc, draft.loaded.weights, e, one_.groups,
                                   model::engine::drafter_options(*dc.dspark, o));
    const int block = dc.dspark->block_size;
    model::engine::SpeculationOptions so;
    so.forced = [block](std::span<const model::engine::SpeculationCandidate> c) {
      return std::vector<int>(c.size(), block);
    };
    model::engine::Speculation speculation(block, so);
    GeneratorStats stats;
    tokens = greedy(e, target.checkpoint->config(), clean, {&drafter, &speculation}, &stats);
    return stats;
  }

  struct Drafting {
    model::engine::DraftSource* drafter = nullptr;
    model::engine::Speculation* speculation = nullptr;
  };
  std::vector<std::vector<std::int32_t>> greedy(Engine& e, const model::ModelConfig& config,
                                                const Clean& clean, Drafting drafting,
                                                GeneratorStats* stats = nullptr) {
    model::engine::GeneratorOptions go;
    go.max_running_requests = static_cast<int>(clean.prompts.size());
    go.drafter = drafting.drafter;
    go.speculation = drafting.speculation;
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
    const GeneratorStats s = gen.run(
        requests, {}, [&](const model::engine::Request& r, const model::engine::Completion& c) {
          out[r.id] = c.tokens;
        });
    if (stats) *stats = s;
    return out;
  }

  // The smallest amount each check catches, by bisection on a log scale from 1e-4 up to the
  // first of the default, 0.5, 1, 2, 5 and 10 it catches (">10": not even at 10; "<=1e-4").
  void bisect(FormatKind format, Clean& clean, const std::string& name, double amount) {
    std::map<double, std::vector<Verdict>> seen;
    auto caught_at = [&](double a, std::size_t check) {
      auto it = seen.find(a);
      if (it == seen.end()) it = seen.emplace(a, judge(format, clean, name, a)).first;
      return it->second.at(check).caught;
    };
    constexpr double kLowest = 1e-4;
    std::string line = "  smallest caught:";
    const std::vector<Verdict>& at_default = seen.emplace(amount, judge(format, clean, name, amount)).first->second;
    for (std::size_t check = 0; check < at_default.size(); ++check) {
      const std::string label = std::string(" ") + at_default[check].check + " ";
      double top = 0;
      for (double a : {amount, 0.5, 1.0, 2.0, 5.0, 10.0}) {
        if (a < amount || !caught_at(a, check)) continue;
        top = a;
        break;
      }
      if (top == 0) {
        line += label + ">10";
        continue;
      }
      if (caught_at(kLowest, check)) {
        line += label + "<=" + number(kLowest);
        continue;
      }
      double lo = std::log(kLowest), hi = std::log(top);  // lo missed, hi caught
      for (int step = 0; step < 7; ++step) {
        const double mid = 0.5 * (lo + hi);
        (caught_at(std::exp(mid), check) ? hi : lo) = mid;
      }
      line += label + number(std::exp(hi));
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }

  // The clean hf target a draft is judged with, loaded once.
  const LoadedSlice& hf_target() {
    if (!hf_target_) hf_target_ = load_slice(clean_.at(FormatKind::kHf).dir, one_.layout, 0);
    return *hf_target_;
  }

  RunOptions o_;
  OneRank one_;
  std::map<FormatKind, Clean> clean_;
  std::optional<LoadedSlice> hf_target_;
};

RunOptions parse(int argc, char** argv) {
  RunOptions o;
  std::string formats = "hf,modelslim,gguf,draft", mutants, work, data;
  po::options_description desc("mutation_run");
  desc.add_options()("help", "this help")("formats", po::value(&formats),
                                          "comma-separated formats (hf,modelslim,gguf,draft)")(
      "mutants", po::value(&mutants), "comma-separated mutants (default: all)")(
      "questions", po::value(&o.questions), "GSM8K questions for the golden tokens (default 20, the quickstart's)")(
      "max-new-tokens", po::value(&o.max_new_tokens), "tokens per golden completion (default 64)")(
      "every-check", po::bool_switch(&o.every_check),
      "run every check on every mutant (default: a target mutant's checks stop at the first that "
      "catches it)")(
      "bisect", po::bool_switch(&o.bisect),
      "find the smallest amount each check catches (implies --every-check)")(
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
    if (!kind) throw UsageError("--formats: '" + f + "' is not one of hf, modelslim, gguf, draft");
    o.formats.push_back(*kind);
  }
  std::stringstream m_list(mutants);
  for (std::string m; std::getline(m_list, m, ',');) {
    model::find_mutant(m);
    o.mutants.push_back(m);
  }
  o.every_check = o.every_check || o.bisect;
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
