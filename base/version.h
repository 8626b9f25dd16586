// The project version: CMake's project(tierfs VERSION ...), e.g. "0.1.0". Used in the User-Agent
// of every S3 request ("tierfs/0.1.0") and wherever the program names its version.
#pragma once

#include <string_view>

namespace tierfs {

std::string_view Version();

}  // namespace tierfs
