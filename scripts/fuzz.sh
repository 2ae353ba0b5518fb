#!/usr/bin/env bash
# Fuzzes the decoders that read untrusted bytes (Cognito responses and errors,
# Retry-After, JWTs) with libFuzzer for N seconds (default 60).
#
#   scripts/fuzz.sh [SECONDS] [extra libFuzzer flags...]
#
# Builds Fuzz/BrokerFuzz with -sanitize=fuzzer,address in its own scratch path
# (.build-fuzz), seeds a corpus from Tests/Fixtures/*.json plus a few JWTs,
# error responses with headers and past findings (Fuzz/regressions/), and runs with -max_total_time=SECONDS. The
# corpus lives in .build-fuzz/corpus (git-ignored) and grows across runs; crash
# inputs go to fuzz-artifacts/ (git-ignored). Exits non-zero when libFuzzer
# finds a crash, a leak or a timeout. The run's log is .build-fuzz/last-run.log.
#
# Replay an artifact in an ordinary build:
#   swift run --scratch-path .build-rel broker-fuzz fuzz-artifacts/crash-…
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
shift || true
case "$seconds" in
    ''|*[!0-9]*) echo "usage: $0 [SECONDS] [libFuzzer flags...]" >&2; exit 2 ;;
esac

scratch=.build-fuzz
flags=(--scratch-path "$scratch" --product broker-fuzz -c debug
       -Xswiftc -DFUZZING -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library
       # SwiftPM's `--defsym main=broker_fuzz_main` keeps libFuzzer's own main
       # out, so nothing pulls in its driver: ask for it (Fuzz/BrokerFuzz calls
       # it through dlsym) and export it.
       -Xlinker --undefined=LLVMFuzzerRunDriver -Xlinker --export-dynamic-symbol=LLVMFuzzerRunDriver)
swift build "${flags[@]}"
binary="$(swift build "${flags[@]}" --show-bin-path)/broker-fuzz"

corpus="$scratch/corpus"
seeds="$scratch/seeds"
artifacts=fuzz-artifacts
mkdir -p "$corpus" "$seeds" "$artifacts"

# Seeds: every fixture; the same bodies behind error headers; a few JWTs; and
# every input that once found a bug (Fuzz/regressions), replayed first.
cp Fuzz/regressions/* "$seeds/"
for fixture in Tests/Fixtures/*.json; do
    name="$(basename "$fixture" .json)"
    cp "$fixture" "$seeds/$name"
    { printf 'x-amzn-ErrorType: aws.cognito#%s:http://internal.amazon.com/coral/\nRetry-After: 2\nx-amz-retry-after: 1500\n\n' "$name"
      cat "$fixture"; } > "$seeds/$name.with-headers"
done
printf 'Retry-After: Sun, 06 Nov 1994 08:49:37 GMT\n\n{"__type":"ThrottlingException","Message":"slow down"}' > "$seeds/retry-after-imf"
printf 'Retry-After: Sunday, 06-Nov-94 08:49:37 GMT\n\n{}' > "$seeds/retry-after-rfc850"
printf 'Retry-After: Sun Nov  6 08:49:37 1994\n\n{}' > "$seeds/retry-after-asctime"
b64url() { base64 -w0 | tr '+/' '-_' | tr -d '='; }
jwt() { printf '%s.%s.c2lnbmF0dXJl' "$(printf '%s' "$1" | b64url)" "$(printf '%s' "$2" | b64url)"; }
jwt '{"alg":"RS256","kid":"k","typ":"JWT"}' '{"sub":"us-east-1:e5a2c3b1","exp":1700003600,"iss":"https://accounts.google.com","aud":"x"}' > "$seeds/jwt.google"
jwt '{"alg":"RS512","typ":"JWS"}' '{"sub":"us-east-1:e5a2c3b1-7d4f","exp":1.7E9,"iss":"https://cognito-identity.amazonaws.com"}' > "$seeds/jwt.developer"
jwt '{"alg":"none"}' '{"sub":42,"exp":"soon"}' > "$seeds/jwt.wrong-types"
jwt '[]' '{}' > "$seeds/jwt.array-header"
printf '{"sub":"a","exp":1700003600,"iss":"i"}' > "$seeds/claims"

log="$scratch/last-run.log"
set +e
# SWIFT_BACKTRACE=enable=no: on a Swift trap the runtime's backtracer reads the
# stack in a way ASan reports as stack-buffer-underflow, hiding the real failure;
# libFuzzer's own deadly-signal handler prints the stack instead.
SWIFT_BACKTRACE=enable=no ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" "$binary" "$corpus" "$seeds" \
    -dict=Fuzz/broker.dict \
    -max_total_time="$seconds" \
    -max_len=8192 \
    -timeout=10 \
    -rss_limit_mb=4096 \
    -artifact_prefix="$artifacts/" \
    -print_final_stats=1 \
    "$@" 2>&1 | tee "$log"
status="${PIPESTATUS[0]}"
set -e

echo "corpus: $(find "$corpus" -type f | wc -l) inputs in $corpus"
if [ "$status" -ne 0 ]; then
    echo "fuzz.sh: libFuzzer exited with status $status; see $log and $artifacts/" >&2
    exit "$status"
fi
if grep -qE '^==[0-9]+==ERROR|deadly signal|SUMMARY: (Address|Leak)Sanitizer' "$log"; then
    echo "fuzz.sh: the log reports a failure; see $log" >&2
    exit 1
fi
echo "fuzz.sh: no crash in ${seconds}s"
