// llama_cpp_layers: run llama.cpp's kimi-k3 model on given token ids and write, per layer, the
// tensors k3eval's `logits --layers-out` writes (docs/ENGINE.md, "llama.cpp comparison"):
// the attention block's output (llama.cpp's kda_out / mla_out), the FFN output (ffn_out) and
// the stream after the layer (l_out), plus every position's logits. Built by
// tests/bench/compare_llama_cpp.sh against a llama.cpp build of the user's (never part of the
// project's build): it only uses llama.h's public API and the graph's eval callback.
//
// Usage: llama_cpp_layers MODEL.gguf OUT_PREFIX TOKEN_ID...
// Writes OUT_PREFIX.layers (float32 [layers x 3 x positions x hidden], k3eval's order) and
// OUT_PREFIX.logits (float32 [positions x vocabulary]).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

namespace {

struct Captured {
  // name ("kda_out-3") -> [positions x hidden] row-major
  std::map<std::string, std::vector<float>> tensors;
};

bool wanted(const char* name) {
  for (const char* prefix : {"l_out-", "kda_out-", "mla_out-", "prefix_sum_attn-", "ffn_out-"}) {
    if (std::strncmp(name, prefix, std::strlen(prefix)) == 0) return true;
  }
  return false;
}

// The scheduler asks first (ask = true) whether we want a tensor's data, then hands it over.
bool on_tensor(ggml_tensor* t, bool ask, void* user) {
  if (ask) return wanted(t->name);
  if (!wanted(t->name)) return true;  // continue the graph
  if (t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) {
    std::fprintf(stderr, "llama_cpp_layers: %s is not a contiguous F32 tensor\n", t->name);
    std::exit(1);
  }
  auto& out = static_cast<Captured*>(user)->tensors[t->name];
  out.resize(static_cast<std::size_t>(ggml_nelements(t)));
  ggml_backend_tensor_get(t, out.data(), 0, ggml_nbytes(t));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf OUT_PREFIX TOKEN_ID...\n", argv[0]);
    return 2;
  }
  const std::string prefix = argv[2];
  std::vector<llama_token> ids;
  for (int i = 3; i < argc; ++i) ids.push_back(static_cast<llama_token>(std::atoi(argv[i])));

  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  // CPU weight repacking cannot take the 3-D Q4_0 attn_k_b (compare_llama_cpp.sh, --no-repack).
  mp.use_extra_bufts = false;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    std::fprintf(stderr, "llama_cpp_layers: cannot load %s\n", argv[1]);
    return 1;
  }
  Captured captured;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(ids.size() + 16);
  cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(ids.size());  // one graph for the prompt
  cp.n_threads = cp.n_threads_batch = 1;
  cp.type_k = cp.type_v = GGML_TYPE_F32;  // k3eval caches fp32
  cp.cb_eval = on_tensor;
  cp.cb_eval_user_data = &captured;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "llama_cpp_layers: cannot create a context\n");
    return 1;
  }
  llama_batch batch = llama_batch_init(static_cast<int32_t>(ids.size()), 0, 1);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    batch.token[i] = ids[i];
    batch.pos[i] = static_cast<llama_pos>(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;  // every position's logits, as k3eval logits writes them
  }
  batch.n_tokens = static_cast<int32_t>(ids.size());
  if (llama_decode(ctx, batch) != 0) {
    std::fprintf(stderr, "llama_cpp_layers: llama_decode failed\n");
    return 1;
  }
  const int layers = llama_model_n_layer(model);
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  std::FILE* f = std::fopen((prefix + ".layers").c_str(), "wb");
  for (int l = 0; l < layers; ++l) {
    const std::string n = std::to_string(l);
    // On a layer that banks its input the stream restarts from the attention output, and
    // llama.cpp names that same tensor again: prefix_sum_attn replaces kda_out / mla_out.
    std::string attention = "prefix_sum_attn-" + n;
    for (const std::string& name : {"kda_out-" + n, "mla_out-" + n})
      if (captured.tensors.count(name)) attention = name;
    for (const std::string& name : {attention, "ffn_out-" + n, "l_out-" + n}) {
      const auto it = captured.tensors.find(name);
      if (it == captured.tensors.end()) {
        std::fprintf(stderr, "llama_cpp_layers: the graph named no tensor %s\n", name.c_str());
        return 1;
      }
      std::fwrite(it->second.data(), sizeof(float), it->second.size(), f);
    }
  }
  std::fclose(f);
  f = std::fopen((prefix + ".logits").c_str(), "wb");
  for (std::size_t i = 0; i < ids.size(); ++i)
    std::fwrite(llama_get_logits_ith(ctx, static_cast<int32_t>(i)), sizeof(float),
                static_cast<std::size_t>(vocab), f);
  std::fclose(f);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
