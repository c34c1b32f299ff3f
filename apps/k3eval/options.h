// k3eval's options: command line plus an optional INI file (--config), SGLang's flag names
// where SGLang has the flag.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dist/layout.h"

namespace k3::apps {

struct K3evalOptions {
  dist::LayoutSpec layout;  // world is filled in at run time
  int ranks_per_node = 0;   // --ranks-per-node: simulate nodes of N consecutive ranks
  std::optional<int> threads;
  std::string artifacts_dir;
  std::string log_level = "info";
  std::string config_file;
  bool check_layout = false;
  std::string model_path;  // --model-path: checkpoint directory or .gguf file
  std::string load_format = "auto";
  std::string draft_model_path;  // --draft-model-path: a DSpark-style draft beside the model
  bool plan_only = false;
  bool load_only = false;

  // What to run: "eval" (default: the GSM8K evaluation, or --mode throughput), "logits" or
  // "score" (the first argument: `k3eval logits ...`, `k3eval score ...`).
  std::string command = "eval";
  std::string mode = "eval";  // --mode eval | throughput

  // Engine and serving (SGLang's names).
  int max_running_requests = 16;
  int chunked_prefill_size = 512;
  int max_mamba_cache_size = 0;  // state slots; 0: max_running_requests + 1 (prefix snapshot)
  int context_length = 4096;
  bool disable_prefix_cache = false;
  bool fp32_activations = false;
  bool disable_weight_repack = false;  // EngineOptions::repack_weights off
  // Speculative decoding (SGLang's names): the algorithm ("dspark"; "" when off) and its block
  // size, the drafted tokens verified per round. Reports echo them when a verify round ran.
  std::string speculative_algorithm;
  int speculative_block_size = 0;
  // How many drafts each request verifies per step: --speculative-num-draft-tokens N fixes it
  // (-1: not given); otherwise --speculative-adaptive (on unless set false) chooses by goodput.
  int speculative_num_draft_tokens = -1;
  std::optional<bool> speculative_adaptive;
  // Measure the adaptive policy's step costs even when <artifacts>/speculation-costs.json holds
  // this job's from an earlier run.
  bool speculative_recalibrate = false;

  // Evaluation.
  std::string data_path;  // default: K3_DEFAULT_DATA (GSM8K test.jsonl in ../shared)
  int num_shots = 5;
  int num_questions = 200;
  int max_new_tokens = 512;
  double temperature = 0;
  std::uint64_t seed = 0;
  int parallel = 64;
  bool exclude_shot_questions = false;
  std::string answer_extractor = "sglang";
  std::string dp_balance = "round-robin";
  std::string baseline;
  std::string history;  // HDF5 run history; default <artifacts-dir>/history.h5
  bool resume = false;
  std::string progress = "auto";  // bar | log | auto (a bar when stdout is a terminal)

  // --mode throughput.
  // SGLang's bench_offline_throughput names; --input-len / --output-len are aliases.
  std::string dataset_name;  // random or gsm8k; "": random when an input length is given
  int num_prompts = 0;       // 0: --num-questions
  int input_len = 0;         // --random-input-len; 0: 1024 for random (SGLang's default)
  int output_len = 0;        // --random-output-len; 0: --max-new-tokens
  double range_ratio = 1.0;  // --random-range-ratio: lengths uniform in [len x ratio, len]

  // logits / score.
  std::string prompt;
  std::string prompts_file;  // logits: one prompt per line, each written to --out's {} as its index
  std::string out;
  std::string layers_out;  // logits: every layer's attention, FFN and stream rows
  std::string completions;
  std::optional<int> debug_fail_rank;  // fault injection for tests of the fatal-error policy
  std::optional<int> debug_log_error;  // log one error line on rank R and go on (log-scan tests)
  int debug_abort_after = 0;  // abort the job after N questions were written (resume tests)
  std::optional<int> debug_kill_rank;  // SIGKILL rank R once warmed up (failure-record tests)
  std::optional<int> debug_stop_rank;  // SIGSTOP rank R once warmed up (watchdog tests)
  std::optional<int> debug_hang_at_exit;  // rank R never returns once the job has ended
  double collective_timeout = 600;     // s a rank may wait in one collective; 0: no watchdog
  double exit_timeout = 60;            // s a rank may take to tear down after the job; 0: no bound
  bool help = false;
  bool version = false;
  std::string command_line;  // as launched, for logs and artifacts
};

// Throws k3::UsageError with Boost's message for an unknown, malformed or repeated option, and
// for an unreadable or malformed config file. Command-line values override the config file.
K3evalOptions parse_k3eval_options(int argc, const char* const* argv);

std::string k3eval_usage();

}  // namespace k3::apps
