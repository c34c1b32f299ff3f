// model::LoadPlan: the exact bytes one rank reads for its slice of every parameter, and the
// representation each parameter will have. Built from headers alone; printable by
// `k3ckpt plan` and executed by the loader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/layout.h"
#include "model/load/binding.h"

namespace k3::model {

// `count` blocks of `length` bytes, the i-th at `offset + i * stride` of one file.
struct Run {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t stride = 0;
  std::uint64_t count = 1;
  std::uint64_t bytes() const { return length * count; }
};

struct PartRead {
  PartRole role = PartRole::kWeight;
  std::string tensor;  // stored tensor name
  std::size_t file = 0;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> box_extent;  // stored elements read, per stored dimension
  std::vector<Run> runs;                 // in destination order
  std::uint64_t bytes = 0;
};

// Self-contained: a rank that receives its plan from the planning rank has no bindings.
struct PlannedParam {
  ParamSpec spec;
  Representation repr;  // as the binding chose it
  SliceBox box;         // logical slice this rank holds
  std::vector<PartRead> reads;
  std::uint64_t bytes = 0;
};

struct LoadPlan {
  int rank = 0;
  std::vector<PlannedParam> params;
  std::uint64_t bytes = 0;
  std::vector<std::size_t> files;  // shard indices this rank touches, ascending
};

// Throws k3::InputError listing every parameter the layout cannot split (divisibility, block
// boundaries of quantized columns), naming rank, format, parameter and sizes.
LoadPlan make_load_plan(const Checkpoint& checkpoint, const std::vector<Binding>& bindings,
                        const dist::Layout& layout, int rank);

}  // namespace k3::model
