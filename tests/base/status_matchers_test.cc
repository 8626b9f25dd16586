// ASSERT_OK / EXPECT_OK (tests/testing/status_matchers.h): they pass on OK, fail on an error with
// the expression and the status in the message, keep ASSERT fatal and EXPECT not, and evaluate
// their argument once.
#include "tests/testing/status_matchers.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <string>

#include "base/result.h"
#include "base/status.h"

namespace tierfs {
namespace {

Result<int> Seven() { return 7; }
Result<int> Missing() { return Status::NotFound("no such key 'k'"); }

TEST(StatusMatchersTest, PassOnOkStatusAndResult) {
  ASSERT_OK(Status::OK());
  EXPECT_OK(Status::OK());
  ASSERT_OK(Seven());
  const Result<int> r = Seven();
  EXPECT_OK(r) << "with a message";
}

TEST(StatusMatchersTest, ExpectOkReportsTheExpressionAndTheStatus) {
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(Missing()), "Missing() is not OK: NotFound: no such key 'k'");
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(Status::IOError("disk")) << "ctx 42", "ctx 42");
}

void AssertOkThenMark(const Status& s, bool* reached) {
  ASSERT_OK(s);
  *reached = true;
}

TEST(StatusMatchersTest, AssertOkIsFatal) {
  static bool reached = false;
  EXPECT_FATAL_FAILURE(AssertOkThenMark(Status::Unavailable("origin down"), &reached),
                       "s is not OK: Unavailable: origin down");
  EXPECT_FALSE(reached);
}

TEST(StatusMatchersTest, EvaluatesItsArgumentOnce) {
  int calls = 0;
  auto counted = [&] {
    ++calls;
    return Status::OK();
  };
  EXPECT_OK(counted());
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace tierfs
