#include "core/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

namespace specpipe {

void* allocate_huge_page_backed(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  // aligned_alloc wants a multiple of the alignment (glibc does not, C11 does): the
  // rounding is address space only, since the advice below stops at `bytes`.
  void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
  if (p && align == kHugePage) madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
  return p;
}

}  // namespace specpipe
