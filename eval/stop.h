// eval::StopChecker: stop strings on the decoded completion, as SGLang applies them.
//
// SGLang checks after every generated token whether a stop string occurs in the decoded output
// (Req._check_str_based_finish), finishes the request when one does, and returns the output cut
// before the stop string (DetokenizerManager.trim_matched_stop: output[:output.find(matched)]).
// The token that completed the stop string was generated and counts in completion_tokens.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace k3::eval {

// few_shot_gsm8k.py's stop list. Some newer SGLang tests use "\n\nQuestion" instead of
// "Question", which the bare word inside a reasoning chain would otherwise trigger.
std::vector<std::string> sglang_stop_strings();

class StopChecker {
 public:
  // UsageError for an empty stop string (it would stop before the first token).
  explicit StopChecker(std::vector<std::string> stops = sglang_stop_strings());

  // `text` is the whole decoded completion so far; each call must extend the previous text
  // (bytes already seen never change; InternalError if it got shorter). Only the new bytes and
  // the (longest stop - 1) bytes before them are searched, so a stop string split across
  // tokens is found. Returns stopped().
  //
  // If several stop strings occur in the new bytes, the one that ends first wins, ties going to
  // the earlier one in the list. Fed one token at a time this is SGLang's result, except when a
  // single token completes two stop strings, where SGLang takes the earlier one in its list.
  bool update(std::string_view text);

  bool stopped() const { return stop_at_ != kNone; }
  // Bytes of the completion to keep: the offset where the stop string starts.
  std::size_t stop_position() const { return stop_at_; }
  const std::string& matched() const;  // the stop string found (InternalError if none)
  // `text` cut before the stop string, or all of it while not stopped.
  std::string_view output(std::string_view text) const {
    return stopped() ? text.substr(0, stop_at_) : text;
  }
  const std::vector<std::string>& stops() const { return stops_; }

  void reset();  // for the next request

 private:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::vector<std::string> stops_;
  std::size_t longest_ = 0;
  std::size_t seen_ = 0;
  std::size_t stop_at_ = kNone;
  std::size_t matched_ = kNone;
};

// One-shot form for a finished text: cut before the first stop string to complete.
std::string_view truncate_at_stop(std::string_view text, std::span<const std::string> stops);

}  // namespace k3::eval
