#include "eval/stop.h"

#include <algorithm>

#include "common/error.h"

namespace k3::eval {

std::vector<std::string> sglang_stop_strings() {
  return {"Question", "Assistant:", "<|separator|>"};
}

StopChecker::StopChecker(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (std::size_t i = 0; i < stops_.size(); ++i) {
    if (stops_[i].empty()) {
      throw UsageError("stop string " + std::to_string(i + 1) + " of " +
                       std::to_string(stops_.size()) + " is empty");
    }
    longest_ = std::max(longest_, stops_[i].size());
  }
}

bool StopChecker::update(std::string_view text) {
  if (stopped()) return true;
  if (text.size() < seen_) {
    throw InternalError("StopChecker: the completion shrank from " + std::to_string(seen_) +
                        " to " + std::to_string(text.size()) + " bytes; it may only grow");
  }
  // A stop string that ends in the new bytes starts at most longest_ - 1 bytes before them.
  const std::size_t from = seen_ >= longest_ ? seen_ - (longest_ - 1) : 0;
  std::size_t best_end = kNone;
  for (std::size_t i = 0; i < stops_.size(); ++i) {
    const std::size_t pos = text.find(stops_[i], from);
    if (pos == std::string_view::npos) continue;
    const std::size_t end = pos + stops_[i].size();
    if (best_end == kNone || end < best_end) {
      best_end = end;
      stop_at_ = pos;
      matched_ = i;
    }
  }
  seen_ = text.size();
  return stopped();
}

const std::string& StopChecker::matched() const {
  if (!stopped()) throw InternalError("StopChecker::matched() called before any stop string");
  return stops_[matched_];
}

void StopChecker::reset() {
  seen_ = 0;
  stop_at_ = kNone;
  matched_ = kNone;
}

std::string_view truncate_at_stop(std::string_view text, std::span<const std::string> stops) {
  StopChecker checker(std::vector<std::string>(stops.begin(), stops.end()));
  checker.update(text);
  return checker.output(text);
}

}  // namespace k3::eval
