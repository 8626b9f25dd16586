// Status assertions for tests: ASSERT_OK / EXPECT_OK over a tierfs::Status or a Result<T>.
// Header-only; no state.
//
//   ASSERT_OK(store.Put(k, bytes));           // fatal, like ASSERT_TRUE
//   auto r = store.Get(k);
//   EXPECT_OK(r) << "key " << k;              // non-fatal; extra context streams as usual
//
// On failure the message names the expression and its status ("store.Get(k) is not OK:
// NotFound: ..."). The expression is evaluated once.
#pragma once

#include <gtest/gtest.h>

#include "base/result.h"
#include "base/status.h"

namespace tierfs::testing::internal {

// The predicate-formatter behind ASSERT_OK and EXPECT_OK.
template <typename T>
::testing::AssertionResult IsOk(const char* expr_text, const T& value) {
  const Status& status = ::tierfs::StatusOf(value);
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << expr_text << " is not OK: " << status.ToString();
}

}  // namespace tierfs::testing::internal

#define ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::tierfs::testing::internal::IsOk, expr)
#define EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::tierfs::testing::internal::IsOk, expr)
