#include "model/load/loader.h"

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "common/error.h"
#include "model/checkpoint/file.h"
#include "quant/types.h"

namespace k3::model {

namespace {

using Clock = std::chrono::steady_clock;

// A float side tensor (norms, scales, biases: F32, F16 or BF16) decoded through quant's traits.
std::vector<float> to_floats(DType dtype, std::span<const std::uint8_t> bytes,
                             const std::string& what) {
  const std::optional<quant::Type> type = quant_type_of(dtype);
  const quant::TypeTraits* t = type ? &quant::traits(*type) : nullptr;
  if (t == nullptr || t->block_elems != 1 || t->to_float == nullptr) {
    throw InternalError(what + ": cannot read " + std::string(dtype_name(dtype)) + " as floats");
  }
  std::vector<float> out(bytes.size() / t->block_bytes);
  if (!out.empty()) t->to_float(bytes.data(), out.data(), out.size());
  return out;
}

Bytes float_bytes(const std::vector<float>& v) {
  Bytes out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Where one PartRead lands: reads of the same role (one per expert for per-expert parts) fill
// one destination buffer back to back, so matrices are read straight into their final place.
struct Destination {
  const PlannedParam* param;
  const PartRead* read;
  Bytes* buffer;  // null when the read is served by the file mapping
  std::uint64_t offset;
};

struct ParamBuffers {
  std::map<PartRole, Bytes> by_role;
  std::map<PartRole, WeightBytes> mapped;                 // roles read in place from a mapped shard
  std::map<PartRole, std::vector<WeightBytes>> segments;  // per-expert roles, in place
  std::map<PartRole, DType> dtype;
  std::map<PartRole, std::vector<std::int64_t>> extent;  // of the first read of the role
};

bool has(const ParamBuffers& b, PartRole role) {
  return b.by_role.count(role) != 0 || b.mapped.count(role) != 0 || b.segments.count(role) != 0;
}

// The bytes of a role: in place from the mapping, or the buffer it was read into.
WeightBytes take(ParamBuffers& b, PartRole role) {
  if (auto it = b.mapped.find(role); it != b.mapped.end()) return it->second;
  return WeightBytes(std::move(b.by_role.at(role)));
}

// Per-expert routed-expert tensors (hf, modelslim) stay in place, one segment per expert, when
// each expert's slice is one contiguous range (no MoE-TP column split).
bool segmentable(const PlannedParam& b, PartRole role, const std::vector<const PartRead*>& reads) {
  if (b.spec.family != ParamFamily::kRoutedExpert || reads.size() < 2) return false;
  if (role != PartRole::kWeight && role != PartRole::kPacked && role != PartRole::kE8m0)
    return false;
  for (const PartRead* r : reads) {
    if (r->runs.size() != 1 || !(r->runs[0].count == 1 || r->runs[0].stride == r->runs[0].length))
      return false;
  }
  return true;
}

// A role can stay in the mapped file when it is one contiguous range used as it is stored:
// a matrix (no conversion), read by a single run (no column slice, no per-expert gathering).
bool mappable(const PlannedParam& b, PartRole role, const std::vector<const PartRead*>& reads) {
  const ParamFamily f = b.spec.family;
  if (f == ParamFamily::kVector || f == ParamFamily::kAttnResScore || f == ParamFamily::kKdaDecay)
    return false;
  switch (role) {
    case PartRole::kWeight:
    case PartRole::kPacked:
    case PartRole::kE8m0:
    case PartRole::kSplitK:
    case PartRole::kSplitV:
      break;
    default:
      return false;
  }
  if (reads.size() != 1 || reads[0]->runs.size() != 1) return false;
  const Run& run = reads[0]->runs[0];
  return run.count == 1 || run.stride == run.length;
}

Weight materialize(const PlannedParam& pp, ParamBuffers& bufs) {
  const PlannedParam& b = pp;
  Weight w;
  w.name = b.spec.name;
  w.box = pp.box;
  w.shape = pp.box.extent();
  w.type = b.repr.type;
  auto floats = [&](PartRole role) {
    return to_floats(bufs.dtype.at(role), bufs.by_role.at(role), w.name);
  };
  switch (b.spec.family) {
    case ParamFamily::kVector:
      w.type = quant::Type::kF32;
      w.data = float_bytes(floats(PartRole::kWeight));
      break;
    case ParamFamily::kAttnResScore: {
      w.type = quant::Type::kF32;
      if (has(bufs, PartRole::kScore)) {
        w.data = float_bytes(floats(PartRole::kScore));
      } else {
        auto nv = floats(PartRole::kScoreNorm);
        const auto pv = floats(PartRole::kScoreProj);
        for (std::size_t i = 0; i < nv.size(); ++i) nv[i] *= pv[i];
        w.data = float_bytes(nv);
      }
      break;
    }
    case ParamFamily::kKdaDecay: {
      w.type = quant::Type::kF32;
      const bool folded = has(bufs, PartRole::kSsmA);
      auto v = floats(folded ? PartRole::kSsmA : PartRole::kALog);
      for (float& x : v) x = folded ? -x : std::exp(x);
      w.data = float_bytes(v);
      break;
    }
    case ParamFamily::kMlaKvB:
      if (has(bufs, PartRole::kSplitK)) {
        for (auto [role, slot] :
             {std::pair{PartRole::kSplitK, &w.k_b}, std::pair{PartRole::kSplitV, &w.v_b}}) {
          auto sub = std::make_unique<Weight>();
          sub->name = w.name + "." + std::string(part_role_name(role));
          sub->type = *quant_type_of(bufs.dtype.at(role));
          sub->shape = bufs.extent.at(role);
          sub->data = take(bufs, role);
          *slot = std::move(sub);
        }
        w.type = w.k_b->type;
        break;
      }
      [[fallthrough]];
    default: {
      // Matrices keep the bytes they were read into; only the small side arrays are converted.
      const PartRole main = has(bufs, PartRole::kWeight) ? PartRole::kWeight : PartRole::kPacked;
      if (main == PartRole::kWeight && bufs.dtype.at(main) != DType::kI8)
        w.type = *quant_type_of(bufs.dtype.at(main));
      if (auto it = bufs.segments.find(main); it != bufs.segments.end()) {
        w.expert_data = std::move(it->second);
        if (auto e8 = bufs.segments.find(PartRole::kE8m0); e8 != bufs.segments.end())
          w.expert_e8m0 = std::move(e8->second);
      } else {
        w.data = take(bufs, main);
        if (has(bufs, PartRole::kE8m0)) w.e8m0 = take(bufs, PartRole::kE8m0);
      }
      for (auto [role, dst] :
           {std::pair{PartRole::kScale, &w.scale}, std::pair{PartRole::kOffset, &w.offset},
            std::pair{PartRole::kGroupScale, &w.group_scale},
            std::pair{PartRole::kGroupOffset, &w.group_offset}}) {
        if (has(bufs, role)) *dst = floats(role);
      }
      if (!w.group_scale.empty()) {
        w.group_size =
            static_cast<std::size_t>(w.shape.back() / (w.group_scale.size() / w.scale.size()));
      }
      break;
    }
  }
  return w;
}

}  // namespace

LoadResult load(const Checkpoint& ck, const LoadPlan& plan, const ProgressFn& progress) {
  const auto t0 = Clock::now();
  std::vector<std::uint64_t> planned(ck.files().size(), 0);
  for (const PlannedParam& pp : plan.params) {
    for (const PartRead& r : pp.reads) planned[r.file] += r.bytes;
  }
  std::vector<std::optional<File>> files(ck.files().size());
  std::vector<std::shared_ptr<const FileMapping>> maps(ck.files().size());
  for (std::size_t f = 0; f < ck.files().size(); ++f) {
    if (!planned[f]) continue;  // only the shards this rank reads are opened
    files[f] = File::open_read(ck.files()[f]);
    maps[f] = FileMapping::map(*files[f]);
  }
  // Each role either stays in the mapped shard or gets one buffer at its final size.
  std::vector<ParamBuffers> buffers(plan.params.size());
  std::vector<Destination> dests;
  for (std::size_t p = 0; p < plan.params.size(); ++p) {
    const PlannedParam& pp = plan.params[p];
    std::map<PartRole, std::vector<const PartRead*>> by_role;
    for (const PartRead& r : pp.reads) by_role[r.role].push_back(&r);
    for (const auto& [role, reads] : by_role) {
      ParamBuffers& b = buffers[p];
      b.dtype.emplace(role, reads.front()->dtype);
      b.extent.emplace(role, reads.front()->box_extent);
      if (segmentable(pp, role, reads)) {
        for (const PartRead* r : reads) {
          b.segments[role].emplace_back(maps[r->file],
                                        maps[r->file]->bytes(r->runs[0].offset, r->bytes));
          dests.push_back({&pp, r, nullptr, 0});
        }
        continue;
      }
      if (mappable(pp, role, reads)) {
        const PartRead& r = *reads.front();
        b.mapped.emplace(role,
                         WeightBytes(maps[r.file], maps[r.file]->bytes(r.runs[0].offset, r.bytes)));
        dests.push_back({&pp, &r, nullptr, 0});
        continue;
      }
      std::uint64_t size = 0;
      for (const PartRead* r : reads) size += r->bytes;
      Bytes& buf = b.by_role[role];
      buf.resize(size);
      std::uint64_t at = 0;
      for (const PartRead* r : reads) {
        dests.push_back({&pp, r, &buf, at});
        at += r->bytes;
      }
    }
  }
  // Read in file and offset order so each shard streams sequentially.
  std::sort(dests.begin(), dests.end(), [](const Destination& a, const Destination& b) {
    const std::uint64_t ao = a.read->runs.empty() ? 0 : a.read->runs.front().offset;
    const std::uint64_t bo = b.read->runs.empty() ? 0 : b.read->runs.front().offset;
    return a.read->file != b.read->file ? a.read->file < b.read->file : ao < bo;
  });
  std::vector<std::atomic<std::uint64_t>> remaining(ck.files().size());
  std::size_t files_total = 0;
  for (std::size_t f = 0; f < planned.size(); ++f) {
    remaining[f] = planned[f];
    files_total += planned[f] ? 1 : 0;
  }
  std::atomic<std::size_t> files_done{0};
  std::atomic<std::uint64_t> bytes_done{0};
  std::mutex progress_mutex;
  oneapi::tbb::parallel_for(std::size_t{0}, dests.size(), [&](std::size_t k) {
    const Destination& d = dests[k];
    const PartRead& r = *d.read;
    if (d.buffer == nullptr) {
      maps[r.file]->populate(r.runs[0].offset, r.bytes);  // in place: fault the range in now
    } else {
      std::uint8_t* out = d.buffer->data() + d.offset;
      for (const Run& run : r.runs) {
        if (run.count == 1 || run.stride == run.length) {
          files[r.file]->read_exact(out, run.bytes(), run.offset);  // contiguous
          out += run.bytes();
          continue;
        }
        // Strided (a column slice): read the covering span in bounded windows, keep the columns.
        constexpr std::uint64_t kWindow = 8ull << 20;
        const std::uint64_t rows_per_window = std::max<std::uint64_t>(1, kWindow / run.stride);
        std::vector<std::uint8_t> window;
        for (std::uint64_t i = 0; i < run.count; i += rows_per_window) {
          const std::uint64_t rows = std::min(rows_per_window, run.count - i);
          const std::uint64_t span = (rows - 1) * run.stride + run.length;
          window.resize(span);
          files[r.file]->read_exact(window.data(), span, run.offset + i * run.stride);
          for (std::uint64_t j = 0; j < rows; ++j) {
            std::memcpy(out, window.data() + j * run.stride, run.length);
            out += run.length;
          }
        }
      }
    }
    bytes_done += r.bytes;
    if (remaining[r.file].fetch_sub(r.bytes) == r.bytes) {
      const std::size_t done = ++files_done;
      if (progress) {
        std::lock_guard lock(progress_mutex);
        progress({done, files_total, bytes_done.load(),
                  std::chrono::duration<double>(Clock::now() - t0).count()});
      }
    }
  });
  LoadResult result;
  result.stats.read_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  result.stats.bytes_read = bytes_done.load();
  result.stats.files = files_total;
  for (std::size_t p = 0; p < plan.params.size(); ++p) {
    result.weights.add(materialize(plan.params[p], buffers[p]));
    buffers[p] = {};
  }
  result.stats.total_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return result;
}

std::vector<std::string> audit(const Checkpoint& ck, const LoadPlan& plan,
                               const WeightStore& weights) {
  std::vector<std::string> problems;
  const std::string who =
      "rank " + std::to_string(plan.rank) + ", format " + std::string(ck.format().name());
  auto report = [&](const PlannedParam& b, const std::string& tensor, const std::string& expected,
                    const std::string& actual) {
    std::string cap = b.repr.asked ? std::string(capability_name(*b.repr.asked)) + "=" +
                                         (b.repr.answer ? "true" : "false")
                                   : "none";
    problems.push_back(who + ", capability " + cap + ", tensor " + tensor + ": expected " +
                       expected + ", got " + actual);
  };
  std::size_t seen = 0;
  for (const PlannedParam& pp : plan.params) {
    const PlannedParam& b = pp;
    if (!weights.has(b.spec.name)) {
      report(b, b.spec.name, "a loaded weight", "nothing (placeholder left unfilled)");
      continue;
    }
    ++seen;
    const Weight& w = weights.get(b.spec.name);
    const auto extent = pp.box.extent();
    if (w.shape != extent)
      report(b, w.name, "shape " + shape_string(extent), "shape " + shape_string(w.shape));
    const bool vector_like = b.spec.family == ParamFamily::kVector ||
                             b.spec.family == ParamFamily::kAttnResScore ||
                             b.spec.family == ParamFamily::kKdaDecay;
    const quant::Type want = vector_like ? quant::Type::kF32 : b.repr.type;
    if (w.type != want && !(b.spec.family == ParamFamily::kMlaKvB && w.split_kv())) {
      report(b, w.name, std::string(quant::name(want)), std::string(quant::name(w.type)));
    }
    if (b.spec.family == ParamFamily::kMlaKvB) {
      const bool split = ck.format().has(Capability::kSplitGgufKvB);
      if (split != w.split_kv()) {
        report(b, w.name, split ? "split K/V" : "dense kv_b_proj",
               w.split_kv() ? "split K/V" : "dense kv_b_proj");
      }
      if (w.split_kv()) {
        if (w.k_b->type != quant::Type::kQ4_0) {
          report(b, w.k_b->name, "MLA K projection in GGUF Q4_0",
                 std::string(quant::name(w.k_b->type)));
        }
        if (w.v_b->type != quant::Type::kQ2_K) {
          report(b, w.v_b->name, "MLA V projection in GGUF Q2_K",
                 std::string(quant::name(w.v_b->type)));
        }
        continue;
      }
      if (w.type != quant::Type::kF32 && w.type != quant::Type::kF16 &&
          w.type != quant::Type::kBF16) {
        report(b, w.name, "a dense floating-point kv_b_proj", std::string(quant::name(w.type)));
      }
    }
    try {
      if (b.spec.family == ParamFamily::kRoutedExpert) {
        for (std::size_t e = 0; e < static_cast<std::size_t>(w.shape[0]); ++e)
          quant::validate(w.expert(e));
      } else {
        quant::validate(w.view());
      }
    } catch (const Error& e) {
      report(b, w.name, "a consistent " + std::string(quant::name(w.type)) + " matrix", e.what());
    }
  }
  if (seen != weights.all().size()) {
    problems.push_back(who + ": " + std::to_string(weights.all().size() - seen) +
                       " weights loaded that the plan never asked for");
  }
  return problems;
}

}  // namespace k3::model
