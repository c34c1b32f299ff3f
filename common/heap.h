// The process heap's policy for a job that computes in steps.
#pragma once

namespace k3 {

// Every engine step allocates its activations (megabytes at a large batch) and frees them at its
// end. glibc's defaults serve blocks above 128 KiB (rising with use up to 32 MiB) by mmap and
// return freed memory at the heap's top to the kernel, so each step paid page faults, zeroed
// pages and TLB flushes again: about a fifth of a batch-1 decode step on the synthetic
// hidden-2048 model. Kept in the heap, a freed block serves the next step's request. Call once,
// before the first allocation that matters.
void keep_freed_memory_in_heap();

}  // namespace k3
