// Helpers shared by the metastore tests: the shared TempDir.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "base/status.h"
#include "tests/testing/temp_dir.h"
