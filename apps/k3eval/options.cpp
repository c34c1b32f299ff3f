#include "apps/k3eval/options.h"

#include <boost/program_options.hpp>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "apps/common/layout_options.h"
#include "common/error.h"

namespace k3::apps {

namespace po = boost::program_options;

namespace {

// Speculative decoding: SGLang's DSPARK constraints, each refusal naming its options.
void validate_speculative(K3evalOptions& o) {
  std::string& algorithm = o.speculative_algorithm;
  for (char& ch : algorithm) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (algorithm.empty() && !o.draft_model_path.empty()) algorithm = "dspark";
  if (algorithm.empty()) {
    if (o.speculative_block_size != 0)
      throw UsageError("--speculative-dspark-block-size needs --speculative-algorithm dspark");
    if (o.speculative_num_draft_tokens >= 0)
      throw UsageError("--speculative-num-draft-tokens needs --speculative-algorithm dspark");
    if (o.speculative_adaptive)
      throw UsageError("--speculative-adaptive needs --speculative-algorithm dspark");
    if (o.speculative_recalibrate)
      throw UsageError("--speculative-recalibrate needs --speculative-algorithm dspark");
    return;
  }
  if (algorithm != "dspark") {
    throw UsageError("--speculative-algorithm '" + algorithm + "' is not supported (dspark is)");
  }
  if (o.draft_model_path.empty()) {
    throw UsageError("--speculative-algorithm dspark needs --speculative-draft-model-path");
  }
  if (o.speculative_block_size < 0 || o.speculative_block_size > 64) {
    throw UsageError("--speculative-dspark-block-size " +
                     std::to_string(o.speculative_block_size) + " must be in 1..64");
  }
  if (o.command != "eval") {
    throw UsageError("--speculative-algorithm applies to generation, not `k3eval " + o.command +
                     "`");
  }
  if (o.speculative_num_draft_tokens >= 0) {
    if (o.speculative_adaptive.value_or(false)) {
      throw UsageError("--speculative-num-draft-tokens " +
                       std::to_string(o.speculative_num_draft_tokens) +
                       " fixes the drafts verified per round; --speculative-adaptive chooses them "
                       "per step: give one of the two");
    }
    if (o.speculative_block_size > 0 && o.speculative_num_draft_tokens > o.speculative_block_size) {
      throw UsageError("--speculative-num-draft-tokens " +
                       std::to_string(o.speculative_num_draft_tokens) + " exceeds "
                       "--speculative-dspark-block-size " + std::to_string(o.speculative_block_size) +
                       " (the drafts one round proposes)");
    }
  }
  if (o.speculative_recalibrate &&
      (o.speculative_num_draft_tokens >= 0 || !o.speculative_adaptive.value_or(true))) {
    throw UsageError(
        "--speculative-recalibrate measures the step costs of --speculative-adaptive, which a "
        "fixed number of draft tokens does not use");
  }
  // Draft logits stay inside their DP group (SGLang: DSPARK with dp > 1 requires it).
  if (o.layout.enable_dp_attention && o.layout.dp > 1 && !o.layout.enable_dp_lm_head) {
    throw UsageError("--speculative-algorithm dspark with --enable-dp-attention and --dp " +
                     std::to_string(o.layout.dp) + " needs --enable-dp-lm-head");
  }
}

po::options_description describe(K3evalOptions& o) {
  // clang-format off
  po::options_description general("General");
  general.add_options()
      ("help,h", po::bool_switch(&o.help), "print this help and exit")
      ("version", po::bool_switch(&o.version), "print the version and exit")
      ("config", po::value(&o.config_file)->value_name("FILE"),
       "read options from an INI file (key = value, names without '--'); the command line wins")
      ("check-layout", po::bool_switch(&o.check_layout),
       "build and verify every process group and print the layout table on rank 0; exit there "
       "unless --model-path is given")
      ("model-path", po::value(&o.model_path)->value_name("PATH"),
       "checkpoint directory or .gguf file")
      ("load-format", po::value(&o.load_format)->value_name("FORMAT"),
       "auto (detect), hf, modelslim, gguf or draft")
      ("plan-only", po::bool_switch(&o.plan_only),
       "the pre-flight: every check of --model-path (and the draft model) and every rank's "
       "load plan, without reading tensor data; print each rank's share and peak RSS, exit")
      ("load-only", po::bool_switch(&o.load_only),
       "plan, load and audit this rank's slice of --model-path, print the figures, exit")
      ("artifacts-dir", po::value(&o.artifacts_dir)->value_name("DIR"),
       "the run's record, locked to this job: command.txt, config.json (the resolved options), "
       "logs/rank-NNNNN.log (every rank's full log, written line by line), questions.jsonl (one "
       "line per finished question), summary.json, status (running, then ok / regression / "
       "error, or failed with the rank and reason), history.h5 (unless --history)")
      ("log-level", po::value(&o.log_level)->value_name("LEVEL"),
       "console level on rank 0: trace, debug, info, warn, error, critical, off (default info)")
      ("collective-timeout", po::value(&o.collective_timeout)->value_name("S"),
       "end the job when a rank has waited S seconds in one collective (a hung or stopped "
       "rank), naming the ranks that did not arrive (default 600; 0: no watchdog)")
      ("exit-timeout", po::value(&o.exit_timeout)->value_name("S"),
       "once the job has ended and its status is written, a rank whose teardown (MPI_Finalize) "
       "has not finished in S seconds exits on its own with the job's exit code; rank 0 "
       "first, the others 5 s later (default 60; 0: wait for ever)")
      ("threads", po::value<int>()->value_name("N"),
       "oneTBB threads per rank (default: SLURM_CPUS_PER_TASK under Slurm, else 1)");
  // clang-format on

  po::options_description parallel = layout_options(o.layout);

  po::options_description serving("Engine and serving");
  // clang-format off
  serving.add_options()
      ("max-running-requests", po::value(&o.max_running_requests)->value_name("N"),
       "sequences a DP group decodes at once (default 16)")
      ("chunked-prefill-size", po::value(&o.chunked_prefill_size)->value_name("N"),
       "prompt tokens a DP group prefills per step (default 512)")
      ("max-mamba-cache-size", po::value(&o.max_mamba_cache_size)->value_name("N"),
       "KDA/MLA state slots per rank (default: max-running-requests + 1 for the prefix snapshot)")
      ("context-length", po::value(&o.context_length)->value_name("N"),
       "tokens per sequence, prompt plus generated (default 4096)")
      ("disable-prefix-cache", po::bool_switch(&o.disable_prefix_cache),
       "recompute the shared few-shot prefix for every prompt")
      ("fp32-activations", po::bool_switch(&o.fp32_activations),
       "dequantize weights once and multiply with fp32 activations (numerics debugging)")
      ("disable-weight-repack", po::bool_switch(&o.disable_weight_repack),
       "keep every weight matrix as stored instead of copying Q8_0/Q4_0/Q2_K/Q3_K matrices "
       "into the 16-row VNNI order on AVX-512 VNNI hosts (same results; saves the copy's memory where "
       "ranks on a node share a mapped checkpoint)")
      ("speculative-algorithm", po::value(&o.speculative_algorithm)->value_name("NAME"),
       "speculative decoding: dspark (a DSpark drafter proposes a block of tokens, the model "
       "verifies them in one forward; implied by a draft model path)")
      ("speculative-draft-model-path", po::value<std::string>()->value_name("PATH"),
       "the DSpark draft checkpoint (BF16, SGLang's RadixArk layout); alias --draft-model-path")
      ("draft-model-path", po::value<std::string>()->value_name("PATH"),
       "alias of --speculative-draft-model-path")
      ("speculative-dspark-block-size", po::value(&o.speculative_block_size)->value_name("N"),
       "tokens drafted per round (verify width N + 1; default: the draft's block_size, else 7)")
      ("speculative-num-draft-tokens", po::value(&o.speculative_num_draft_tokens)->value_name("N"),
       "verify the first N drafts of every round (0..block size; 0 decodes plainly beside the "
       "drafter); default: chosen per request and step by --speculative-adaptive")
      ("speculative-adaptive", po::value<bool>()->implicit_value(true)->value_name("BOOL"),
       "choose each request's drafts per step by goodput, from step times measured on this host "
       "and the drafts' acceptance (on by default when speculating; =false verifies the whole "
       "block)")
      ("speculative-recalibrate", po::bool_switch(&o.speculative_recalibrate),
       "measure the step costs the adaptive policy works from, even when "
       "<artifacts>/speculation-costs.json holds this job's from an earlier run on this host");
  // clang-format on

  po::options_description evaluation("Evaluation (GSM8K, SGLang-compatible)");
  // clang-format off
  evaluation.add_options()
      ("mode", po::value(&o.mode)->value_name("MODE"),
       "eval (default): GSM8K accuracy; throughput: offline tokens/s")
      ("data-path", po::value(&o.data_path)->value_name("FILE"),
       "GSM8K JSONL with question and answer fields (default: ../shared/data/gsm8k/test.jsonl)")
      ("num-shots", po::value(&o.num_shots)->value_name("N"), "few-shot examples (default 5)")
      ("num-questions", po::value(&o.num_questions)->value_name("N"),
       "questions evaluated (default 200)")
      ("max-new-tokens", po::value(&o.max_new_tokens)->value_name("N"),
       "generated tokens per question at most (default 512)")
      ("temperature", po::value(&o.temperature)->value_name("T"),
       "0 (default): greedy; > 0: seeded sampling")
      ("seed", po::value(&o.seed)->value_name("N"), "sampling seed (default 0)")
      ("parallel", po::value(&o.parallel)->value_name("N"),
       "concurrent questions per DP group, together with --max-running-requests (default 64)")
      ("exclude-shot-questions", po::bool_switch(&o.exclude_shot_questions),
       "evaluate the questions after the shots (leak-free) instead of SGLang's 0..N-1")
      ("answer-extractor", po::value(&o.answer_extractor)->value_name("NAME"),
       "sglang (default: the last number) or flexible")
      ("dp-balance", po::value(&o.dp_balance)->value_name("HOW"),
       "round-robin (default) or tokens: balance DP groups by prompt tokens")
      ("baseline", po::value(&o.baseline)->value_name("FILE"),
       "baseline JSON with its tolerance: accuracy (and golden tokens) for an evaluation, "
       "output token/s on one machine class for --mode throughput; exit 1 on a regression")
      ("history", po::value(&o.history)->value_name("FILE"),
       "HDF5 run history to append to (default: <artifacts-dir>/history.h5)")
      ("progress", po::value(&o.progress)->value_name("HOW"),
       "rank 0's progress: bar, log (a line every 10 s) or auto (default: a bar when rank 0's "
       "stdout, and under mpirun mpirun's own output, is a terminal)")
      ("resume", po::bool_switch(&o.resume),
       "continue the run in --artifacts-dir from its per-question results")
      ("dataset-name", po::value(&o.dataset_name)->value_name("NAME"),
       "--mode throughput: random (random token ids) or gsm8k (the evaluation's prompts); "
       "default random when an input length is given, else gsm8k")
      ("num-prompts", po::value(&o.num_prompts)->value_name("N"),
       "--mode throughput: prompts (default --num-questions)")
      ("random-input-len", po::value<int>()->value_name("N"),
       "--mode throughput, random: prompt tokens (default 1024); alias --input-len")
      ("input-len", po::value<int>()->value_name("N"), "alias of --random-input-len")
      ("random-output-len", po::value<int>()->value_name("N"),
       "--mode throughput: tokens generated per prompt, stop tokens ignored (default "
       "--max-new-tokens); alias --output-len")
      ("output-len", po::value<int>()->value_name("N"), "alias of --random-output-len")
      ("random-range-ratio", po::value(&o.range_ratio)->value_name("R"),
       "--mode throughput, random: each prompt's input and output lengths are uniform in "
       "[len x R, len], seeded by --seed (default 1: fixed lengths; SGLang's bench_serving "
       "defaults to 0)")
      ("prompt", po::value(&o.prompt)->value_name("TEXT"), "k3eval logits: the prompt")
      ("prompts-file", po::value(&o.prompts_file)->value_name("FILE"),
       "k3eval logits: one prompt per line instead of --prompt, all in one launch; --out "
       "(and --layers-out) must hold {}, replaced by the prompt's index from 0")
      ("out", po::value(&o.out)->value_name("FILE"),
       "k3eval logits: float32 logits [positions x vocabulary], row-major")
      ("layers-out", po::value(&o.layers_out)->value_name("FILE"),
       "k3eval logits: float32 [layers x 3 x positions x hidden], per layer the attention "
       "output, the FFN output and the stream after the layer")
      ("completions", po::value(&o.completions)->value_name("FILE"),
       "k3eval score: completions to re-score (JSONL or SGLang's dump)");
  // clang-format on

  po::options_description testing("Testing");
  // clang-format off
  testing.add_options()
      ("debug-fail-rank", po::value<int>()->value_name("R"),
       "throw an error on rank R (-1: every rank) after the groups are built, to exercise the "
       "fatal-error policy")
      ("debug-log-error", po::value<int>()->value_name("R"),
       "log one error line on rank R and carry on, for the post-run log scan")
      ("debug-abort-after", po::value(&o.debug_abort_after)->value_name("N"),
       "abort the whole job (MPI_Abort) once rank 0 has written N questions' results, as a "
       "crash would (tests of --resume)")
      ("debug-kill-rank", po::value<int>()->value_name("R"),
       "rank R sends itself SIGKILL once the model is loaded and warmed up, as an out-of-memory "
       "kill would (tests of the failure record)")
      ("debug-stop-rank", po::value<int>()->value_name("R"),
       "rank R sends itself SIGSTOP once the model is loaded and warmed up, as a hung node "
       "would (tests of --collective-timeout)")
      ("debug-hang-at-exit", po::value<int>()->value_name("R"),
       "rank R never returns once the job has ended and its status is written, as a rank hung "
       "in MPI_Finalize would (tests of --exit-timeout)");
  // clang-format on

  po::options_description all(
      "Usage: mpirun -np N k3eval [options]           GSM8K evaluation (or --mode throughput)\n"
      "       mpirun -np N k3eval logits [options]    --prompt TEXT --out FILE: every position's "
      "logits\n"
      "                                               (--prompts-file F --out 'l-{}.f32': one "
      "file per line of F)\n"
      "       k3eval score [options]                  --completions FILE: re-score completions");
  all.add(general).add(parallel).add(serving).add(evaluation).add(testing);
  return all;
}

// Rejects impossible values and settles the defaults that depend on other options.
void validate(K3evalOptions& o) {
  auto at_least = [](int value, int min, const char* name) {
    if (value < min) {
      throw UsageError(std::string("--") + name + " must be at least " + std::to_string(min) +
                       " (got " + std::to_string(value) + ")");
    }
  };
  at_least(o.max_running_requests, 1, "max-running-requests");
  at_least(o.chunked_prefill_size, 1, "chunked-prefill-size");
  at_least(o.max_mamba_cache_size, 0, "max-mamba-cache-size");
  at_least(o.context_length, 2, "context-length");
  at_least(o.num_shots, 0, "num-shots");
  at_least(o.num_questions, 1, "num-questions");
  at_least(o.max_new_tokens, 1, "max-new-tokens");
  at_least(o.parallel, 1, "parallel");
  at_least(o.num_prompts, 0, "num-prompts");
  at_least(o.input_len, 0, "random-input-len");
  at_least(o.output_len, 0, "random-output-len");
  if (!(o.range_ratio >= 0 && o.range_ratio <= 1))
    throw UsageError("--random-range-ratio must be in [0, 1] (got " + std::to_string(o.range_ratio) + ")");
  if (o.dataset_name.empty()) o.dataset_name = o.input_len > 0 ? "random" : "gsm8k";
  if (o.dataset_name != "random" && o.dataset_name != "gsm8k")
    throw UsageError("--dataset-name '" + o.dataset_name + "' is not one of random, gsm8k");
  if (o.dataset_name == "gsm8k" && o.input_len > 0)
    throw UsageError("--random-input-len applies to --dataset-name random, not gsm8k");
  if (o.dataset_name == "random" && o.input_len == 0) o.input_len = 1024;
  if (!(o.temperature >= 0)) throw UsageError("--temperature must be 0 or more");
  if (!(o.collective_timeout >= 0))
    throw UsageError("--collective-timeout must be 0 (no watchdog) or a number of seconds");
  if (!(o.exit_timeout >= 0))
    throw UsageError("--exit-timeout must be 0 (no bound) or a number of seconds");
  if (o.mode != "eval" && o.mode != "throughput") {
    throw UsageError("--mode '" + o.mode + "' is not one of eval, throughput");
  }
  if (o.dp_balance != "round-robin" && o.dp_balance != "tokens") {
    throw UsageError("--dp-balance '" + o.dp_balance + "' is not one of round-robin, tokens");
  }
  if (o.answer_extractor != "sglang" && o.answer_extractor != "flexible") {
    throw UsageError("--answer-extractor '" + o.answer_extractor +
                     "' is not one of sglang, flexible");
  }
  if (o.progress != "auto" && o.progress != "bar" && o.progress != "log") {
    throw UsageError("--progress '" + o.progress + "' is not one of auto, bar, log");
  }
  if (o.resume && o.artifacts_dir.empty()) throw UsageError("--resume needs --artifacts-dir");
  validate_speculative(o);
}

}  // namespace

K3evalOptions parse_k3eval_options(int argc, const char* const* argv) {
  K3evalOptions o;
  o.data_path = K3_DEFAULT_DATA;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) o.command_line += ' ';
    o.command_line += argv[i];
  }
  // A subcommand comes first; the options after it are parsed as usual.
  std::vector<const char*> args(argv, argv + argc);
  if (args.size() > 1 && (std::string(args[1]) == "logits" || std::string(args[1]) == "score")) {
    o.command = args[1];
    args.erase(args.begin() + 1);
  }
  argc = static_cast<int>(args.size());
  argv = args.data();
  po::options_description desc = describe(o);
  po::variables_map vm, on_command_line;
  try {
    // Positional arguments are not options: reject them instead of ignoring them.
    po::store(po::command_line_parser(argc, argv).options(desc).positional({}).run(), vm);
    on_command_line = vm;
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream in(path);
      if (!in) throw UsageError("cannot read config file '" + path + "'");
      try {
        po::store(po::parse_config_file(in, desc, /*allow_unregistered=*/false), vm);
      } catch (const po::error& e) {
        throw UsageError("config file '" + path + "': " + e.what());
      }
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + " (see k3eval --help)");
  }
  if (vm.count("speculative-adaptive")) o.speculative_adaptive = vm["speculative-adaptive"].as<bool>();
  if (vm.count("speculative-num-draft-tokens") && o.speculative_num_draft_tokens < 0) {
    throw UsageError("--speculative-num-draft-tokens " +
                     std::to_string(o.speculative_num_draft_tokens) + " must be at least 0");
  }
  // The draft's path has SGLang's name and today's alias; both at once must agree.
  for (const char* name : {"speculative-draft-model-path", "draft-model-path"}) {
    if (!vm.count(name)) continue;
    const std::string path = vm[name].as<std::string>();
    if (!o.draft_model_path.empty() && o.draft_model_path != path) {
      throw UsageError("--speculative-draft-model-path '" + o.draft_model_path +
                       "' and its alias --draft-model-path '" + path + "' disagree");
    }
    o.draft_model_path = path;
  }
  // Paths written in a config file are relative to that file (a job config names its baseline
  // beside it, whatever directory the job starts in); command-line paths to the working directory.
  if (!o.config_file.empty()) {
    const std::filesystem::path base = std::filesystem::path(o.config_file).parent_path();
    for (auto [key, value] :
         {std::pair{"model-path", &o.model_path},
          std::pair{"draft-model-path", &o.draft_model_path},
          std::pair{"speculative-draft-model-path", &o.draft_model_path},
          std::pair{"data-path", &o.data_path},
          std::pair{"baseline", &o.baseline}, std::pair{"history", &o.history},
          std::pair{"artifacts-dir", &o.artifacts_dir}, std::pair{"completions", &o.completions}}) {
      if (vm.count(key) && !on_command_line.count(key) && !value->empty() &&
          std::filesystem::path(*value).is_relative()) {
        *value = (base / *value).lexically_normal().string();
      }
    }
  }
  // Each length has SGLang's name and today's alias; both at once must agree.
  for (auto [name, alias, target] : {std::tuple{"random-input-len", "input-len", &o.input_len},
                                     std::tuple{"random-output-len", "output-len", &o.output_len}}) {
    if (vm.count(name) && vm.count(alias) && vm[name].as<int>() != vm[alias].as<int>()) {
      throw UsageError(std::string("--") + name + " " + std::to_string(vm[name].as<int>()) +
                       " and its alias --" + alias + " " + std::to_string(vm[alias].as<int>()) +
                       " disagree");
    }
    if (vm.count(name)) *target = vm[name].as<int>();
    if (vm.count(alias)) *target = vm[alias].as<int>();
  }
  o.ranks_per_node = o.layout.ranks_per_node;
  if (vm.count("threads")) o.threads = vm["threads"].as<int>();
  if (vm.count("debug-fail-rank")) o.debug_fail_rank = vm["debug-fail-rank"].as<int>();
  if (vm.count("debug-log-error")) o.debug_log_error = vm["debug-log-error"].as<int>();
  if (vm.count("debug-kill-rank")) o.debug_kill_rank = vm["debug-kill-rank"].as<int>();
  if (vm.count("debug-stop-rank")) o.debug_stop_rank = vm["debug-stop-rank"].as<int>();
  if (vm.count("debug-hang-at-exit")) o.debug_hang_at_exit = vm["debug-hang-at-exit"].as<int>();
  validate(o);
  return o;
}

