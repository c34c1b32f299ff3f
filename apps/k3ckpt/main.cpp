// k3ckpt: checkpoint tools that need no MPI job: synth, inspect, plan.
//   k3ckpt synth --preset tiny|wide|full --format hf|modelslim|gguf|draft --out DIR [--seed N]
//                [--shards N] [--header-only]   (draft: the DSpark drafter of that target)
//   k3ckpt inspect DIR [--load-format F]
//   k3ckpt plan DIR --tp .. --dp .. --ep .. [layout flags] [--world N] [--rank R]
#include <boost/program_options.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "apps/common/help.h"
#include "apps/common/layout_options.h"
#include "model/load/binding.h"
#include "model/load/pipeline.h"
#include "model/checkpoint/checkpoint.h"
#include "model/load/load_plan.h"
#include "model/synth/synth.h"
#include "model/checkpoint/tokenizer_files.h"
#include "common/error.h"

namespace {

namespace po = boost::program_options;
using namespace k3;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string gib(std::uint64_t bytes) {
  return fmt::format("{:.3f} GiB", bytes / double(1ull << 30));
}
std::string human(std::uint64_t bytes) {
  if (bytes >= (1ull << 30)) return gib(bytes);
  if (bytes >= (1ull << 20)) return fmt::format("{:.2f} MiB", bytes / double(1ull << 20));
  return fmt::format("{} B", bytes);
}

po::variables_map parse(const std::vector<std::string>& args, const po::options_description& desc,
                        const po::positional_options_description& pos) {
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + " (see k3ckpt --help)");
  }
  return vm;
}

std::optional<model::FormatKind> load_format(const std::string& name) {
  if (name.empty() || name == "auto") return std::nullopt;
  auto k = model::format_from_name(name);
  if (!k)
    throw UsageError("--load-format '" + name + "' is not one of auto, hf, modelslim, gguf, draft");
  return k;
}

