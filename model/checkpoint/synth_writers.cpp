#include "model/checkpoint/synth_writers.h"

#include <string>

#include "common/error.h"
#include "model/synth/writer.h"

namespace k3::model {

const synth::SynthWriter& synth_writer(FormatKind kind) {
  switch (kind) {
    case FormatKind::kHf:
      return synth::hf_writer();
    case FormatKind::kModelSlim:
      return synth::modelslim_writer();
    case FormatKind::kGguf:
      return synth::gguf_writer();
    case FormatKind::kDraft:
      return synth::draft_writer();
  }
  throw InternalError("no synthetic writer for format " + std::string(format_name(kind)));
}

}  // namespace k3::model
