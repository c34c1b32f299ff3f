// Every subcommand of the single-process tools answers --help with its own usage line, its
// options and an example, before any option is checked (a required one included).
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

}  // namespace k3::apps
