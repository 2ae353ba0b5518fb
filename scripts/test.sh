#!/usr/bin/env bash
# Runs the whole test suite as CI does: set up, build with warnings as errors (the
# library and its tests, then the Samples and Benchmarks packages), then `swift test`
# (moto's server is started by the tests themselves).
# Ends with one summary line, "N passed, N failed[, N skipped]".
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The AWS CLI may have gone to the per-user base (setup.sh); the interop tests run `aws`.
if user_base=$(python3 -m site --user-base 2>/dev/null); then export PATH="$PATH:$user_base/bin"; fi
swift build --build-tests -Xswiftc -warnings-as-errors
# The samples and benchmarks are packages of their own; building them here keeps them
# compiling against the library's public API.
swift build --package-path Samples -Xswiftc -warnings-as-errors
swift build --package-path Benchmarks -Xswiftc -warnings-as-errors
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
# All tests are XCTest; skipping the empty Swift Testing pass keeps the closing line meaningful.
swift test --skip-build --disable-swift-testing "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# Repeat what failed just above the summary line, where a reader of only the log's tail
# (a CI page) finds it.
failed_lines=$(grep -aE "(: error: |^Test Case '.*' failed \(|Fatal error)" "$log" | cut -c 1-400 | head -n 60 || true)
if [ "$status" -ne 0 ] && [ -n "$failed_lines" ]; then
    echo "test: what failed:"
    printf '%s\n' "$failed_lines"
fi
summary=$(grep -aE "^[[:space:]]*Executed [0-9]+ tests?, with" "$log" | tail -n 1 || true)
if [ -z "$summary" ]; then
    echo "0 passed, 1 failed"
    echo "test: no XCTest summary found (exit status $status)" >&2
    exit 1
fi
# Counted per test case: the summary's "failures" counts failed assertions, not tests.
passed=$(grep -acE "^Test Case '.*' passed \(" "$log" || true)
failed=$(grep -acE "^Test Case '.*' failed \(" "$log" || true)
skipped=$(grep -acE "^Test Case '.*' skipped \(" "$log" || true)
# A test that crashed the process never reports itself: the run failed all the same.
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
# No test ran at all (a filter that matched nothing): nothing was shown to work.
if [ $((passed + failed + skipped)) -eq 0 ]; then
    echo "0 passed, 1 failed"
    echo "test: no test ran" >&2
    exit 1
fi
if [ "$skipped" -gt 0 ]; then
    # Tests skip only for what this machine lacks (root, a second Unix user, a tool): say which.
    echo "test: skipped:"
    grep -aE "(Test skipped|' skipped)" "$log" | cut -c 1-300 | head -n 40 || true
    echo "$passed passed, $failed failed, $skipped skipped"
    # CI promises everything is installed: a skipped test there is a test that did not run.
    case "${CI:-}" in
    "" | false | 0) ;;
    *)
        echo "test: CI=${CI}: $skipped skipped test(s) count as a failure; install what they name" >&2
        [ "$status" -ne 0 ] || status=1
        ;;
    esac
else
    echo "$passed passed, $failed failed"
fi
exit "$status"
