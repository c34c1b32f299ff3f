#include "apps/common/help.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>

#include "common/error.h"

namespace k3::apps {

bool answered_help(const std::vector<std::string>& args, const SubcommandHelp& help,
                   const boost::program_options::options_description& options) {
  const bool asked = std::any_of(args.begin(), args.end(),
                                 [](const std::string& a) { return a == "--help" || a == "-h"; });
  if (!asked) return false;
  std::cout << "usage: " << help.usage << "\n" << help.summary << "\n\n" << options << "\nexample:\n  "
            << help.example << "\n";
  return true;
}

int tool_main(const char* tool, int argc, char** argv, int (*run)(int, char**)) {
  try {
    return run(argc, argv);
  } catch (const k3::Error& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return static_cast<int>(e.exit_code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", tool, e.what());
    return 3;
  }
}

}  // namespace k3::apps
