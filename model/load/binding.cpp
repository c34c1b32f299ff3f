#include "model/load/binding.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <set>

#include "common/error.h"
#include "common/fan_out.h"
#include "model/checkpoint/stored_names.h"

namespace k3::model {

std::string_view part_role_name(PartRole role) {
  switch (role) {
    case PartRole::kWeight:
      return "weight";
    case PartRole::kPacked:
      return "packed";
    case PartRole::kE8m0:
      return "e8m0";
    case PartRole::kScale:
      return "scale";
    case PartRole::kOffset:
      return "offset";
    case PartRole::kGroupScale:
      return "group_scale";
    case PartRole::kGroupOffset:
      return "group_offset";
    case PartRole::kSplitK:
      return "k_b";
    case PartRole::kSplitV:
      return "v_b";
    case PartRole::kScore:
      return "score";
    case PartRole::kScoreNorm:
      return "norm";
    case PartRole::kScoreProj:
      return "proj";
    case PartRole::kSsmA:
      return "ssm_a";
    case PartRole::kALog:
      return "a_log";
  }
  return "?";
}

namespace {

bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

std::string dims(const std::vector<std::int64_t>& s) { return shape_string(s); }

std::string context_of(const Format& format) {
  return "format " + std::string(format.name()) + ": ";
}

// Binds one parameter at a time; several Binders may work at once (bind_parameters), sharing
// only the per-tensor claim flags.
class Binder {
 public:
  Binder(const Checkpoint& ck, std::vector<char>& claimed, std::vector<std::string>& problems)
      : ck_(ck), fmt_(ck.format()), claimed_(claimed), problems_(problems) {}

  Binding bind(const ParamSpec& s) {
    Binding b;
    b.spec = s;
    current_ = &s;
    switch (s.family) {
      case ParamFamily::kVector:
        bind_vector(b);
        break;
      case ParamFamily::kAttnResScore:
        bind_attn_res(b);
        break;
      case ParamFamily::kKdaDecay:
        bind_decay(b);
        break;
      case ParamFamily::kEmbedding:
      case ParamFamily::kLinear:
        bind_linear(b, stored_name(s.name), s.shape, b.repr);
        break;
      case ParamFamily::kMlaKvB:
        bind_kv_b(b);
        break;
      case ParamFamily::kLatentProjection:
        bind_latent(b);
        break;
      case ParamFamily::kRoutedExpert:
        bind_experts(b);
        break;
    }
    for (const StoredPart& p : b.parts) {
      if (p.stored.size() != p.tensors.size())
        throw InternalError("binding " + b.spec.name + ": part " +
                            std::string(part_role_name(p.role)) + " is not resolved");
    }
    return b;
  }

 private:
  void problem(const std::string& what) { problems_.push_back(context_of(fmt_) + what); }

  std::string stored_name(const std::string& logical) const { return ck_.stored_name(logical); }

  // Looks a stored tensor up and checks its shape; records a problem and returns null if absent.
  const StoredTensor* need(const std::string& name, const std::vector<std::int64_t>& shape,
                           const std::string& why) {
    const StoredTensor* t = ck_.find(name);
    if (!t) {
      problem("missing tensor '" + name + "' for " + current_->name + ", expected " + dims(shape) +
              why);
      return nullptr;
    }
    claim(*t);
    if (t->entry.shape != shape) {
      problem("tensor '" + name + "' has shape " + dims(t->entry.shape) + ", expected " +
              dims(shape) + " from config.json");
      return nullptr;
    }
    return t;
  }

  StoredPart part(PartRole role, const StoredTensor& t) {
    StoredPart p;
    p.role = role;
    p.tensors = {t.entry.name};
    p.stored = {&t};
    p.dtype = t.entry.dtype;
    p.shape = t.entry.shape;
    return p;
  }

  void dense(Binding& b, Representation& r, DType dtype, const std::string& name) {
    if (!is_float(dtype)) {
      problem("tensor '" + name + "' is " + std::string(dtype_name(dtype)) +
              ", expected F32, F16 or BF16");
      return;
    }
    r.type = *quant_type_of(dtype);
    r.text = "dense " + std::string(dtype_name(dtype));
    (void)b;
  }

  void bind_vector(Binding& b) {
    const std::string name = stored_name(b.spec.name);
    if (const StoredTensor* t = need(name, b.spec.shape, "")) {
      b.parts.push_back(part(PartRole::kWeight, *t));
      dense(b, b.repr, t->entry.dtype, name);
    }
  }

