// model::Bytes: the byte buffers that hold loaded weights.
//
// A rank's slice is hundreds of MiB to tens of GiB, read once straight into these buffers, so
// resize() must not zero memory that the read overwrites anyway. (Transparent huge pages were
// tried: with THP defrag on madvise they made load times swing from 0.12 to 0.8 s on a busy
// host through direct compaction, so large buffers stay on ordinary pages.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <span>
#include <vector>

namespace k3::model {

template <class T>
class UninitializedAllocator {
 public:
  using value_type = T;
  UninitializedAllocator() = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64}));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete (p, std::align_val_t{64}); }
  // Default-initialise: no zeroing of bytes that are about to be read into.
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  friend bool operator==(const UninitializedAllocator&, const UninitializedAllocator&) {
    return true;
  }
};

using Bytes = std::vector<std::uint8_t, UninitializedAllocator<std::uint8_t>>;

// A weight's bytes: owned (read or converted at load) or a read-only view into a mapped
// checkpoint file, kept alive by `keeper` (the mapping). Kernels only ever see the span.
class WeightBytes {
 public:
  WeightBytes() = default;
  WeightBytes(Bytes owned) : owned_(std::move(owned)) {}  // NOLINT: implicit on purpose
  WeightBytes(std::shared_ptr<const void> keeper, std::span<const std::uint8_t> view)
      : keeper_(std::move(keeper)), view_(view) {}

  std::span<const std::uint8_t> span() const {
    return keeper_ ? view_ : std::span<const std::uint8_t>(owned_);
  }
  operator std::span<const std::uint8_t>() const { return span(); }  // NOLINT
  const std::uint8_t* data() const { return span().data(); }
  std::size_t size() const { return span().size(); }
  bool empty() const { return size() == 0; }
  bool mapped() const { return keeper_ != nullptr; }  // a view into a FileMapping

 private:
  Bytes owned_;
  std::shared_ptr<const void> keeper_;
  std::span<const std::uint8_t> view_;
};

}  // namespace k3::model
