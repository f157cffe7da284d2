/* plugin.h's struct layout as the C compiler sees it (abi_layout.h). */
#include "abi_layout.h"

size_t specpipe_sdk_c_layout(size_t* out, size_t capacity) {
  size_t n = 0;
#define SPECPIPE_SDK_S(type) \
  if (n < capacity) out[n] = sizeof(type); \
  ++n;
#define SPECPIPE_SDK_F(type, field) \
  if (n < capacity) out[n] = offsetof(type, field); \
  ++n;
  SPECPIPE_SDK_ABI_LAYOUT(SPECPIPE_SDK_S, SPECPIPE_SDK_F)
#undef SPECPIPE_SDK_S
#undef SPECPIPE_SDK_F
  return n;
}
