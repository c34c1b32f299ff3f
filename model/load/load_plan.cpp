#include "model/load/load_plan.h"

#include <algorithm>
#include <set>

#include "common/error.h"

namespace k3::model {

namespace {

// Runs covering `lo`..`hi` (per stored dimension) of a row-major tensor at `base`.
std::vector<Run> runs_for_box(std::uint64_t base, DType dtype,
                              const std::vector<std::int64_t>& shape,
                              const std::vector<std::int64_t>& lo,
                              const std::vector<std::int64_t>& hi, const std::string& what,
                              std::vector<std::string>& problems) {
  const DTypeBlock blk = dtype_block(dtype);
  const std::size_t n = shape.size();
  const std::int64_t last = n ? shape[n - 1] : 1;
  const std::int64_t c0 = n ? lo[n - 1] : 0, c1 = n ? hi[n - 1] : 1;
  if (c0 % blk.elems != 0 || c1 % blk.elems != 0) {
    problems.push_back(what + ": columns [" + std::to_string(c0) + ", " + std::to_string(c1) +
                       ") of a " + std::string(dtype_name(dtype)) + " row do not fall on its " +
                       std::to_string(blk.elems) + "-element block boundaries");
    return {};
  }
  const std::uint64_t row_bytes = static_cast<std::uint64_t>(last / blk.elems) * blk.bytes;
  const std::uint64_t col_off = static_cast<std::uint64_t>(c0 / blk.elems) * blk.bytes;
  const std::uint64_t col_len = static_cast<std::uint64_t>((c1 - c0) / blk.elems) * blk.bytes;
  if (n <= 1) return {Run{base + col_off, col_len, col_len, 1}};
  // Strides in rows for dims 0..n-2.
  std::vector<std::uint64_t> row_stride(n - 1, 1);
  for (std::size_t d = n - 1; d-- > 1;)
    row_stride[d - 1] = row_stride[d] * static_cast<std::uint64_t>(shape[d]);
  // Find the innermost dim (of 0..n-2) that is not full; everything inside it is contiguous.
  const bool cols_full = c0 == 0 && c1 == last;
  std::vector<Run> runs;
  std::vector<std::int64_t> idx(lo.begin(), lo.end() - 1);
  const std::size_t inner = n - 2;
  for (;;) {
    std::uint64_t row = 0;
    for (std::size_t d = 0; d < inner; ++d)
      row += static_cast<std::uint64_t>(idx[d]) * row_stride[d];
    row += static_cast<std::uint64_t>(lo[inner]) * row_stride[inner];
    const auto rows = static_cast<std::uint64_t>(hi[inner] - lo[inner]);
    Run r;
    if (cols_full) {
      r = {base + row * row_bytes, rows * row_bytes, rows * row_bytes, 1};
    } else {
      r = {base + row * row_bytes + col_off, col_len, row_bytes, rows};
    }
    // Merge with the previous run when contiguous (full rows of consecutive outer indices).
    if (!runs.empty() && runs.back().count == 1 && r.count == 1 &&
        runs.back().offset + runs.back().length == r.offset) {
      runs.back().length += r.length;
      runs.back().stride = runs.back().length;
    } else {
      runs.push_back(r);
    }
    // Advance the outer odometer over dims 0..inner-1.
    std::size_t d = inner;
    while (d > 0) {
      --d;
      if (++idx[d] < hi[d]) break;
      idx[d] = lo[d];
      if (d == 0) return runs;
    }
    if (inner == 0) return runs;
  }
}

}  // namespace

LoadPlan make_load_plan(const Checkpoint& ck, const std::vector<Binding>& bindings,
                        const dist::Layout& layout, int rank) {
  LoadPlan plan;
  plan.rank = rank;
  std::vector<std::string> problems;
  std::set<std::size_t> files;
  const std::string who =
      "rank " + std::to_string(rank) + ", format " + std::string(ck.format().name()) + ": ";
  for (const Binding& b : bindings) {
    PlannedParam pp;
    pp.spec = b.spec;
    pp.repr = b.repr;
    try {
      pp.box = slice_for_rank(b.spec, layout, rank);
    } catch (const InputError& e) {
      problems.push_back(who + e.what());
      continue;
    }
    const bool experts = b.spec.split == SplitKind::kExperts;
    for (const StoredPart& part : b.parts) {
      const std::size_t nd = part.shape.size();
      // The stored box for one stored tensor (one expert's for per-expert parts).
      std::vector<std::int64_t> lo(nd, 0), hi = part.shape;
      const std::size_t lr = experts ? 1 : 0;          // logical row dim
      const std::size_t lc = pp.box.begin.size() - 1;  // logical col dim
      const bool same_rank_dims =
          nd == pp.box.begin.size() - (experts && part.per_expert() ? 1 : 0);
      if (part.role == PartRole::kSplitK || part.role == PartRole::kSplitV) {
        lo[0] = pp.box.begin[0] / part.row_div;
        hi[0] = pp.box.end[0] / part.row_div;
      } else if (same_rank_dims && nd >= 1) {
        const std::size_t sr = experts && !part.per_expert() ? 1 : 0;  // stored row dim
        if (nd >= 2 || pp.box.begin.size() == 1) {
          lo[sr] = pp.box.begin[lr] / part.row_div;
          hi[sr] = pp.box.end[lr] / part.row_div;
        }
        if (nd >= 2) {
          if (!part.col_whole) {
            lo[nd - 1] = pp.box.begin[lc] / part.col_div;
            hi[nd - 1] = pp.box.end[lc] / part.col_div;
          }
        }
        if (nd == 1 && pp.box.begin.size() == 1) {
          lo[0] = pp.box.begin[0];
          hi[0] = std::min<std::int64_t>(pp.box.end[0], part.shape[0]);
        }
      }
      // else: a replicated helper tensor of another rank ([1, H] projection): read it whole.
      auto add_read = [&](std::size_t which, const std::vector<std::int64_t>& l,
                          const std::vector<std::int64_t>& h) {
        const std::string& tensor = part.tensors[which];
        const StoredTensor* st = which < part.stored.size() ? part.stored[which] : ck.find(tensor);
        if (!st) {
          problems.push_back(who + "tensor '" + tensor + "' vanished from the index");
          return;
        }
        PartRead r;
        r.role = part.role;
        r.tensor = tensor;
        r.file = st->file;
        r.dtype = st->entry.dtype;
        for (std::size_t d = 0; d < l.size(); ++d) r.box_extent.push_back(h[d] - l[d]);
        r.runs = runs_for_box(st->entry.offset, st->entry.dtype, st->entry.shape, l, h,
                              who + "parameter " + b.spec.name + " (" + tensor + ")", problems);
        for (const Run& run : r.runs) r.bytes += run.bytes();
        pp.bytes += r.bytes;
        files.insert(st->file);
        pp.reads.push_back(std::move(r));
      };
      if (experts && part.per_expert()) {
        for (std::int64_t e = pp.box.begin[0]; e < pp.box.end[0]; ++e)
          add_read(static_cast<std::size_t>(e), lo, hi);
      } else if (experts) {
        lo[0] = pp.box.begin[0];
        hi[0] = pp.box.end[0];
        // Stacked [E, out, in]: rows are dim 1 and columns dim 2 of the stored tensor.
        lo[1] = pp.box.begin[1] / part.row_div;
        hi[1] = pp.box.end[1] / part.row_div;
        if (!part.col_whole) {
          lo[2] = pp.box.begin[2] / part.col_div;
          hi[2] = pp.box.end[2] / part.col_div;
        }
        add_read(0, lo, hi);
      } else {
        add_read(0, lo, hi);
      }
    }
    plan.bytes += pp.bytes;
    plan.params.push_back(std::move(pp));
  }
  if (!problems.empty()) {
    std::string text = std::to_string(problems.size()) + " problem(s) planning the load:";
    for (std::size_t i = 0; i < problems.size() && i < 20; ++i) text += "\n  " + problems[i];
    if (problems.size() > 20)
      text += "\n  ... and " + std::to_string(problems.size() - 20) + " more";
    throw InputError(text);
  }
  plan.files.assign(files.begin(), files.end());
  return plan;
}

}  // namespace k3::model
