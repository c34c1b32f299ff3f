// Binary records of the model's control-plane types (common/wire.h): what the planning rank
// sends the others (the config and each rank's load plan) and what header readers send it (the
// tensor entries of their files). Integers stay integers; nothing here is JSON.
#pragma once

#include "common/wire.h"
#include "model/config.h"
#include "model/load/load_plan.h"
#include "model/checkpoint/safetensors.h"

namespace k3::model {

void encode(WireWriter& out, const ModelConfig& config);
void decode(WireReader& in, ModelConfig& config);
void encode(WireWriter& out, const DSparkConfig& config);
void decode(WireReader& in, DSparkConfig& config);

void encode(WireWriter& out, const TensorEntry& tensor);
void decode(WireReader& in, TensorEntry& tensor);

void encode(WireWriter& out, const LoadPlan& plan);
void decode(WireReader& in, LoadPlan& plan);
// The parts of a plan.
void encode(WireWriter& out, const ParamSpec& spec);
void decode(WireReader& in, ParamSpec& spec);
void encode(WireWriter& out, const Run& run);
void decode(WireReader& in, Run& run);
void encode(WireWriter& out, const PartRead& read);
void decode(WireReader& in, PartRead& read);
void encode(WireWriter& out, const PlannedParam& param);
void decode(WireReader& in, PlannedParam& param);

// Round trips for the types above, as one call.
template <class T>
std::string to_wire(const T& value) {
  WireWriter out;
  encode(out, value);
  return out.take();
}
template <class T>
T from_wire(std::string_view bytes) {
  WireReader in(bytes);
  T value;
  decode(in, value);
  if (!in.done()) throw InternalError("a binary record from another rank has trailing bytes");
  return value;
}

}  // namespace k3::model
