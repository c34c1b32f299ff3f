// model::PackedNames: many names in one buffer, each with a small number beside it. The index's
// weight_map (tensor -> shard) and a ModelSlim description (weight -> scheme) name every tensor
// of a checkpoint, 746,618 in the full release layout: one allocation per name would cost the
// planning rank seconds, and a hash map of them more.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace k3::model {

class PackedNames {
 public:
  void reserve(std::size_t names, std::size_t bytes) {
    entries_.reserve(names);
    bytes_.reserve(bytes);
  }
  void add(std::string_view name, std::uint32_t value) {
    entries_.push_back({bytes_.size(), name.size(), value});
    bytes_.append(name);
  }
  std::size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  std::string_view name(std::size_t i) const {
    return std::string_view(bytes_).substr(entries_[i].offset, entries_[i].size);
  }
  std::uint32_t value(std::size_t i) const { return entries_[i].value; }
  void set_value(std::size_t i, std::uint32_t value) { entries_[i].value = value; }
  void clear() {
    bytes_.clear();
    bytes_.shrink_to_fit();
    entries_.clear();
    entries_.shrink_to_fit();
  }

 private:
  struct Entry {
    std::size_t offset;
    std::size_t size;
    std::uint32_t value;
  };
  std::string bytes_;
  std::vector<Entry> entries_;
};

}  // namespace k3::model