  void ask(Representation& r, Capability c) {
    r.asked = c;
    r.answer = fmt_.has(c);
  }

  void bind_attn_res(Binding& b) {
    ask(b.repr, Capability::kFoldedAttnResScores);
    const std::int64_t H = b.spec.shape[0];
    if (b.repr.answer) {
      const std::string name = stored_name(b.spec.name);
      if (const StoredTensor* t = need(name, {H}, "")) {
        b.parts.push_back(part(PartRole::kScore, *t));
        dense(b, b.repr, t->entry.dtype, name);
        b.repr.text = "score stored folded (" + std::string(dtype_name(t->entry.dtype)) + ")";
      }
      return;
    }
    const std::string norm = ck_.name_prefix() + stored_names::attn_res_norm(b.spec.name);
    const std::string proj = ck_.name_prefix() + stored_names::attn_res_proj(b.spec.name);
    const StoredTensor* n = need(norm, {H}, "");
    const StoredTensor* p = need(proj, {1, H}, "");
    if (!n || !p) return;
    b.parts.push_back(part(PartRole::kScoreNorm, *n));
    b.parts.push_back(part(PartRole::kScoreProj, *p));
    dense(b, b.repr, n->entry.dtype, norm);
    dense(b, b.repr, p->entry.dtype, proj);
    b.repr.type = quant::Type::kF32;
    b.repr.text = "score = norm x proj, folded at load";
  }

  void bind_decay(Binding& b) {
    ask(b.repr, Capability::kFoldedKdaDecay);
    const std::int64_t heads = b.spec.shape[0];
    if (b.repr.answer) {
      const std::string name = stored_name(b.spec.name);
      if (const StoredTensor* t = need(name, {heads}, "")) {
        b.parts.push_back(part(PartRole::kSsmA, *t));
        dense(b, b.repr, t->entry.dtype, name);
        b.repr.type = quant::Type::kF32;
        b.repr.text = "exp(A_log) = -ssm_a";
      }
      return;
    }
    const std::string name = ck_.name_prefix() + stored_names::kda_a_log(b.spec.name);
    const StoredTensor* t = ck_.find(name);
    if (!t) {
      problem("missing tensor '" + name + "' for " + b.spec.name +
              ", expected F32 [>= " + std::to_string(heads) + "]");
      return;
    }
    claim(*t);
    if (t->entry.shape.size() != 1 || t->entry.shape[0] < heads) {
      problem("tensor '" + name + "' has shape " + dims(t->entry.shape) +
              ", expected [>= " + std::to_string(heads) + "] (one value per KDA head)");
      return;
    }
    StoredPart p = part(PartRole::kALog, *t);
    b.parts.push_back(p);
    dense(b, b.repr, t->entry.dtype, name);
    b.repr.type = quant::Type::kF32;
    b.repr.text = "exp(A_log[:" + std::to_string(heads) + "])";
  }

  // A matrix stored as the container declares it: ggml types in GGUF, ModelSlim schemes with
  // their side tensors, dense floats otherwise.
  void bind_linear(Binding& b, const std::string& name, const std::vector<std::int64_t>& shape,
                   Representation& r) {
    if (fmt_.has(Capability::kGgmlBlockLinears)) {
      ask(r, Capability::kGgmlBlockLinears);
      const StoredTensor* t = need(name, shape, "");
      if (!t) return;
      const auto q = quant_type_of(t->entry.dtype);
      if (!q) {
        problem("tensor '" + name + "' is " + std::string(dtype_name(t->entry.dtype)) +
                ", expected a float or ggml block type");
        return;
      }
      b.parts.push_back(part(PartRole::kWeight, *t));
      r.type = *q;
      r.text = std::string(dtype_name(t->entry.dtype)) + " (ggml)";
      return;
    }
    if (fmt_.has(Capability::kModelSlimQuantization)) {
      ask(r, Capability::kModelSlimQuantization);
      bind_modelslim(b, name, shape, r, std::nullopt);
      return;
    }
    const StoredTensor* t = need(name, shape, "");
    if (!t) return;
    b.parts.push_back(part(PartRole::kWeight, *t));
    dense(b, r, t->entry.dtype, name);
  }

