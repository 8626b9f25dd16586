// What the sanitizer builds change for a test. Header-only; no state.
#pragma once

#include <gtest/gtest.h>

namespace tierfs::testing {

// True in the ASan/UBSan build (scripts/test.sh, TIERFS_SANITIZE=address).
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace tierfs::testing

// For a test that lowers RLIMIT_NOFILE in its own process until open() fails with EMFILE: the
// ASan/UBSan runtime needs descriptors of its own there (UBSan's vptr check probes memory through
// a pipe), and reports every virtual call made while none is left as a bad vptr. Such a test
// skips in that build; the Release and TSan builds run it.
#define TIERFS_SKIP_WHEN_SANITIZER_NEEDS_DESCRIPTORS()                                    \
  do {                                                                                    \
    if (::tierfs::testing::kAddressSanitizer) {                                           \
      GTEST_SKIP() << "the ASan/UBSan runtime needs descriptors of its own under EMFILE"; \
    }                                                                                     \
  } while (0)
