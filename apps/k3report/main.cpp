// k3report: reads the HDF5 run history that k3eval appends to (eval/report.h) and says what
// changed; no MPI. The logic lives in eval/history.h.
//   k3report trend   [--checkpoint C] [--config NAME] [--last N]
//   k3report compare [RUN_A RUN_B] [--checkpoint C] [--config NAME]
//   k3report check   [--tolerance T | --relative R] [--checkpoint C] [--config NAME]
//   k3report plot    --out FILE.svg [--checkpoint C] [--config NAME]
// Every command takes --history FILE (default ./history.h5), also before the command.
// Exit codes: 0 ok, 1 `check` found a regression, 2 usage or input error, 3 internal error.
#include <boost/program_options.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "apps/common/help.h"
#include "eval/chart.h"
#include "eval/history.h"
#include "common/error.h"

namespace {

namespace po = boost::program_options;
using namespace k3;

const char* kUsage =
    "usage: k3report [--history FILE] COMMAND [options]   (FILE defaults to ./history.h5)\n"
    "  trend   [--checkpoint C] [--config NAME] [--last N]\n"
    "          accuracy, invalid rate, output throughput, latency and verdict per run of each\n"
    "          checkpoint and configuration, with the change against the previous run;\n"
    "          offline throughput runs (k3eval --mode throughput) in series of their own;\n"
    "          accept length and accept rate when a run decoded speculatively (\"-\" for\n"
    "          runs without)\n"
    "  compare [RUN_A RUN_B] [--checkpoint C] [--config NAME]\n"
    "          the answers that changed between two evaluations (default: the last two runs\n"
    "          of the latest run's checkpoint and configuration)\n"
    "  check   [--tolerance T | --relative R] [--checkpoint C] [--config NAME]\n"
    "          exit 1 when the latest run regressed: its verdict is not ok, or without a\n"
    "          baseline its accuracy is below the previous run's minus T (default 0), or times R\n"
    "          (an offline throughput run: its output token/s against the previous one's)\n"
    "  plot    --out FILE.svg [--checkpoint C] [--config NAME]\n"
    "          an SVG chart of accuracy and output throughput over one checkpoint and\n"
    "          configuration (default: the latest run's)\n"
    "k3report COMMAND --help: that command's options and an example.\n";

struct Common {
  std::string history = "history.h5";
  std::string checkpoint, config;
};

po::options_description common_options(Common& c) {
  po::options_description desc("Options");
  desc.add_options()("history", po::value(&c.history)->value_name("FILE"),
                     "the HDF5 history k3eval appended to (default ./history.h5)")(
      "checkpoint", po::value(&c.checkpoint)->value_name("C"),
      "only runs of this checkpoint (the model path as k3eval recorded it)")(
      "config", po::value(&c.config)->value_name("NAME"),
      "only runs of this job configuration (its INI file's stem; \"\" for none)");
  return desc;
}

po::variables_map parse(const std::string& command, const std::vector<std::string>& args,
                        const po::options_description& desc,
                        const po::positional_options_description& pos = {}) {
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(command + ": " + e.what() + " (see k3report --help)");
  }
  return vm;
}

eval::SeriesFilter filter_of(const Common& c, const po::variables_map& vm) {
  eval::SeriesFilter f;
  if (vm.count("checkpoint")) f.checkpoint = c.checkpoint;
  if (vm.count("config")) f.config_name = c.config;
  return f;
}

std::size_t run_number(const std::string& text) {
  std::size_t used = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || text.front() == '-' || text.front() == '+') {
    throw UsageError("compare: '" + text + "' is not a run number");
  }
  return static_cast<std::size_t>(n);
}

int trend(Common& c, const std::vector<std::string>& args) {
  std::size_t last = 0;
  po::options_description desc = common_options(c);
  desc.add_options()("last", po::value(&last)->value_name("N"),
                     "only the last N runs of each series");
  if (apps::answered_help(args,
                          {"k3report [--history FILE] trend [--checkpoint C] [--config NAME] [--last N]",
                           "Accuracy, invalid rate, output throughput, latency and verdict per "
                           "run of each series, with the change against the previous run.",
                           "k3report --history artifacts/history.h5 trend --last 5"},
                          desc))
    return 0;
  const po::variables_map vm = parse("trend", args, desc);
  if (vm.count("last") && last == 0) throw UsageError("trend: --last must be at least 1");
  const eval::History h = eval::load_history(c.history);
  const std::vector<eval::Series> all = eval::select_series(h, filter_of(c, vm));
  for (std::size_t i = 0; i < all.size(); ++i) {
    std::fputs(((i ? "\n" : "") + eval::format_trend(all[i], eval::trend(h, all[i], last))).c_str(),
               stdout);
  }
  return 0;
}

