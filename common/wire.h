// Binary records for what ranks send each other (tensor indexes, load plans): integers travel
// as fixed-width little-endian integers, strings and vectors with their length first. A reader
// that runs off its buffer throws InternalError: these bytes come from another rank of the same
// job, never from a file.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/error.h"

namespace k3 {

class WireWriter {
 public:
  template <class T>
  requires std::is_arithmetic_v<T> || std::is_enum_v<T>
  void put(T value) {
    const char* p = reinterpret_cast<const char*>(&value);
    bytes_.append(p, sizeof value);
  }
  void put(std::string_view text) {
    put(static_cast<std::uint64_t>(text.size()));
    bytes_.append(text);
  }
  void put(const std::string& text) { put(std::string_view(text)); }
  template <class T>
  void put(const std::vector<T>& items) {
    put(static_cast<std::uint64_t>(items.size()));
    if constexpr (std::is_arithmetic_v<T>) {
      bytes_.append(reinterpret_cast<const char*>(items.data()), items.size() * sizeof(T));
    } else {
      for (const T& item : items) put_item(item);
    }
  }
  template <class T>
  void put(const std::optional<T>& value) {
    put(static_cast<std::uint8_t>(value.has_value()));
    if (value) put_item(*value);
  }
  // Anything put() takes directly (numbers, enums, strings, vectors, optionals), else the
  // item's own encode().
  template <class T>
  void put_item(const T& item) {
    if constexpr (requires { this->put(item); }) {
      put(item);
    } else {
      encode(*this, item);
    }
  }

  const std::string& bytes() const { return bytes_; }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : bytes_(bytes) {}

  template <class T>
  requires std::is_arithmetic_v<T> || std::is_enum_v<T>
  void get(T& value) { std::memcpy(&value, take(sizeof value), sizeof value); }
  void get(std::string& text) {
    const std::size_t n = length(1);
    text.assign(take(n), n);
  }
  template <class T>
  void get(std::vector<T>& items) {
    if constexpr (std::is_arithmetic_v<T>) {
      const std::size_t n = length(sizeof(T));
      items.resize(n);
      if (n) std::memcpy(items.data(), take(n * sizeof(T)), n * sizeof(T));
    } else {
      const std::size_t n = length(1);
      items.resize(n);
      for (T& item : items) get_item(item);
    }
  }
  template <class T>
  void get(std::optional<T>& value) {
    std::uint8_t present = 0;
    get(present);
    if (!present) {
      value.reset();
      return;
    }
    value.emplace();
    get_item(*value);
  }
  template <class T>
  void get_item(T& item) {
    if constexpr (requires { this->get(item); }) {
      get(item);
    } else {
      decode(*this, item);
    }
  }
  // Bytes put() wrote as one string, viewed where they are (valid while the buffer lives): a
  // nested record that can be decoded later, or on another thread.
  std::string_view get_view() {
    const std::size_t n = length(1);
    return {take(n), n};
  }
  template <class T>
  T get() {
    T value{};
    get(value);
    return value;
  }

  bool done() const { return pos_ == bytes_.size(); }

 private:
  // A count of items of at least `min_item` bytes each, checked against what is left.
  std::size_t length(std::size_t min_item) {
    std::uint64_t n = 0;
    get(n);
    if (n > (bytes_.size() - pos_) / min_item) overrun();
    return static_cast<std::size_t>(n);
  }
  const char* take(std::size_t n) {
    if (n > bytes_.size() - pos_) overrun();
    const char* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  [[noreturn]] void overrun() const {
    throw InternalError("a binary record from another rank ends early (at byte " +
                        std::to_string(pos_) + " of " + std::to_string(bytes_.size()) + ")");
  }

  std::string_view bytes_;
  std::size_t pos_ = 0;
};

}  // namespace k3
