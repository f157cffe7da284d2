#pragma once
/// Whether this test binary runs under AddressSanitizer (scripts/test.sh --sanitize) or
/// ThreadSanitizer (scripts/test.sh --tsan).
/// Suites that repeat one kind of work many times (64 clients, 32 requests run solo and
/// then together, 8 requests per plugin fault) take a smaller slice there: the sanitizers
/// look for memory and undefined-behaviour errors, which a dozen concurrent requests reach
/// through the same code, while the plain pass runs the full counts and checks the outputs.
namespace specpipe::test {

constexpr bool under_sanitizer() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

}  // namespace specpipe::test
