// The parallel-layout options every app shares (SGLang's flag names).
#pragma once

#include <boost/program_options/options_description.hpp>

#include "dist/layout.h"

namespace k3::apps {

// --tp --dp --ep --enable-dp-attention --enable-dp-lm-head --enable-shared-experts-attn-tp
// --enable-dense-mlp-attn-tp --ranks-per-node, stored into `spec` (world is set by the caller).
boost::program_options::options_description layout_options(dist::LayoutSpec& spec);

}  // namespace k3::apps
