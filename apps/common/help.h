// The single-process tools' shared frame: every subcommand answers --help with its own usage
// line, its options and an example, before any option is checked (a required one included); and
// one error policy for their main().
#pragma once

#include <string_view>
#include <vector>

#include <boost/program_options.hpp>

namespace k3::apps {

struct SubcommandHelp {
  std::string_view usage;    // "k3ckpt synth --out DIR [options]"
  std::string_view summary;  // one sentence: what it does
  std::string_view example;  // one command line that works
};

// When `args` hold --help or -h: prints `help` and `options` to stdout and returns true.
bool answered_help(const std::vector<std::string>& args, const SubcommandHelp& help,
                   const boost::program_options::options_description& options);

// main() of a single-process tool: runs `run`; a k3::Error prints "TOOL: message" on stderr and
// exits with its code, anything else "TOOL: internal error: ..." with exit code 3.
int tool_main(const char* tool, int argc, char** argv, int (*run)(int, char**));

}  // namespace k3::apps
