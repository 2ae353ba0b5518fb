#!/usr/bin/env bash
# Runs the whole test suite as CI does: set up, build with warnings as errors,
# then `swift test` (moto's server is started by the tests themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
swift build --build-tests -Xswiftc -warnings-as-errors
swift test --skip-build "$@"
