#pragma once
/// Memory the CPU kernels stream through, offered to transparent huge pages.
#include <cstddef>

namespace specpipe {

/// Allocates `bytes` (> 0) aligned to 64 bytes, or to 2 MiB from 2 MiB up, and offers
/// the whole 2 MiB pages inside it to transparent huge pages (MADV_HUGEPAGE, honoured in
/// the kernel's "always" and "madvise" modes, ignored in "never"); a shorter tail stays
/// on ordinary pages, so nothing past `bytes` is ever backed. On 4 KiB pages a matrix
/// or a K/V pool streamed from memory costs a TLB miss every 4 KiB of each stream.
/// Contents are uninitialised; free with std::free. Returns nullptr when out of memory.
void* allocate_huge_page_backed(size_t bytes);

}  // namespace specpipe
