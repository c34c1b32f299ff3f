#include "eval/step_costs.h"

#include <chrono>
#include <cmath>
#include <vector>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/text_file.h"
#include "dist/collectives.h"

namespace k3::eval {

namespace {

using Calibration = model::engine::StepCostModel::Calibration;
using Points = std::vector<std::pair<std::size_t, double>>;

nlohmann::json points_json(const Points& points) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [x, seconds] : points) out.push_back({x, seconds});
  return out;
}

Points points_of(const nlohmann::json& file, const char* name, const std::string& what) {
  const auto it = file.find(name);
  if (it == file.end() || !it->is_array()) {
    throw InputError(what + ": no \"" + name + "\" array of [count, seconds] points");
  }
  Points points;
  for (const nlohmann::json& p : *it) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_unsigned() || !p[1].is_number() ||
        p[0].get<std::size_t>() == 0 || !std::isfinite(p[1].get<double>()) ||
        p[1].get<double>() < 0) {
      throw InputError(what + ": \"" + name + "\" holds " + p.dump() +
                       ", not a [count >= 1, seconds >= 0] point");
    }
    points.emplace_back(p[0].get<std::size_t>(), p[1].get<double>());
  }
  return points;
}

Calibration calibration_of(const nlohmann::json& file, const std::string& what) {
  Calibration c{points_of(file, "target", what), points_of(file, "draft", what),
                points_of(file, "projection", what)};
  if (c.target.empty() || c.draft.empty()) {
    throw InputError(what + ": no target step or drafter call measured");
  }
  return c;
}

std::string step_costs_json(const std::string& key, const Calibration& calibration) {
  // A key that is JSON text is kept as JSON, readable in the file.
  const nlohmann::json parsed = nlohmann::json::parse(key, nullptr, false);
  const nlohmann::json file = {
      {"key", parsed.is_discarded() ? nlohmann::json(key) : parsed},
      {"measured", fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", std::chrono::floor<std::chrono::seconds>(
                                                            std::chrono::system_clock::now()))},
      {"target", points_json(calibration.target)},
      {"draft", points_json(calibration.draft)},
      {"projection", points_json(calibration.projection)}};
  return file.dump(1) + "\n";
}

// The file's JSON when it holds `key`'s costs; null when another key's; InputError naming
// `what` for text that is not such a file.
nlohmann::json file_for_key(const std::string& text, const std::string& key,
                            const std::string& what) {
  nlohmann::json file = nlohmann::json::parse(text, nullptr, false);
  if (file.is_discarded() || !file.is_object()) throw InputError(what + ": not a JSON object");
  const auto k = file.find("key");
  if (k == file.end()) throw InputError(what + ": no \"key\"");
  if ((k->is_string() ? k->get<std::string>() : k->dump()) != key) return nullptr;
  calibration_of(file, what);  // the points are checked where the file is read
  return file;
}

}  // namespace

bool restore_step_costs(const dist::Groups& groups, const StepCostsCache& cache,
                        model::engine::StepCostModel& cost) {
  if (cache.file.empty() || cache.recalibrate) return false;
  // Rank 0 decides and sends the file's text: every rank restores the same points or none.
  std::string text;
  nlohmann::json file;
  std::error_code missing;
  if (groups.world().rank() == 0 && std::filesystem::exists(cache.file, missing)) {
    // Nothing may escape on rank 0 alone: the other ranks wait in the broadcast below.
    try {
      const std::string read = read_text_file(cache.file, "speculation's step costs");
      file = file_for_key(read, cache.key, cache.file.string());
      if (!file.is_null()) text = read;
    } catch (const std::exception& e) {
      spdlog::warn("speculation: {}; measuring the step costs again", e.what());
    }
  }
  dist::bcast(groups.world(), text, 0);
  if (text.empty()) return false;
  // The key is rank 0's to judge (another host's CPU may read differently).
  if (file.is_null()) file = nlohmann::json::parse(text);
  cost.restore(calibration_of(file, cache.file.string()));
  if (groups.world().rank() == 0) {
    const auto measured = file.value("measured", std::string("?"));
    spdlog::info("speculation: step costs for batches up to {} restored from {} (measured {})",
                 cost.calibrated_requests(), cache.file.string(), measured);
  }
  return true;
}

void store_step_costs(const StepCostsCache& cache, const model::engine::StepCostModel& cost) {
  if (cache.file.empty()) return;
  try {
    write_file_atomically(cache.file, step_costs_json(cache.key, cost.calibration()));
  } catch (const std::exception& e) {
    // The run does not depend on it: the next run measures again.
    spdlog::warn("speculation: step costs not kept: {}", e.what());
  }
}

}  // namespace k3::eval
