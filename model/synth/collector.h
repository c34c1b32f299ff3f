// The tensors of one synthetic checkpoint as a format's writer stores them, collected in the
// definition's order, then assigned to shards and written. Shared by every format's writer.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/checkpoint/dtype.h"
#include "model/synth/mutants.h"
#include "model/synth/synth.h"
#include "quant/quantize.h"

namespace k3::model::synth {

// One stored tensor: its name, encoding, shape and bytes (empty when header-only).
struct Tensor {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> data;
};

std::vector<std::uint8_t> as_bytes_f32(const std::vector<float>& v);
std::int64_t numel(const std::vector<std::int64_t>& shape);

// Draws the logical values (synth_values) and collects the stored tensors. Header-only: no value
// is drawn and no byte is kept, only names, dtypes and shapes.
class Collector {
 public:
  Collector(const SynthOptions& options, const SynthStructure& structure,
            MutationEffect mutation = {})
      : options_(options), structure_(structure), mutation_(std::move(mutation)) {}

  const SynthOptions& options() const { return options_; }
  bool header_only() const { return options_.header_only; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  // The mutant planted in the values and encodings collected (SynthOptions::mutant).
  const MutationEffect& mutation() const { return mutation_; }

  // The logical values of `logical` (elements [first, first + count), all when count < 0), with
  // SynthOptions::router_margin applied to a whole router bias and the mutant's change. Empty
  // when header-only.
  std::vector<float> values(const std::string& logical, const SynthRole& role,
                            const std::vector<std::int64_t>& shape, std::size_t first = 0,
                            std::int64_t count = -1) const;
  // `values` rows of shape.back() columns quantized to `type`.
  quant::QuantizedMatrix quantized(quant::Type type, const std::vector<float>& values,
                                   const std::vector<std::int64_t>& shape) const;

  // A tensor encoded from its values: F32, BF16, or the quant::Type of a block dtype.
  void dense(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape,
             const std::vector<float>& values);
  // A tensor whose bytes the writer encoded itself.
  void raw(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape,
           std::vector<std::uint8_t> data);

 private:
  const SynthOptions& options_;
  SynthStructure structure_;
  MutationEffect mutation_;
  std::vector<Tensor> tensors_;
};

// Shard assignment: consecutive tensors, balanced by bytes, no shard left empty.
std::vector<int> assign_shards(const std::vector<Tensor>& tensors, int shards);

// The summary's tensor count and bytes (files stay 0).
SynthSummary tally(const std::vector<Tensor>& tensors);

// Writes `tensors` into options.shards safetensors shards and their index
// (model-0000N-of-0000M.safetensors, model.safetensors.index.json).
SynthSummary write_safetensors(const SynthOptions& options, const std::vector<Tensor>& tensors);

}  // namespace k3::model::synth
