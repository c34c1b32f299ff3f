#pragma once

#include "apps/k3eval/options.h"
#include "dist/groups.h"
#include "dist/runtime.h"

namespace k3::apps {

// `k3eval --model-path DIR --load-only`: every rank plans, loads and audits its slice; rank 0
// prints per-rank bytes, peak memory and load time. Returns the exit code (0 only when every
// rank's audit is clean).
int run_load_only(dist::Runtime& runtime, const dist::Groups& groups, const K3evalOptions& options);

}  // namespace k3::apps
