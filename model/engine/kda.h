// The KDA delta rule of one head (KimiDeltaAttention's recurrence; fla ops/kda naive.py) in fp32:
// the token recurrence for decode and fla's chunked form for prefill, which are the same map
// (tests/model/engine checks both against the double-precision reference).
#pragma once

#include <cstddef>
#include <vector>

namespace k3::model::engine {

// One head's activated inputs over n tokens: q l2-normed and scaled by D^-0.5, k l2-normed,
// g the log-decay per key channel, beta per token; o receives the outputs [n][D].
struct KdaHead {
  std::size_t tokens = 0, dim = 0;
  std::vector<float> q, k, v, g, beta, o;
  void resize(std::size_t n, std::size_t d) {
    tokens = n;
    dim = d;
    q.resize(n * d);
    k.resize(n * d);
    v.resize(n * d);
    g.resize(n * d);
    beta.resize(n);
    o.resize(n * d);
  }
};

// S is [D key][D value], carried in and out. With `work` (D * D), S is only read: the first
// token goes from S into work and the rest run in work (a verify step, whose accepted tokens
// Engine::commit replays on S itself; the first token's pass doubles as the copy).
void kda_recurrent(KdaHead& head, float* S, float* work = nullptr);
// Chunks of `chunk` tokens at most, fewer when the gate's lower bound needs it to keep the
// factored decays exp(+-cumulative g) inside float's range (see kda.cpp).
void kda_chunked(KdaHead& head, float* S, std::size_t chunk, float gate_lower_bound);

}  // namespace k3::model::engine
