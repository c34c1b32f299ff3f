// llama.cpp's kimi-k3 GGUF tensor names, the one place they are spelled: each logical parameter
// (the official release's name) to its stored name, for the binding (through
// Checkpoint::stored_name) and the synthetic GGUF writer.
#pragma once

#include <string>

#include "model/config.h"

namespace k3::model {

// The stored name of a logical parameter in a GGUF file ("blk.3.attn_q_b.weight"). The config
// tells MLA layers (g_proj -> attn_gate) from KDA layers (g_proj -> ssm_g).
std::string gguf_name(const std::string& logical, const ModelConfig& config);

}  // namespace k3::model
