// model::Bytes: the byte buffers that hold loaded weights.
//
// A rank's slice is hundreds of MiB to tens of GiB, read once straight into these buffers. Two
// things matter at that size: large buffers ask for transparent huge pages (one fault per 2 MiB
// instead of per 4 KiB), and resize() does not zero memory that the read overwrites anyway.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

namespace k3::model {

template <class T>
class LargePageAllocator {
 public:
  using value_type = T;
  LargePageAllocator() = default;
  template <class U>
  LargePageAllocator(const LargePageAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kHuge) return static_cast<T*>(::operator new(bytes));
    const std::size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, rounded);
    if (!p) throw std::bad_alloc();
    ::madvise(p, rounded, MADV_HUGEPAGE);  // advisory: ignored where THP is off
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n * sizeof(T) < kHuge) {
      ::operator delete(p);
    } else {
      std::free(p);
    }
  }
  // Default-initialise: no zeroing of bytes that are about to be read into.
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  friend bool operator==(const LargePageAllocator&, const LargePageAllocator&) { return true; }

 private:
  static constexpr std::size_t kHuge = std::size_t{2} << 20;
};

using Bytes = std::vector<std::uint8_t, LargePageAllocator<std::uint8_t>>;

}  // namespace k3::model
