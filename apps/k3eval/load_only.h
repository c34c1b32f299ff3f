#pragma once

#include "apps/k3eval/options.h"
#include "dist/groups.h"
#include "dist/runtime.h"

namespace k3::apps {

// `k3eval --model-path DIR --plan-only`: the pre-flight. Everything up to reading tensor data
// (format, capabilities, every data-free check, each rank's plan), then rank 0 prints one line
// per rank (bytes to read, shards, peak RSS) and a summary. Returns 0 when the plan is clean.
int run_plan_only(dist::Runtime& runtime, const dist::Groups& groups, const K3evalOptions& options);

// `k3eval --model-path DIR --load-only`: every rank plans, loads and audits its slice; rank 0
// prints per-rank bytes, peak memory and load time. Returns the exit code (0 only when every
// rank's audit is clean).
int run_load_only(dist::Runtime& runtime, const dist::Groups& groups, const K3evalOptions& options);

}  // namespace k3::apps
