// Eventually: waiting in a test for what another thread does. Header-only; no state.
#pragma once

#include <chrono>
#include <thread>

namespace tierfs::testing {

// How long Eventually waits by default: far above what any wait takes on an idle machine, so a
// loaded CI host does not fail a test that is right, yet bounded, so a wrong one fails.
inline constexpr std::chrono::milliseconds kEventuallyTimeout{10000};

// Calls `done` every `poll` until it returns true or `timeout` has passed (real time, steady
// clock); returns its last answer. `done` runs on the caller's thread and may act as well as look
// (e.g. advance a fake clock and retry a read). Callers either assert the result or assert the
// state it waited for right after, which names the values when it never came.
template <typename Pred>
bool Eventually(Pred done, std::chrono::milliseconds timeout = kEventuallyTimeout,
                std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(poll);
  }
  return true;
}

}  // namespace tierfs::testing