// --mutant NAME[=AMOUNT].
model::Mutation parse_mutant(const std::string& spec) {
  const auto eq = spec.find('=');
  model::Mutation m{spec.substr(0, eq), std::nullopt};
  model::find_mutant(m.name);  // refuses an unknown name, listing the known ones
  if (eq == std::string::npos) return m;
  const std::string text = spec.substr(eq + 1);
  std::size_t used = 0;
  try {
    m.amount = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw UsageError("--mutant '" + spec + "': expected NAME or NAME=NUMBER");
  return m;
}

int synth(const std::vector<std::string>& args) {
  model::SynthOptions o;
  std::string format = "hf", out;
  po::options_description desc("k3ckpt synth");
  desc.add_options()("preset", po::value(&o.preset)->default_value("tiny"), "tiny | wide | full")(
      "format", po::value(&format)->default_value("hf"), "hf | modelslim | gguf | draft")(
      "out", po::value(&out)->required(), "output directory")(
      "seed", po::value(&o.seed)->default_value(0), "weight seed")(
      "shards", po::value(&o.shards)->default_value(1), "number of shard files")(
      "header-only", po::bool_switch(&o.header_only),
      "write headers; tensor bytes stay sparse holes")(
      "corpus", po::value<std::string>()->default_value(K3_DEFAULT_CORPUS),
      "JSONL corpus for the trained BPE vocabulary (every string value of every line)")(
      "router-margin", po::value(&o.router_margin)->default_value(0.0),
      "add this to the routing bias of num_experts_per_token seeded experts per MoE layer: fixed "
      "routing, so formats and engines can be compared by their logits (0 = random routers)")(
      "set", po::value<std::vector<std::string>>()->composing(),
      "NAME=VALUE: change a preset's size (num_hidden_layers, hidden_size, num_experts, vocab, "
      "...)")(
      "mutant", po::value<std::string>(),
      "NAME[=AMOUNT]: plant one error (k3ckpt mutants lists them; AMOUNT defaults to the "
      "mutant's own)");
  if (apps::answered_help(args,
                          {"k3ckpt synth --out DIR [options]",
                           "Writes a synthetic Kimi-K3 checkpoint (real architecture and tensor "
                           "names, seeded weights) in any format.",
                           "k3ckpt synth --preset tiny --format gguf --out /tmp/tiny-gguf"},
                          desc))
    return 0;
  const po::variables_map vm = parse(args, desc, {});
  o.corpus = vm["corpus"].as<std::string>();
  if (vm.count("set")) {
    for (const std::string& kv : vm["set"].as<std::vector<std::string>>()) {
      const auto eq = kv.find('=');
      int value = 0;
      std::size_t used = 0;
      try {
        value = std::stoi(kv.substr(eq == std::string::npos ? 0 : eq + 1), &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (eq == std::string::npos || used == 0 || eq + 1 + used != kv.size()) {
        throw UsageError("--set '" + kv + "': expected NAME=INTEGER");
      }
      o.overrides.emplace_back(kv.substr(0, eq), value);
    }
  }
  if (!(o.router_margin >= 0.0) || !std::isfinite(o.router_margin))
    throw UsageError("--router-margin must be a finite number >= 0");
  if (vm.count("mutant")) o.mutant = parse_mutant(vm["mutant"].as<std::string>());
  auto kind = model::format_from_name(format);
  if (!kind) throw UsageError("--format '" + format + "' is not one of hf, modelslim, gguf, draft");
  o.format = *kind;
  o.out = out;
  const auto t0 = Clock::now();
  const auto s = model::synthesize_checkpoint(o);
  std::printf("wrote %s checkpoint (%s preset%s) to %s: %d file(s), %llu tensors, %s in %.2f s\n",
              format.c_str(), o.preset.c_str(), o.header_only ? ", header only" : "", out.c_str(),
              s.files, static_cast<unsigned long long>(s.tensors), human(s.bytes).c_str(),
              seconds_since(t0));
  return 0;
}

int mutants(const std::vector<std::string>& args) {
  po::options_description desc("k3ckpt mutants");
  std::string format;
  desc.add_options()("format", po::value(&format), "list only the mutants of this format");
  if (apps::answered_help(args,
                          {"k3ckpt mutants [--format F]",
                           "Lists the mutants k3ckpt synth --mutant plants, one per line: name, "
                           "default amount, formats, what it changes.",
                           "k3ckpt mutants --format gguf"},
                          desc))
    return 0;
  parse(args, desc, {});
  std::optional<model::FormatKind> only;
  if (!format.empty()) {
    only = model::format_from_name(format);
    if (!only) throw UsageError("--format '" + format + "' is not one of hf, modelslim, gguf, draft");
  }
  for (const model::MutantInfo& m : model::mutant_catalog()) {
    std::string formats;
    bool listed = !only;
    for (model::FormatKind f : m.formats) {
      formats += (formats.empty() ? "" : ",") + std::string(model::format_name(f));
      listed = listed || f == *only;
    }
    if (listed)
      std::printf("%s\t%g\t%s\t%s\n", std::string(m.name).c_str(), m.default_amount,
                  formats.c_str(), std::string(m.what).c_str());
  }
  return 0;
}

void print_problems(const std::vector<std::string>& problems) {
  if (problems.empty()) {
    std::printf("problems: none\n");
    return;
  }
  std::printf("problems: %zu\n", problems.size());
  for (const auto& p : problems) std::printf("  %s\n", p.c_str());
}

// 2249289601 -> "2,249,289,601".
std::string grouped(std::uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// A DSpark draft in one block: its config, and what its tensors hold (and do not).
void print_draft(const model::Checkpoint& ck) {
  const model::ModelConfig& c = ck.config();
  const model::DSparkConfig& d = *c.dspark;
  std::string taps, dtypes;
  for (int l : d.target_layer_ids) taps += (taps.empty() ? "" : ",") + std::to_string(l);
  std::uint64_t parameters = 0;
  bool embedding = false, lm_head = false, kv_b = false, split_kv = false;
  std::set<std::string> stored_dtypes;
  for (const model::StoredTensor& t : ck.tensors()) {
    std::uint64_t n = 1;
    for (std::int64_t dim : t.entry.shape) n *= static_cast<std::uint64_t>(dim);
    parameters += n;
    const std::string& name = t.entry.name;
    embedding |= name.find("embed_tokens") != std::string::npos;
    lm_head |= name.find("lm_head") != std::string::npos;
    kv_b |= name.find("kv_b") != std::string::npos;
    split_kv |= name.find("k_b.") != std::string::npos || name.find("v_b.") != std::string::npos;
    stored_dtypes.insert(std::string(model::dtype_name(t.entry.dtype)));
  }
  for (const std::string& dtype : stored_dtypes) dtypes += (dtypes.empty() ? "" : " + ") + dtype;
  const std::int64_t fc_in = static_cast<std::int64_t>(c.hidden_size) * d.taps();
  std::printf(
      "draft (DSpark, GQA): hidden %d, %d layers, %d Q heads / %d KV heads of dim %d, MLP %d, "
      "vocab %d,\n",
      c.hidden_size, c.num_hidden_layers, c.num_attention_heads, d.num_key_value_heads, d.head_dim,
      c.intermediate_size, c.vocab_size);
  std::printf(
      "  block size %d, mask token %d, taps target layers %s (stream %s) through fc [%d, %lld] "
      "+ hidden_norm,\n",
      d.block_size, d.mask_token_id, taps.c_str(), d.tap_attn_res ? "attn_res" : "prefix",
      c.hidden_size, static_cast<long long>(fc_in));
  std::printf("  Markov head vanilla rank %d, confidence head %s,\n", d.markov_rank,
              d.confidence_head ? "yes" : "no");
  std::printf(
      "  %s and %s, %s, %s, dtype %s, %s parameters\n", embedding ? "an embedding" : "no embedding",
      lm_head ? "an LM head" : "no LM head (uses the target's)",
      kv_b ? "an MLA kv_b" : "no MLA kv_b", split_kv ? "split-GGUF K/V" : "no split-GGUF K/V",
      dtypes.empty() ? "none" : dtypes.c_str(), grouped(parameters).c_str());
}

int inspect(const std::vector<std::string>& args) {
  std::string dir, format;
  po::options_description desc("k3ckpt inspect");
  desc.add_options()("checkpoint", po::value(&dir)->required(),
                     "checkpoint directory or .gguf file")(
      "load-format", po::value(&format), "override detection: hf | modelslim | gguf | draft");
  if (apps::answered_help(args,
                          {"k3ckpt inspect DIR|FILE.gguf [--load-format F]",
                           "Opens a checkpoint's headers (no tensor data): format, capabilities, "
                           "files, dtypes, config, and every data-free problem.",
                           "k3ckpt inspect build/checkpoints/tiny-hf"},
                          desc))
    return 0;
  po::positional_options_description pos;
  pos.add("checkpoint", 1);
  parse(args, desc, pos);
  const auto t0 = Clock::now();
  const model::Checkpoint ck = model::Checkpoint::open(dir, load_format(format));
  const model::ModelConfig& c = ck.config();
  std::printf("checkpoint: %s\n", ck.root().c_str());
  std::printf("format: %s%s\n", std::string(ck.format().name()).c_str(),
              format.empty() ? " (detected)" : " (forced)");
  std::printf("capabilities: %s\n", ck.format().capability_list().c_str());
  std::printf("files: %zu, tensors: %zu, bytes: %s\n", ck.files().size(), ck.tensors().size(),
              human(ck.tensor_bytes()).c_str());
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> by_dtype;
  for (const model::StoredTensor& t : ck.tensors()) {
    auto& e = by_dtype[std::string(model::dtype_name(t.entry.dtype))];
    ++e.first;
    e.second += t.entry.nbytes;
  }
  for (const auto& [dt, e] : by_dtype) {
    std::printf("  %-6s %8llu tensors %s\n", dt.c_str(), static_cast<unsigned long long>(e.first),
                human(e.second).c_str());
  }
  if (c.is_draft()) {
    print_draft(ck);
  } else {
    std::string mla;
    for (int l : c.full_attn_layers) mla += (mla.empty() ? "" : ",") + std::to_string(l - 1);
    std::printf("config: hidden %d, layers %d (MLA at 0-based %s; the rest KDA), heads %d MLA / %d KDA, "
                "experts %d top-%d latent %d, shared %d, vocab %d\n",
                c.hidden_size, c.num_hidden_layers, mla.c_str(), c.num_attention_heads, c.kda_num_heads,
                c.num_experts, c.num_experts_per_token, c.routed_expert_hidden_size, c.num_shared_experts,
                c.vocab_size);
  }
  dist::LayoutSpec one;
  const auto specs = model::kimi_k3_parameters(c, dist::Layout::make(one));
  const model::BindResult bound = model::bind_parameters(ck, specs);
  for (const auto& b : bound.bindings) {
    if (b.spec.family != model::ParamFamily::kMlaKvB) continue;
    std::printf("  MLA layer %d: %s (capability %s = %s)\n", b.spec.layer, b.repr.text.c_str(),
                std::string(model::capability_name(*b.repr.asked)).c_str(),
                b.repr.answer ? "true" : "false");
  }
  if (const auto& d = ck.modelslim()) {
    std::map<std::string, int> counts;  // the schemes of the tensors and of absent names
    for (const model::StoredTensor& t : ck.tensors()) {
      if (const auto scheme = ck.scheme_of(t)) ++counts[std::string(model::scheme_name(*scheme))];
    }
    for (const auto& [name, scheme] : ck.schemes_of_absent_tensors())
      ++counts[std::string(model::scheme_name(scheme))];
    std::string line;
    for (const auto& [scheme, n] : counts)
      line += fmt::format("{}{} {}", line.empty() ? "" : ", ", scheme, n);
    std::printf("modelslim: %s, version %s, group_size %d: %s\n", d->model_quant_type.c_str(),
                d->version.c_str(), d->group_size, line.c_str());
  }
  if (!bound.ignored.empty())
    std::printf("ignored (outside the language model): %zu tensors\n", bound.ignored.size());
  print_problems(bound.problems);
  std::printf("inspected in %.2f s\n", seconds_since(t0));
  return bound.problems.empty() ? 0 : 2;
}

int plan(const std::vector<std::string>& args) {
  std::string dir, format;
  dist::LayoutSpec spec;
  int world = 0, rank = -1;
  po::options_description desc("k3ckpt plan");
  desc.add_options()("checkpoint", po::value(&dir)->required(),
                     "checkpoint directory or .gguf file")(
      "load-format", po::value(&format), "override detection: hf | modelslim | gguf | draft")(
      "world", po::value(&world), "number of ranks (default: tp, or tp x dp without DP attention)")(
      "rank", po::value(&rank), "print this rank's plan parameter by parameter");
  desc.add(apps::layout_options(spec));
  if (apps::answered_help(args,
                          {"k3ckpt plan DIR|FILE.gguf [layout options] [--world N] [--rank R]",
                           "Binds and plans every rank of a layout as the job's planning rank "
                           "does, without reading tensor data: bytes and files per rank.",
                           "k3ckpt plan build/checkpoints/tiny-hf --tp 8 --dp 2 --ep 8 "
                           "--enable-dp-attention --rank 0"},
                          desc))
    return 0;
  po::positional_options_description pos;
  pos.add("checkpoint", 1);
  parse(args, desc, pos);
  if (world == 0)
    world = spec.tp > 0 ? (spec.enable_dp_attention ? spec.tp : spec.tp * spec.dp) : 1;
  spec.world = world;
  const dist::Layout layout = dist::Layout::make(spec);
  const auto t0 = Clock::now();
  const model::JobPlan job = model::plan_job(dir, load_format(format), layout);
  const model::Checkpoint& ck = job.checkpoint;
  const model::BindResult& bound = job.bound;
  const double t_open = seconds_since(t0);
  std::printf("checkpoint: %s (%s; %zu files, %zu tensors, %s)\n", ck.root().c_str(),
              std::string(ck.format().name()).c_str(), ck.files().size(), ck.tensors().size(),
              human(ck.tensor_bytes()).c_str());
  std::printf("layout: %s\n", layout.summary().c_str());
  std::uint64_t min_b = UINT64_MAX, max_b = 0, total = 0;
  std::size_t min_t = SIZE_MAX, max_t = 0;
  for (int r = 0; r < layout.world(); ++r) {
    const model::LoadPlan p = model::make_load_plan(ck, bound.bindings, layout, r);
    std::size_t reads = 0;
    for (const auto& pp : p.params) reads += pp.reads.size();
    min_b = std::min(min_b, p.bytes);
    max_b = std::max(max_b, p.bytes);
    min_t = std::min(min_t, reads);
    max_t = std::max(max_t, reads);
    total += p.bytes;
    if (r == rank) {
      std::printf("rank %d: %zu parameters, %zu tensor reads, %s from %zu file(s)\n", r,
                  p.params.size(), reads, human(p.bytes).c_str(), p.files.size());
      for (const auto& pp : p.params) {
        const auto& b = pp;
        std::string box;
        for (std::size_t d = 0; d < pp.box.begin.size(); ++d) {
          box += fmt::format("{}{}:{}", d ? "," : "", pp.box.begin[d], pp.box.end[d]);
        }
        std::printf("  %-60s %-44s [%s] %s%s\n", b.spec.name.c_str(), b.repr.text.c_str(),
                    box.c_str(), human(pp.bytes).c_str(),
                    b.repr.asked ? fmt::format("  ({}={})", model::capability_name(*b.repr.asked),
                                               b.repr.answer ? "true" : "false")
                                       .c_str()
                                 : "");
      }
    }
  }
  std::printf("per rank: min %s (%zu reads), max %s (%zu reads); all ranks %s; checkpoint %s\n",
              human(min_b).c_str(), min_t, human(max_b).c_str(), max_t, human(total).c_str(),
              human(ck.tensor_bytes()).c_str());
  std::printf("data-free checks passed; headers read and bound in %.2f s, planned %d ranks in %.2f s\n",
              t_open, layout.world(), seconds_since(t0) - t_open);
  return 0;
}

// One line of ids per input line (or, with --decode, one line of text per line of ids).
int tokenize(const std::vector<std::string>& args) {
  std::string path;
  bool decode = false, allow_special = false;
  po::options_description desc("k3ckpt tokenize");
  desc.add_options()("checkpoint", po::value(&path)->required(),
                     "checkpoint directory or .gguf file")(
      "decode", po::bool_switch(&decode), "read lines of space-separated ids, print their text")(
      "allow-special", po::bool_switch(&allow_special), "encode special-token names as their ids");
  if (apps::answered_help(args,
                          {"k3ckpt tokenize DIR|FILE.gguf [--decode] [--allow-special]",
                           "Encodes each line of stdin to token ids with the checkpoint's "
                           "vocabulary (or decodes lines of ids with --decode).",
                           "echo 'Natalia sold 48 clips.' | k3ckpt tokenize build/checkpoints/tiny-hf"},
                          desc))
    return 0;
  po::positional_options_description pos;
  pos.add("checkpoint", 1);
  parse(args, desc, pos);
  const model::Tokenizer tok = model::open_tokenizer(path);
  std::string line;
  std::vector<std::int32_t> ids;
  for (std::size_t n = 1; std::getline(std::cin, line); ++n) {
    if (decode) {
      ids.clear();
      std::istringstream in(line);
      std::string word;
      while (in >> word) {
        std::size_t used = 0;
        long long id = -1;
        try {
          id = std::stoll(word, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != word.size() || id < 0 || id >= tok.vocabulary().size()) {
          throw InputError("stdin line " + std::to_string(n) + ": '" + word +
                           "' is not a token id below " + std::to_string(tok.vocabulary().size()));
        }
        ids.push_back(static_cast<std::int32_t>(id));
      }
      std::cout << tok.decode(ids) << "\n";
    } else {
      ids = tok.encode(
          line, allow_special ? model::AllowedSpecial::all() : model::AllowedSpecial::none());
      for (std::size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
      std::cout << "\n";
    }
  }
  return 0;
}

const char* kUsage =
    "usage: k3ckpt synth --out DIR [--preset tiny|wide|full] [--format hf|modelslim|gguf|draft]\n"
    "                    [--seed N] [--shards N] [--header-only] [--router-margin M] [--set NAME=N]\n"
    "                    [--mutant NAME[=AMOUNT]]\n"
    "       k3ckpt mutants [--format F]\n"
    "       k3ckpt inspect DIR [--load-format F]\n"
    "       k3ckpt tokenize DIR|FILE.gguf [--decode] [--allow-special]   (stdin -> stdout)\n"
    "       k3ckpt plan DIR [--tp N --dp N --ep N --enable-dp-attention ...] [--world N] [--rank "
    "R]\n"
    "k3ckpt COMMAND --help: that command's options and an example.\n";

int run(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "synth") return synth(args);
  if (command == "inspect") return inspect(args);
  if (command == "plan") return plan(args);
  if (command == "tokenize") return tokenize(args);
  if (command == "mutants") return mutants(args);
  throw UsageError("unknown command '" + command + "'\n" + kUsage);
}

}  // namespace

int main(int argc, char** argv) { return k3::apps::tool_main("k3ckpt", argc, argv, run); }
