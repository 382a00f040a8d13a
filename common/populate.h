// PopulateWritable: the pages of a shared writable mapping made resident
// before anything relies on them, by several threads. UnmapInPieces: a
// large mapping dropped without holding up the process's other threads.
//
// A fresh tmpfs file (a capture file, a snapshot file, the application's
// pinned memory) has no pages: each first store allocates one, and
// registering the mapping for the device (cudaHostRegister) faults the
// whole range on one thread first. Measured on the H200's host (256 MiB):
// posix_fallocate 48 ms + registering 89 ms; the same pages faulted by 8
// threads 58 ms, then registered in 10-13 ms (docs/performance.md).
//
// MADV_POPULATE_WRITE (Linux 5.14) faults the pages in writable without
// changing their contents, and reports a page it cannot have (a full
// tmpfs, a range past the end of the file) as an error instead of the
// SIGBUS a later store would raise.
//
//   if (absl::Status s = PopulateWritable(map, size); absl::IsUnimplemented(s)) {
//     ... the kernel lacks it: posix_fallocate as before ...
//   } else if (!s.ok()) { ... no memory: refuse the file ... }
#ifndef REVENANT_COMMON_POPULATE_H_
#define REVENANT_COMMON_POPULATE_H_

#include <cstddef>

#include "absl/status/status.h"

namespace revenant {

// Threads PopulateWritable uses for `size` bytes when not told: one per
// 32 MiB, at most 8 and at most the machine's hardware threads.
int PopulateThreads(size_t size);

// Faults in every page of [addr, addr + size) writable (addr page-aligned,
// the range within one shared or private writable mapping), split among
// `threads` threads (0: PopulateThreads(size)). Ok; Unimplemented when the
// kernel has no MADV_POPULATE_WRITE (nothing was done); ResourceExhausted
// when some page could not be had (nothing is rolled back: the pages made
// stay with the file).
absl::Status PopulateWritable(void* addr, size_t size, int threads = 0);

// Unmaps [addr, addr + size) (addr page-aligned; one shared mapping or
// several) after dropping its pages from it in pieces of kUnmapPieceBytes
// (MADV_DONTNEED: a shared file's pages stay in the file). One munmap of a
// large resident mapping holds the process's memory map while it drops
// every page-table entry, and another thread's mmap, munmap or mprotect
// (the agent's executor growing its journal window, a large free) waits
// for all of it: ~60 ms for 684 MiB on a 2-core machine, against ~1 ms in
// pieces (bench/map_piece_bench.cc). Freeing the pages, where this was the
// file's last reference, comes after, without the memory map held.
// Populating is not so: MADV_POPULATE_WRITE leaves the other thread's
// mmap waiting 2-6 ms whole or in pieces alike.
inline constexpr size_t kUnmapPieceBytes = size_t{16} << 20;
void UnmapInPieces(void* addr, size_t size);

}  // namespace revenant

#endif  // REVENANT_COMMON_POPULATE_H_
