// Helpers shared by the metastore tests: status assertions, and the shared TempDir.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "base/status.h"
#include "tests/testing/temp_dir.h"

#define MS_ASSERT_OK(expr)                                          \
  do {                                                              \
    const ::tierfs::Status _ms_st = (expr);                         \
    ASSERT_TRUE(_ms_st.ok()) << #expr << ": " << _ms_st.ToString(); \
  } while (0)
#define MS_EXPECT_OK(expr)                                          \
  do {                                                              \
    const ::tierfs::Status _ms_st = (expr);                         \
    EXPECT_TRUE(_ms_st.ok()) << #expr << ": " << _ms_st.ToString(); \
  } while (0)
