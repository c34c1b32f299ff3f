// k3::Error, the one exception type family of k3eval.
//
// It lives in common/, the root of the folder dependency graph
// (common <- quant <- dist <- model <- eval <- apps): every folder may include it, and it
// depends on nothing but the standard library.
#pragma once

#include <stdexcept>
#include <string>

namespace k3 {

// Process exit codes, shared by every binary (see CONVENTIONS.md).
enum class ExitCode : int {
  kOk = 0,
  kRegression = 1,  // the job ran and its verdict is "regression"
  kInput = 2,       // usage error or bad input (option, file, layout)
  kInternal = 3,    // a bug or an unexpected failure
};

// Carries a complete, human-readable message (what, where, expected, actual)
// and the exit code that main() turns it into. Only main() catches it.
class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ExitCode exit_code() const noexcept { return code_; }

 private:
  ExitCode code_;
};

// A bad option or an impossible combination of options.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message) : Error(ExitCode::kInput, message) {}
};

// Untrusted input that is malformed: a file, a header, a dataset line.
class InputError : public Error {
 public:
  explicit InputError(const std::string& message) : Error(ExitCode::kInput, message) {}
};

// A broken invariant inside k3eval itself.
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& message) : Error(ExitCode::kInternal, message) {}
};

}  // namespace k3