int compare(Common& c, const std::vector<std::string>& args) {
  po::options_description desc = common_options(c);
  desc.add_options()("runs", po::value<std::vector<std::string>>(), "RUN_A RUN_B");
  po::positional_options_description pos;
  pos.add("runs", 2);
  if (apps::answered_help(args,
                          {"k3report [--history FILE] compare [RUN_A RUN_B] [--checkpoint C] [--config NAME]",
                           "The answers that changed between two evaluations (default: the last "
                           "two runs of the latest run's series).",
                           "k3report --history artifacts/history.h5 compare 3 4"},
                          desc))
    return 0;
  const po::variables_map vm = parse("compare", args, desc, pos);
  const std::vector<std::string> runs =
      vm.count("runs") ? vm["runs"].as<std::vector<std::string>>() : std::vector<std::string>{};
  if (runs.size() == 1) throw UsageError("compare: give two run numbers, or none");
  const eval::History h = eval::load_history(c.history);
  std::size_t a = 0, b = 0;
  if (runs.size() == 2) {
    a = run_number(runs[0]);
    b = run_number(runs[1]);
    h.run(a);
    h.run(b);
  } else {
    const eval::Series s = eval::latest_series(h, filter_of(c, vm));
    if (s.runs.size() < 2) {
      throw InputError(h.path.string() + ": compare needs two runs of " + s.name() +
                       "; the history holds one, run " + std::to_string(s.runs.back()) +
                       " (name two run numbers to compare across series)");
    }
    a = s.runs[s.runs.size() - 2];
    b = s.runs.back();
  }
  std::fputs(eval::format_comparison(h, eval::compare_runs(h, a, b)).c_str(), stdout);
  return 0;
}

int check(Common& c, const std::vector<std::string>& args) {
  double tolerance = 0, relative = 0;
  po::options_description desc = common_options(c);
  desc.add_options()("tolerance", po::value(&tolerance)->value_name("T"),
                     "absolute: regressed below the previous accuracy - T (default 0)")(
      "relative", po::value(&relative)->value_name("R"),
      "relative instead: regressed below the previous accuracy x R (SGLang uses 0.99)");
  if (apps::answered_help(args,
                          {"k3report [--history FILE] check [--tolerance T | --relative R] [--checkpoint C] [--config NAME]",
                           "Exit 1 when the latest run regressed (its verdict, or against the "
                           "previous run of its series).",
                           "k3report --history artifacts/history.h5 check --relative 0.99"},
                          desc))
    return 0;
  const po::variables_map vm = parse("check", args, desc);
  eval::Tolerance t{eval::Tolerance::Mode::kAbsolute, 0.0};
  if (vm.count("tolerance") && vm.count("relative")) {
    throw UsageError("check: --tolerance and --relative exclude each other");
  }
  if (vm.count("tolerance")) {
    if (!(tolerance >= 0 && tolerance <= 1)) {
      throw UsageError(fmt::format("check: --tolerance {} is not in [0, 1]", tolerance));
    }
    t.value = tolerance;
  }
  if (vm.count("relative")) {
    if (!(relative > 0 && relative <= 1)) {
      throw UsageError(fmt::format("check: --relative {} is not in (0, 1]", relative));
    }
    t = {eval::Tolerance::Mode::kRelative, relative};
  }
  const eval::History h = eval::load_history(c.history);
  const eval::CheckResult r = eval::check_latest(h, filter_of(c, vm), t);
  std::printf("%s\n", r.line.c_str());
  return r.regressed ? static_cast<int>(ExitCode::kRegression) : 0;
}

int plot(Common& c, const std::vector<std::string>& args) {
  std::string out;
  po::options_description desc = common_options(c);
  desc.add_options()("out", po::value(&out)->required()->value_name("FILE.svg"),
                     "the SVG file to write");
  if (apps::answered_help(args,
                          {"k3report [--history FILE] plot --out FILE.svg [--checkpoint C] [--config NAME]",
                           "An SVG chart of accuracy and output throughput over one series.",
                           "k3report --history artifacts/history.h5 plot --out trend.svg"},
                          desc))
    return 0;
  const po::variables_map vm = parse("plot", args, desc);
  const eval::History h = eval::load_history(c.history);
  const eval::Series s = eval::latest_series(h, filter_of(c, vm));
  eval::write_plot(out, h, s);
  std::printf("wrote %s: %s, %zu run%s\n", out.c_str(), s.name().c_str(), s.runs.size(),
              s.runs.size() == 1 ? "" : "s");
  return 0;
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // --history may come before the command too: move it behind.
  std::vector<std::string> global;
  while (!args.empty() && args.front().starts_with("--history")) {
    const bool joined = args.front().starts_with("--history=");
    if (!joined && args.front() != "--history") break;
    if (!joined && args.size() < 2) throw UsageError("--history needs a FILE");
    global.insert(global.end(), args.begin(), args.begin() + (joined ? 1 : 2));
    args.erase(args.begin(), args.begin() + (joined ? 1 : 2));
  }
  if (args.empty() || args.front() == "--help" || args.front() == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args.front();
  args.erase(args.begin());
  args.insert(args.end(), global.begin(), global.end());
  Common c;
  if (command == "trend") return trend(c, args);
  if (command == "compare") return compare(c, args);
  if (command == "check") return check(c, args);
  if (command == "plot") return plot(c, args);
  throw UsageError("unknown command '" + command + "'\n" + kUsage);
}

}  // namespace

int main(int argc, char** argv) { return k3::apps::tool_main("k3report", argc, argv, run); }