  // ModelSlim: the scheme in quant_model_description.json decides the stored tensors.
  // `expert`: for per-expert tensors, adds one name per expert to existing parts.
  void bind_modelslim(Binding& b, const std::string& name, const std::vector<std::int64_t>& shape,
                      Representation& r, std::optional<int> expert) {
    const ModelSlimDescription& d = *ck_.modelslim();
    const auto found = ck_.scheme_of(name);
    if (!found) {
      problem("quant_model_description.json has no scheme for '" + name + "'");
      return;
    }
    const ModelSlimScheme code = *found;
    const std::string scheme(scheme_name(code));  // for messages
    const bool is_float_scheme = code == ModelSlimScheme::kFloat;
    const bool is_int4 = code == ModelSlimScheme::kW4A8Dynamic;
    const std::int64_t N = shape[0], K = shape[1];
    std::vector<std::pair<StoredPart, bool>> wanted;  // part, and whether it must exist
    auto want = [&](PartRole role, const std::string& tensor, DType expected_dtype_hint,
                    std::vector<std::int64_t> s, std::int64_t row_div, std::int64_t col_div,
                    bool whole, bool required) {
      StoredPart p;
      p.role = role;
      p.tensors = {tensor};
      p.dtype = expected_dtype_hint;
      p.shape = std::move(s);
      p.row_div = row_div;
      p.col_div = col_div;
      p.col_whole = whole;
      wanted.emplace_back(std::move(p), required);
    };
    if (is_float_scheme) {
      want(PartRole::kWeight, name, DType::kBF16, {N, K}, 1, 1, false, true);
    } else if (!is_int4) {  // W8A8, W8A8_DYNAMIC
      want(PartRole::kWeight, name, DType::kI8, {N, K}, 1, 1, false, true);
      want(PartRole::kScale, stored_names::modelslim(name, stored_names::kModelSlimScale),
           DType::kF32, {N, 1}, 1, 1, true, true);
      want(PartRole::kOffset, stored_names::modelslim(name, stored_names::kModelSlimOffset),
           DType::kF32, {N, 1}, 1, 1, true, false);
    } else {                                          // W4A8_DYNAMIC
      const bool packed_rows = d.version == "1.0.0";  // two int4 per byte along the output dim
      if (packed_rows && N % 2 != 0) {
        problem("'" + name + "' has " + std::to_string(N) +
                " output rows; W4A8 version 1.0.0 packs them in pairs");
        return;
      }
      want(PartRole::kWeight, name, DType::kI8, {packed_rows ? N / 2 : N, K}, packed_rows ? 2 : 1,
           1, false, true);
      want(PartRole::kScale, stored_names::modelslim(name, stored_names::kModelSlimScale),
           DType::kF32, {N, 1}, 1, 1, true, true);
      want(PartRole::kOffset, stored_names::modelslim(name, stored_names::kModelSlimOffset),
           DType::kF32, {N, 1}, 1, 1, true, false);
      if (d.group_size > 0) {
        if (K % d.group_size != 0) {
          problem("'" + name + "' has " + std::to_string(K) +
                  " columns, not a multiple of group_size " + std::to_string(d.group_size));
          return;
        }
        want(PartRole::kGroupScale,
             stored_names::modelslim(name, stored_names::kModelSlimGroupScale), DType::kF32,
             {N, K / d.group_size}, 1, d.group_size, false, true);
        want(PartRole::kGroupOffset,
             stored_names::modelslim(name, stored_names::kModelSlimGroupOffset), DType::kF32,
             {N, K / d.group_size}, 1, d.group_size, false, false);
      }
    }
    for (auto& [p, required] : wanted) {
      const std::string& tensor = p.tensors.front();
      const StoredTensor* t = ck_.find(tensor);
      if (!t) {
        if (required) {
          problem("missing tensor '" + tensor + "' for " + current_->name + " (scheme " + scheme +
                  "), expected " + dims(p.shape));
        }
        continue;
      }
      claim(*t);
      if (t->entry.shape != p.shape) {
        problem("tensor '" + tensor + "' has shape " + dims(t->entry.shape) + ", expected " +
                dims(p.shape) + " for scheme " + scheme + " of quant_model_description.json");
        continue;
      }
      const DType dt = t->entry.dtype;
      const bool weight_int = p.role == PartRole::kWeight && !is_float_scheme;
      if (weight_int ? dt != DType::kI8 : !is_float(dt)) {
        problem("tensor '" + tensor + "' is " + std::string(dtype_name(dt)) +
                ", but quant_model_description.json says " + scheme + " (expected " +
                (weight_int ? "I8" : "F32, F16 or BF16") + ")");
        continue;
      }
      p.dtype = dt;
      p.stored = {t};
      if (expert) {
        auto it = std::find_if(b.parts.begin(), b.parts.end(),
                               [role = p.role](const StoredPart& q) { return q.role == role; });
        if (it != b.parts.end()) {
          it->tensors.push_back(tensor);
          it->stored.push_back(t);
          continue;
        }
      }
      b.parts.push_back(p);
    }
    if (is_float_scheme) {
      if (!b.parts.empty()) dense(b, r, b.parts.front().dtype, name);
    } else {
      r.type = is_int4 ? quant::Type::kModelSlimInt4 : quant::Type::kModelSlimInt8;
      r.text = "ModelSlim " + scheme +
               (is_int4 && d.group_size > 0 ? " group " + std::to_string(d.group_size)
                                            : std::string(""));
    }
  }

