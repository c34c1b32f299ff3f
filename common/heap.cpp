#include "common/heap.h"

#include <malloc.h>

namespace k3 {

void keep_freed_memory_in_heap() {
#if defined(__GLIBC__)
  // The largest mmap threshold glibc accepts (32 MiB on 64-bit hosts): blocks below it come
  // from the heap. Weights are mapped files, not heap blocks, so they are unaffected.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  // Freed memory at the heap's top stays up to 1 GiB, instead of being trimmed after every step.
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace k3
