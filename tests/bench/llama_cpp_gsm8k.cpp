// llama_cpp_gsm8k: llama.cpp's side of `compare_llama_cpp.sh gsm8k`, on llama.h's public API:
// N prompts generated all at once with continuous batching (one sequence each, as llama-server
// with N slots would run them), greedy, each stopping at an end-of-generation token, at
// MAX_NEW_TOKENS or when its text contains one of SGLang's GSM8K stop strings ("Question",
// "Assistant:", "<|separator|>"; the token that completes one counts, as in SGLang). Prints the
// generated tokens and the output throughput from the first prompt token to the last answer.
// llama-server itself cannot serve this comparison: its final chat parse rejects completions that
// are not valid UTF-8 ("does not match the expected Content-only format"), which the synthetic
// model's byte tokens produce.
//
// Usage: llama_cpp_gsm8k MODEL.gguf PROMPTS THREADS MAX_NEW_TOKENS
//   PROMPTS: the prompts, each ended by a NUL byte.
// Built by compare_llama_cpp.sh against the user's llama.cpp build (never part of k3eval).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "llama.h"

namespace {

struct Sequence {
  std::vector<llama_token> prompt;
  std::size_t fed = 0;  // prompt tokens given to llama_decode so far
  llama_pos pos = 0;
  llama_token last = 0;
  std::string text;
  int generated = 0;
  bool done = false;
};

const char* const kStops[] = {"Question", "Assistant:", "<|separator|>"};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s MODEL.gguf PROMPTS THREADS MAX_NEW_TOKENS\n", argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[3]);
  const int max_new = std::atoi(argv[4]);
  std::ifstream in(argv[2], std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> prompts;
  for (std::size_t at = 0; at < all.size();) {
    const std::size_t end = all.find('\0', at);
    if (end == std::string::npos) break;
    prompts.push_back(all.substr(at, end - at));
    at = end + 1;
  }
  if (prompts.empty()) {
    std::fprintf(stderr, "llama_cpp_gsm8k: no NUL-terminated prompt in %s\n", argv[2]);
    return 2;
  }

  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.use_extra_bufts = false;  // as compare_llama_cpp.sh's --no-repack (the 3-D Q4_0 attn_k_b)
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    std::fprintf(stderr, "llama_cpp_gsm8k: cannot load %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);

  std::vector<Sequence> seqs(prompts.size());
  std::size_t longest = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const std::string& p = prompts[i];
    const int n = -llama_tokenize(vocab, p.data(), static_cast<int32_t>(p.size()), nullptr, 0,
                                  true, false);
    seqs[i].prompt.resize(static_cast<std::size_t>(n));
    llama_tokenize(vocab, p.data(), static_cast<int32_t>(p.size()), seqs[i].prompt.data(), n,
                   true, false);
    longest = std::max(longest, static_cast<std::size_t>(n));
  }
  // One cache per sequence (kv_unified off): a unified cache makes every token attend over all
  // sequences' cells behind a mask, which measured 10x slower here (64 x 1150 cells).
  const std::size_t context = seqs.size() * (longest + static_cast<std::size_t>(max_new) + 16);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(context);
  cp.n_batch = 2048;
  cp.n_ubatch = 512;
  cp.n_seq_max = static_cast<uint32_t>(seqs.size());
  cp.kv_unified = false;
  cp.n_threads = cp.n_threads_batch = threads;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "llama_cpp_gsm8k: cannot create a context of %zu tokens\n", context);
    return 1;
  }

  const auto t0 = std::chrono::steady_clock::now();
  llama_batch batch = llama_batch_init(static_cast<int32_t>(cp.n_batch), 0, 1);
  std::vector<std::pair<std::size_t, int32_t>> sampled;  // (sequence, batch row) per decode
  long total = 0;
  for (;;) {
    // One step: every running sequence's next token, then prompt tokens up to the batch size.
    batch.n_tokens = 0;
    sampled.clear();
    auto add = [&](std::size_t s, llama_token t, bool logits) {
      const int32_t r = batch.n_tokens++;
      batch.token[r] = t;
      batch.pos[r] = seqs[s].pos++;
      batch.n_seq_id[r] = 1;
      batch.seq_id[r][0] = static_cast<llama_seq_id>(s);
      batch.logits[r] = logits;
      if (logits) sampled.emplace_back(s, r);
    };
    for (std::size_t s = 0; s < seqs.size(); ++s) {
      if (!seqs[s].done && seqs[s].fed == seqs[s].prompt.size() && seqs[s].generated > 0)
        add(s, seqs[s].last, true);
    }
    for (std::size_t s = 0; s < seqs.size(); ++s) {
      Sequence& q = seqs[s];
      while (q.fed < q.prompt.size() && batch.n_tokens < static_cast<int32_t>(cp.n_batch)) {
        ++q.fed;
        add(s, q.prompt[q.fed - 1], q.fed == q.prompt.size());
      }
    }
    if (batch.n_tokens == 0) break;
    if (llama_decode(ctx, batch) != 0) {
      std::fprintf(stderr, "llama_cpp_gsm8k: llama_decode failed\n");
      return 1;
    }
    for (const auto& [s, r] : sampled) {
      const float* logits = llama_get_logits_ith(ctx, r);
      const llama_token t =
          static_cast<llama_token>(std::max_element(logits, logits + n_vocab) - logits);
      Sequence& q = seqs[s];
      q.last = t;
      ++q.generated;
      ++total;
      char piece[256];
      const int n = llama_token_to_piece(vocab, t, piece, sizeof piece, 0, false);
      if (n > 0) q.text.append(piece, static_cast<std::size_t>(n));
      bool stop = llama_vocab_is_eog(vocab, t) || q.generated >= max_new;
      for (const char* s : kStops) stop = stop || q.text.find(s) != std::string::npos;
      q.done = stop;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%ld tokens in %.1f s, output throughput %.1f tok/s\n", total, seconds,
              static_cast<double>(total) / seconds);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