  void bind_kv_b(Binding& b) {
    ask(b.repr, Capability::kSplitGgufKvB);
    const ModelConfig& c = ck_.config();
    const std::int64_t H = c.num_attention_heads, L = c.kv_lora_rank, nope = c.qk_nope_head_dim,
                       v = c.v_head_dim;
    if (b.repr.answer) {
      // llama.cpp's split: K stays Q4_0, V stays Q2_K, and they must remain separate.
      const int layer = b.spec.layer;
      const StoredTensor* k =
          need(stored_names::gguf_k_b(layer), {H, L, nope},
               " (split_gguf_kv_b is true for format " + std::string(fmt_.name()) + ")");
      const StoredTensor* vb =
          need(stored_names::gguf_v_b(layer), {H, v, L},
               " (split_gguf_kv_b is true for format " + std::string(fmt_.name()) + ")");
      if (const StoredTensor* dense_kv_b = ck_.find(stored_names::gguf_kv_b(layer))) {
        claim(*dense_kv_b);
        problem("tensor '" + dense_kv_b->entry.name +
                "' is stored although capability split_gguf_kv_b selects attn_k_b + attn_v_b");
      }
      if (!k || !vb) return;
      if (k->entry.dtype != DType::kQ4_0) {
        problem("capability split_gguf_kv_b: MLA K projection '" + k->entry.name +
                "' must remain GGUF Q4_0, got " + std::string(dtype_name(k->entry.dtype)));
      }
      if (vb->entry.dtype != DType::kQ2_K) {
        problem("capability split_gguf_kv_b: MLA V projection '" + vb->entry.name +
                "' must remain GGUF Q2_K, got " + std::string(dtype_name(vb->entry.dtype)));
      }
      StoredPart kp = part(PartRole::kSplitK, *k);
      kp.row_div = nope + v;  // logical kv_b rows of one head map to one stored head
      StoredPart vp = part(PartRole::kSplitV, *vb);
      vp.row_div = nope + v;
      b.parts.push_back(kp);
      b.parts.push_back(vp);
      b.repr.type = quant::Type::kQ4_0;
      b.repr.text = "split K Q4_0 " + dims(k->entry.shape) + " + V Q2_K " + dims(vb->entry.shape);
      return;
    }
    // Dense kv_b_proj: one [H*(nope+v), kv_lora] tensor, also in formats that quantize other
    // matrices (ModelSlim keeps it FLOAT).
    const std::string name = stored_name(b.spec.name);
    const std::string why = " (split_gguf_kv_b is false for format " + std::string(fmt_.name()) +
                            ", so kv_b_proj must be one dense tensor)";
    const StoredTensor* t = need(name, b.spec.shape, why);
    if (!t) return;
    if (fmt_.has(Capability::kModelSlimQuantization)) {
      const auto scheme = ck_.scheme_of(*t);
      if (scheme && *scheme != ModelSlimScheme::kFloat) {
        problem("quant_model_description.json marks '" + name + "' as " +
                std::string(scheme_name(*scheme)) +
                "; Kimi-K3's ModelSlim kv_b_proj must be a dense FLOAT tensor");
      }
    }
    b.parts.push_back(part(PartRole::kWeight, *t));
    dense(b, b.repr, t->entry.dtype, name);
    b.repr.text = "dense kv_b_proj " + std::string(dtype_name(t->entry.dtype));
  }

