// k3eval's options: command line plus an optional INI file (--config), SGLang's flag names
// where SGLang has the flag.
#pragma once

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
  bool load_only = false;
  std::optional<int> debug_fail_rank;  // fault injection for tests of the fatal-error policy
  bool help = false;
  bool version = false;
  std::string command_line;  // as launched, for logs and artifacts
};

// Throws k3::UsageError with Boost's message for an unknown, malformed or repeated option, and
// for an unreadable or malformed config file. Command-line values override the config file.
K3evalOptions parse_k3eval_options(int argc, const char* const* argv);

std::string k3eval_usage();

}  // namespace k3::apps
