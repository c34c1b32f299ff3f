// The main job: the GSM8K evaluation (and --mode throughput) and the `logits` / `score`
// subcommands, each over a loaded model slice.
#pragma once

#include "apps/k3eval/options.h"
#include "dist/groups.h"
#include "dist/runtime.h"

namespace k3::apps {

// GSM8K on every DP group; rank 0 prints SGLang's four lines and writes the artifacts. Returns
// the exit code: 0 pass, 1 regression against --baseline, 2 error (e.g. errors in the logs).
int run_evaluation(dist::Runtime& runtime, const dist::Groups& groups,
                   const K3evalOptions& options);

// --mode throughput: input and output tokens/s per DP group and in total.
int run_throughput_mode(dist::Runtime& runtime, const dist::Groups& groups,
                        const K3evalOptions& options);

// `k3eval logits`: float32 logits of every prompt position (DP group 0 runs it, the others join
// with empty batches), the token ids and the greedy next token.
int run_logits(dist::Runtime& runtime, const dist::Groups& groups, const K3evalOptions& options);

// `k3eval score`: re-score completions produced elsewhere (rank 0 only; no model).
int run_score(const K3evalOptions& options);

}  // namespace k3::apps
