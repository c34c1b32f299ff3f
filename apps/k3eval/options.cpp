#include "apps/k3eval/options.h"

#include <boost/program_options.hpp>

#include <fstream>
#include <sstream>

#include "apps/common/layout_options.h"
#include "quant/error.h"

namespace k3::apps {

namespace po = boost::program_options;

namespace {

po::options_description describe(K3evalOptions& o) {
  // clang-format off
  po::options_description general("General");
  general.add_options()
      ("help,h", po::bool_switch(&o.help), "print this help and exit")
      ("version", po::bool_switch(&o.version), "print the version and exit")
      ("config", po::value(&o.config_file)->value_name("FILE"),
       "read options from an INI file (key = value, names without '--'); the command line wins")
      ("check-layout", po::bool_switch(&o.check_layout),
       "build and verify every process group, print the layout table on rank 0, exit")
      ("model-path", po::value(&o.model_path)->value_name("PATH"),
       "checkpoint directory or .gguf file")
      ("load-format", po::value(&o.load_format)->value_name("FORMAT"),
       "auto (detect), hf, modelslim, gguf or draft")
      ("draft-model-path", po::value(&o.draft_model_path)->value_name("PATH"),
       "a DSpark-style BF16 draft checkpoint, loaded beside --model-path")
      ("load-only", po::bool_switch(&o.load_only),
       "plan, load and audit this rank's slice of --model-path, print the figures, exit")
      ("artifacts-dir", po::value(&o.artifacts_dir)->value_name("DIR"),
       "write every rank's full log to DIR/logs/rank-NNNNN.log")
      ("log-level", po::value(&o.log_level)->value_name("LEVEL"),
       "console level on rank 0: trace, debug, info, warn, error, critical, off (default info)")
      ("threads", po::value<int>()->value_name("N"),
       "oneTBB threads per rank (default: SLURM_CPUS_PER_TASK under Slurm, else 1)");
  // clang-format on

  po::options_description parallel = layout_options(o.layout);

  po::options_description testing("Testing");
  // clang-format off
  testing.add_options()
      ("debug-fail-rank", po::value<int>()->value_name("R"),
       "throw an error on rank R (-1: every rank) after the groups are built, to exercise the "
       "fatal-error policy");
  // clang-format on

  po::options_description all("Usage: mpirun -np N k3eval [options]");
  all.add(general).add(parallel).add(testing);
  return all;
}

}  // namespace

K3evalOptions parse_k3eval_options(int argc, const char* const* argv) {
  K3evalOptions o;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) o.command_line += ' ';
    o.command_line += argv[i];
  }
  po::options_description desc = describe(o);
  po::variables_map vm;
  try {
    // Positional arguments are not options: reject them instead of ignoring them.
    po::store(po::command_line_parser(argc, argv).options(desc).positional({}).run(), vm);
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
  o.ranks_per_node = o.layout.ranks_per_node;
  if (vm.count("threads")) o.threads = vm["threads"].as<int>();
  if (vm.count("debug-fail-rank")) o.debug_fail_rank = vm["debug-fail-rank"].as<int>();
  return o;
}

std::string k3eval_usage() {
  K3evalOptions scratch;
  std::ostringstream out;
  out << describe(scratch);
  return out.str();
}

}  // namespace k3::apps
