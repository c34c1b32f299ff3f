#include "apps/common/help.h"

#include <algorithm>
#include <iostream>
#include <string>

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

}  // namespace k3::apps
