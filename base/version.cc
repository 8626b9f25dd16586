#include "base/version.h"

// Defined for this file only by base/CMakeLists.txt from PROJECT_VERSION.
#ifndef TIERFS_PROJECT_VERSION
#error "TIERFS_PROJECT_VERSION must be defined (base/CMakeLists.txt)"
#endif

namespace tierfs {

std::string_view Version() { return TIERFS_PROJECT_VERSION; }

}  // namespace tierfs
