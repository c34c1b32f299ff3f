// The synthetic writer of each format: the one place a FormatKind is mapped to the unit that
// writes its synthetic checkpoints (model/synth/<format>_writer.cpp).
#pragma once

#include "model/checkpoint/format.h"

namespace k3::model {

namespace synth {
class SynthWriter;
}

const synth::SynthWriter& synth_writer(FormatKind kind);

}  // namespace k3::model
