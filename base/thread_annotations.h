// Clang thread-safety annotations (conventions C11); no-ops on other compilers.
// Build with clang and -Wthread-safety to check them (the test command does).
#pragma once

#if defined(__clang__)
#define TIERFS_TSA(x) __attribute__((x))
#else
#define TIERFS_TSA(x)
#endif

#define CAPABILITY(x) TIERFS_TSA(capability(x))
#define SCOPED_CAPABILITY TIERFS_TSA(scoped_lockable)
#define GUARDED_BY(x) TIERFS_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) TIERFS_TSA(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) TIERFS_TSA(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) TIERFS_TSA(acquired_after(__VA_ARGS__))
#define REQUIRES(...) TIERFS_TSA(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) TIERFS_TSA(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) TIERFS_TSA(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) TIERFS_TSA(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) TIERFS_TSA(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) TIERFS_TSA(release_shared_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) TIERFS_TSA(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) TIERFS_TSA(locks_excluded(__VA_ARGS__))
#define RETURN_CAPABILITY(x) TIERFS_TSA(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS TIERFS_TSA(no_thread_safety_analysis)