std::string k3eval_usage() {
  K3evalOptions scratch;
  std::ostringstream out;
  out << describe(scratch);
  out << "\nExit codes:\n"
         "  0  ok\n"
         "  1  regression: the run's verdict against --baseline\n"
         "  2  usage or input error: a bad option, layout, checkpoint or data file, or errors\n"
         "     found in the rank logs after the run\n"
         "  3  internal error\n"
         "\nArtifacts (--artifacts-dir DIR; README.md, \"Outputs\"):\n"
         "  .lock              held by rank 0: one job per directory\n"
         "  command.txt        the command line; config.json: the resolved configuration\n"
         "  logs/rank-NNNNN.log  every rank's full log, flushed line by line\n"
         "  questions.jsonl    one line per question as it finishes (--resume reads it)\n"
         "  requests.jsonl     --mode throughput: one line per request\n"
         "  summary.json       metrics, verdict, collectives, speculative counts\n"
         "  results.json       GSM8K: the run as lm-evaluation-harness writes its gsm8k task\n"
         "  status             running, then ok, regression, error or failed (with the reason)\n"
         "  hosts.txt          each host and its block of ranks\n"
         "  heartbeat          rank 0's second-by-second line (with --collective-timeout)\n"
         "  history.h5         one record per run (or --history FILE), read by k3report\n";
  return out.str();
}

}  // namespace k3::apps