  void bind_latent(Binding& b) {
    Representation outer;
    ask(outer, Capability::kQuantizedLatentProjections);
    const std::string name = stored_name(b.spec.name);
    if (outer.answer) {
      bind_linear(b, name, b.spec.shape, b.repr);
    } else {
      const StoredTensor* t = need(name, b.spec.shape, "");
      if (!t) return;
      b.parts.push_back(part(PartRole::kWeight, *t));
      if (!is_float(t->entry.dtype)) {
        problem("capability quantized_latent_projections is false for format " +
                std::string(fmt_.name()) + ": '" + name + "' must be dense F32, F16 or BF16, got " +
                std::string(dtype_name(t->entry.dtype)));
        return;
      }
      dense(b, b.repr, t->entry.dtype, name);
    }
    b.repr.text += outer.answer ? " (quantized_latent_projections)" : "";
    b.repr.asked = outer.asked;
    b.repr.answer = outer.answer;
  }

  void bind_experts(Binding& b) {
    const std::int64_t E = b.spec.shape[0], out = b.spec.shape[1], in = b.spec.shape[2];
    const std::string which = b.spec.name.substr(b.spec.name.size() - 2);  // w1, w2, w3
    auto expert_stem = [&](std::int64_t e) {
      return stored_names::routed_expert(ck_.name_prefix(), b.spec.layer, e, which);
    };
    if (fmt_.has(Capability::kFp4RoutedExperts)) {
      ask(b.repr, Capability::kFp4RoutedExperts);
      if (in % 32 != 0) {
        problem(b.spec.name + ": " + std::to_string(in) +
                " input columns are not a multiple of the MXFP4 group of 32");
        return;
      }
      StoredPart packed{PartRole::kPacked, {}, DType::kU8, {out, in / 2}, 1, 2, false, {}};
      StoredPart scale{PartRole::kE8m0, {}, DType::kU8, {out, in / 32}, 1, 32, false, {}};
      for (std::int64_t e = 0; e < E; ++e) {
        const std::string stem = expert_stem(e);
        for (StoredPart* p : {&packed, &scale}) {
          const std::string name =
              p == &packed ? stored_names::mxfp4_packed(stem) : stored_names::mxfp4_scale(stem);
          const StoredTensor* t = need(name, p->shape, "");
          if (!t) continue;
          if (t->entry.dtype != DType::kU8) {
            problem("capability fp4_routed_experts: '" + name +
                    "' must be U8 (compressed-tensors MXFP4), got " +
                    std::string(dtype_name(t->entry.dtype)));
          }
          p->tensors.push_back(name);
          p->stored.push_back(t);
        }
      }
      b.parts = {packed, scale};
      b.repr.type = quant::Type::kMXFP4Packed;
      b.repr.text = "MXFP4 (compressed-tensors weight_packed + weight_scale)";
      return;
    }
    if (fmt_.has(Capability::kGgmlBlockExperts)) {
      ask(b.repr, Capability::kGgmlBlockExperts);
      const std::string name = stored_name(b.spec.name);
      const StoredTensor* t = need(name, b.spec.shape, "");
      if (!t) return;
      const auto q = quant_type_of(t->entry.dtype);
      if (!q) {
        problem("tensor '" + name + "' is " + std::string(dtype_name(t->entry.dtype)) +
                ", expected a ggml block type (Q2_K, Q3_K, MXFP4, ...)");
        return;
      }
      b.parts.push_back(part(PartRole::kWeight, *t));
      b.repr.type = *q;
      b.repr.text = std::string(dtype_name(t->entry.dtype)) + " stacked (ggml)";
      return;
    }
    if (fmt_.has(Capability::kModelSlimQuantization)) {
      ask(b.repr, Capability::kModelSlimQuantization);
      for (std::int64_t e = 0; e < E; ++e)
        bind_modelslim(b, expert_stem(e) + ".weight", {out, in}, b.repr, e);
      for (const StoredPart& p : b.parts) {
        if (p.role != PartRole::kOffset && p.role != PartRole::kGroupOffset &&
            p.tensors.size() != static_cast<std::size_t>(E)) {
          problem(b.spec.name + ": part " + std::string(part_role_name(p.role)) + " found for " +
                  std::to_string(p.tensors.size()) + " of " + std::to_string(E) + " experts");
        }
      }
      return;
    }
    StoredPart dense_part{PartRole::kWeight, {}, DType::kBF16, {out, in}, 1, 1, false, {}};
    for (std::int64_t e = 0; e < E; ++e) {
      const std::string name = expert_stem(e) + ".weight";
      if (const StoredTensor* t = need(name, dense_part.shape, "")) {
        dense_part.dtype = t->entry.dtype;
        dense_part.tensors.push_back(name);
        dense_part.stored.push_back(t);
      }
    }
    b.parts = {dense_part};
    dense(b, b.repr, dense_part.dtype, b.spec.name);
  }

