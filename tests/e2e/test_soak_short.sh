#!/usr/bin/env bash
# The soak (tests/e2e/soak.sh: 16 readers under random origin faults, zero wrong bytes, fds,
# threads and RSS stable) for 45 seconds, as part of the e2e suite. The long run is its own
# command: SOAK_SECONDS=300 tests/e2e/soak.sh
SOAK_SECONDS="${SOAK_SECONDS:-45}" E2E_NAME=test_soak_short exec bash "$(dirname "$0")/soak.sh"