  // Per tensor ordinal: some parameter uses it. Another Binder may claim the same tensor at the
  // same time (a checkpoint that stores one tensor for two parameters), hence the atomic store.
  void claim(const StoredTensor& t) {
    std::atomic_ref<char>(claimed_[ck_.ordinal(t)]).store(1, std::memory_order_relaxed);
  }

  const Checkpoint& ck_;
  const Format& fmt_;
  std::vector<char>& claimed_;
  std::vector<std::string>& problems_;
  const ParamSpec* current_ = nullptr;
};

}  // namespace

namespace {

// quant_model_description.json and the tensors agree both ways: every entry names a stored
// tensor, and every weight a parameter uses has an entry (its scheme, FLOAT for norms). Names in
// order, so the report is the same whatever order the index keeps.
std::vector<std::string> description_problems(const Checkpoint& ck,
                                              const std::vector<char>& claimed) {
  std::vector<std::string> problems;
  for (const auto& [name, scheme] : ck.schemes_of_absent_tensors()) {
    problems.push_back("quant_model_description.json lists '" + name + "' (" +
                       std::string(scheme_name(scheme)) + "), which no shard holds");
  }
  for (const StoredTensor& t : ck.tensors()) {
    // Unclaimed tensors are reported as unexpected already.
    const std::string& name = t.entry.name;
    if (name.ends_with(".weight") && claimed[ck.ordinal(t)] && !ck.scheme_of(t)) {
      problems.push_back("tensor '" + name + "' in " + ck.files()[t.file] +
                         " has no entry in quant_model_description.json");
    }
  }
  std::sort(problems.begin(), problems.end());
  return problems;
}

}  // namespace

BindResult bind_parameters(const Checkpoint& checkpoint, const std::vector<ParamSpec>& specs) {
  BindResult out;
  const Format& fmt = checkpoint.format();
  // Parameters bind independently: spread them over the node's cores (the planning rank works
  // alone, common/fan_out.h), each keeping its own problems so the report keeps spec order.
  std::vector<char> claimed(checkpoint.tensors().size(), 0);
  std::vector<std::vector<std::string>> problems(specs.size());
  out.bindings.resize(specs.size());
  fan_out(specs.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i)
      out.bindings[i] = Binder(checkpoint, claimed, problems[i]).bind(specs[i]);
  });
  for (auto& p : problems) {
    for (std::string& text : p) out.problems.push_back(std::move(text));
  }
  if (fmt.has(Capability::kModelSlimQuantization)) {
    for (const std::string& p : description_problems(checkpoint, claimed))
      out.problems.push_back(context_of(fmt) + p);
  }
  // Every stored tensor of the language model must feed some parameter; reported in name
  // order, whatever order the index keeps.
  std::vector<const StoredTensor*> unclaimed;
  for (const StoredTensor& t : checkpoint.tensors()) {
    if (!claimed[checkpoint.ordinal(t)]) unclaimed.push_back(&t);
  }
  std::sort(unclaimed.begin(), unclaimed.end(),
            [](const auto* a, const auto* b) { return a->entry.name < b->entry.name; });
  const bool draft = fmt.has(Capability::kDraftModel);
  for (const StoredTensor* t : unclaimed) {
    const std::string& name = t->entry.name;
    if (checkpoint.holds_model_tensor(name)) {
      out.problems.push_back(context_of(fmt) + "unexpected tensor '" + name + "' (" +
                             std::string(dtype_name(t->entry.dtype)) + " " + dims(t->entry.shape) +
                             ") in " + checkpoint.files()[t->file] + ": no " +
                             (draft ? "DSpark drafter" : "Kimi-K3") +
                             " parameter of this config is stored under that name");
    } else {
      out.ignored.push_back(name);
    }
  }
  return out;
}

}  // namespace k3::model
