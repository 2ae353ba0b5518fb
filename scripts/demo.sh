#!/usr/bin/env bash
# The IdentityBroker demo: sets up a fresh Debian/Ubuntu machine that has Swift, builds the
# samples and the `federate` CLI, starts moto's Cognito Identity server on loopback,
# creates an identity pool, and runs every flow end to end, saying what happens at each
# step. It never prints a provider token, secret key or session token. It stops moto and
# removes its temporary files on exit, and exits non-zero if any step fails.
#
#   scripts/demo.sh
#
# Environment:
#   IDENTITY_BROKER_BUILD_DIR   SwiftPM scratch path of the root package, for federate (default .build)
#   IDENTITY_BROKER_SAMPLES_BUILD_DIR  scratch path of the Samples package (default Samples/.build)
#   DEMO_SKIP_SETUP=1           skip scripts/setup.sh (packages already installed)
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${IDENTITY_BROKER_BUILD_DIR:-.build}
SAMPLES_BUILD_DIR=${IDENTITY_BROKER_SAMPLES_BUILD_DIR:-Samples/.build}
# The samples are their own package (Samples/Package.swift); federate is the root package's.
SAMPLES=(sample-oidc sample-guest sample-classic sample-developer sample-migration sample-observe sample-jobs)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/identity-broker-demo.XXXXXX")
MOTO_PID=""
STEP=0
CURRENT="start-up"

cleanup() {
    local status=$?
    if [ -n "$MOTO_PID" ]; then
        kill -9 "$MOTO_PID" 2>/dev/null || true
        wait "$MOTO_PID" 2>/dev/null || true
    fi
    if [ "$status" -ne 0 ]; then
        echo >&2
        echo "demo: FAILED during step $STEP ($CURRENT), exit status $status" >&2
        if [ -s "$WORK/moto.log" ]; then
            echo "demo: last lines of moto's log:" >&2
            tail -n 5 "$WORK/moto.log" >&2
        fi
    fi
    rm -rf "$WORK"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step() {
    STEP=$((STEP + 1))
    CURRENT=$1
    echo
    echo "== Step $STEP: $1"
}

# Prints JSON read on stdin with every secret value replaced, so only non-secret fields show.
redact() {
    python3 -c '
import json, sys
secret = {"SecretAccessKey", "SessionToken", "SecretKey", "Token"}
def scrub(value):
    if isinstance(value, dict):
        return {k: ("<redacted>" if k in secret else scrub(v)) for k, v in value.items()}
    return value
print(json.dumps(scrub(json.load(sys.stdin)), indent=2))'
}

# An unsigned JWT (moto does not verify signatures; a real provider signs its tokens).
demo_jwt() { # issuer subject
    python3 - "$1" "$2" <<'PY'
import base64, json, sys, time
def part(obj):
    return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).rstrip(b"=").decode()
issuer, subject = sys.argv[1], sys.argv[2]
claims = {"iss": issuer, "sub": subject, "aud": "demo-client", "exp": int(time.time()) + 3600}
print(part({"alg": "RS256", "kid": "demo", "typ": "JWT"}) + "." + part(claims) + ".ZGVtby1zaWduYXR1cmU")
PY
}

# Calls a Cognito Identity operation on moto and prints its JSON answer. moto checks no
# signature: it reads only the region and account from a SigV4-shaped Authorization header.
# (Python rather than curl, so the demo needs nothing beyond what setup.sh installs.)
cognito() { # operation json-body
    python3 - "$ENDPOINT" "$1" "$2" <<'PY'
import sys, urllib.error, urllib.request
endpoint, operation, body = sys.argv[1:4]
request = urllib.request.Request(endpoint, data=body.encode(), method="POST", headers={
    "Content-Type": "application/x-amz-json-1.1",
    "X-Amz-Target": "AWSCognitoIdentityService." + operation,
    "Authorization": "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/cognito-identity/aws4_request, "
                     "SignedHeaders=host, Signature=0",
})
try:
    with urllib.request.urlopen(request, timeout=30) as response:
        print(response.read().decode())
except urllib.error.HTTPError as error:
    sys.exit(f"{operation} failed: HTTP {error.code}: {error.read()[:300]!r}")
PY
}

# Runs a command, showing its output as it comes (line-buffered, so stdout and stderr stay in
# order) and keeping a copy for the final secret check.
LINE_BUFFERED=()
if command -v stdbuf >/dev/null 2>&1; then LINE_BUFFERED=(stdbuf -oL); fi
run() {
    "${LINE_BUFFERED[@]}" "$@" 2>&1 | tee -a "$WORK/output.log"
}

# Whether moto accepts connections yet.
listening() {
    python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()' "$PORT" 2>/dev/null
}

step "set up system packages and moto (scripts/setup.sh)"
if [ "${DEMO_SKIP_SETUP:-0}" = 1 ]; then
    echo "skipped (DEMO_SKIP_SETUP=1)"
else
    scripts/setup.sh
fi

# Builds one product and shows only its errors and warnings.
build() { # product swift-build-arguments...
    local product=$1
    shift
    echo "swift build $* --product $product"
    if ! swift build "$@" --product "$product" >"$WORK/build.log" 2>&1; then
        { grep -E "error:" "$WORK/build.log" | sort -u | head -n 20 || true; tail -n 3 "$WORK/build.log"; } >&2
        exit 1
    fi
    grep -E "warning:" "$WORK/build.log" || true
}

step "build the samples and the federate CLI"
SAMPLES_PACKAGE=(--package-path Samples --scratch-path "$SAMPLES_BUILD_DIR")
for product in "${SAMPLES[@]}"; do build "$product" "${SAMPLES_PACKAGE[@]}"; done
build federate --scratch-path "$BUILD_DIR"
SAMPLES_BIN=$(swift build "${SAMPLES_PACKAGE[@]}" --show-bin-path)
BIN=$(swift build --scratch-path "$BUILD_DIR" --show-bin-path)
for product in "${SAMPLES[@]}"; do
    [ -x "$SAMPLES_BIN/$product" ] || { echo "missing $SAMPLES_BIN/$product" >&2; exit 1; }
done
[ -x "$BIN/federate" ] || { echo "missing $BIN/federate" >&2; exit 1; }
echo "samples in $SAMPLES_BIN, federate in $BIN"

step "start moto's Cognito Identity server on loopback and create an identity pool"
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
ENDPOINT="http://127.0.0.1:$PORT/"
python3 -m moto.server -H 127.0.0.1 -p "$PORT" >"$WORK/moto.log" 2>&1 </dev/null &
MOTO_PID=$!
for _ in $(seq 1 300); do
    if listening; then break; fi
    kill -0 "$MOTO_PID" 2>/dev/null || { echo "moto exited:" >&2; tail -n 20 "$WORK/moto.log" >&2; exit 1; }
    sleep 0.1
done
listening || { echo "moto did not start within 30 s" >&2; exit 1; }
echo "moto listening at $ENDPOINT (pid $MOTO_PID)"

OIDC_ISSUER=login.example.com
DEVELOPER_PROVIDER=login.mycompany
POOL_JSON=$(cognito CreateIdentityPool "$(cat <<JSON
{"IdentityPoolName": "identity_broker_demo",
 "AllowUnauthenticatedIdentities": true,
 "DeveloperProviderName": "$DEVELOPER_PROVIDER",
 "SupportedLoginProviders": {"accounts.google.com": "demo-client.apps.googleusercontent.com"},
 "OpenIdConnectProviderARNs": ["arn:aws:iam::123456789012:oidc-provider/$OIDC_ISSUER"]}
JSON
)")
POOL_ID=$(printf '%s' "$POOL_JSON" | python3 -c 'import json, sys; print(json.load(sys.stdin)["IdentityPoolId"])')
echo "identity pool $POOL_ID: guests allowed; logins: accounts.google.com, $OIDC_ISSUER (OIDC), $DEVELOPER_PROVIDER (developer)"
COMMON=(--endpoint "$ENDPOINT" --pool-id "$POOL_ID")

step "OIDC federation of an ID token (sample-oidc)"
demo_jwt "https://$OIDC_ISSUER" "oidc-user-1" >"$WORK/oidc.jwt"
echo "\$ sample-oidc --provider oidc:$OIDC_ISSUER --token-file oidc.jwt"
run "$SAMPLES_BIN/sample-oidc" "${COMMON[@]}" --provider "oidc:$OIDC_ISSUER" --token-file "$WORK/oidc.jwt" --session alice
echo "\$ sample-oidc --provider google --demo-token"
run "$SAMPLES_BIN/sample-oidc" "${COMMON[@]}" --provider google --demo-token --session bob

step "guest identity, then linking a Google login to it (sample-guest)"
run "$SAMPLES_BIN/sample-guest" "${COMMON[@]}" --demo-token

step "classic flow: GetOpenIdToken, then STS AssumeRoleWithWebIdentity (sample-classic)"
# moto answers STS on the same endpoint; it needs no IAM role to exist.
run "$SAMPLES_BIN/sample-classic" "${COMMON[@]}" --sts-endpoint "$ENDPOINT" \
    --role-arn arn:aws:iam::123456789012:role/ClassicDemo --demo-token

step "developer-authenticated flow: backend mints a token, client completes (sample-developer)"
# The backend half signs with developer credentials; moto accepts any.
AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing \
    run "$SAMPLES_BIN/sample-developer" "${COMMON[@]}" --developer-provider "$DEVELOPER_PROVIDER" --user-id user-42

step "keystore access-group migration (sample-migration)"
run "$SAMPLES_BIN/sample-migration" "${COMMON[@]}" --keystore "$WORK/migration-keystore"

step "observing session states, expiry included (sample-observe)"
run "$SAMPLES_BIN/sample-observe" "${COMMON[@]}" --expiry-margin 88

step "a job runner: one child per end user on credentials from a credential server (sample-jobs)"
run "$SAMPLES_BIN/sample-jobs" "${COMMON[@]}" --sts-endpoint "$ENDPOINT" --role-arn arn:aws:iam::123456789012:role/Jobs

step "the federate CLI: login, status, credentials (secrets redacted here)"
export IDENTITY_BROKER_KEYSTORE="$WORK/cli-keystore"
demo_jwt "https://accounts.google.com" "google-user-dana" >"$WORK/google.jwt"
CLI=(--session dana --endpoint "$ENDPOINT" --expiry-margin 30)
echo "\$ federate login --provider google --token-file google.jwt --format json | redact"
"$BIN/federate" login --pool-id "$POOL_ID" --provider google --token-file "$WORK/google.jwt" --format json "${CLI[@]}" \
    | redact | tee -a "$WORK/output.log"
# The enhanced flow's credentials (moto gives every identity the same ones, so these are
# what every enhanced-flow sample above received too), kept for the final secret check.
"$BIN/federate" credentials "${CLI[@]}" >"$WORK/enhanced-credentials.json"
echo "\$ federate login --flow classic --role-arn ... --duration 900 --format json | redact"
"$BIN/federate" login --pool-id "$POOL_ID" --provider google --token-file "$WORK/google.jwt" --format json "${CLI[@]}" \
    --flow classic --role-arn arn:aws:iam::123456789012:role/ClassicDemo --duration 900 --sts-endpoint "$ENDPOINT" \
    | redact | tee -a "$WORK/output.log"
echo "\$ federate status"
run "$BIN/federate" status "${CLI[@]}"
python3 -c '
import json, sys
state = json.loads(sys.argv[1]).get("state")
sys.exit(0 if state == "federated" else f"expected state federated, got {state!r}")' "$(tail -n 1 "$WORK/output.log")"
echo "\$ federate credentials --format process | redact   (what credential_process = federate credentials reads)"
"$BIN/federate" credentials "${CLI[@]}" >"$WORK/credentials.json"
redact <"$WORK/credentials.json" | tee -a "$WORK/output.log"
echo "\$ federate clear && federate status"
run "$BIN/federate" clear "${CLI[@]}"
run "$BIN/federate" status "${CLI[@]}"

step "check that nothing above printed a secret"
# moto hands every Cognito identity the same secret key and session token, so the CLI's
# raw enhanced-flow credentials (kept in a file, never shown) are what every enhanced-flow
# sample received; the classic flow's are the CLI's last STS answer. Both are looked for,
# with the provider tokens, and so is any secret field whose value is not redacted.
python3 - "$WORK/enhanced-credentials.json" "$WORK/credentials.json" "$WORK/output.log" "$WORK/google.jwt" "$WORK/oidc.jwt" <<'PY'
import json, re, sys
enhanced, classic = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
secrets = {"enhanced-flow secret access key": enhanced["SecretAccessKey"], "enhanced-flow session token": enhanced["SessionToken"],
           "classic-flow secret access key": classic["SecretAccessKey"], "classic-flow session token": classic["SessionToken"],
           "google token": open(sys.argv[4]).read().strip(), "oidc token": open(sys.argv[5]).read().strip()}
output = open(sys.argv[3]).read()
leaked = [name for name, value in secrets.items() if value and value in output]
shaped = re.findall(r'"(?:SecretAccessKey|SessionToken|SecretKey|Token)"\s*:\s*"(?!<redacted>)[^"]', output)
if shaped:
    leaked.append(f"{len(shaped)} unredacted secret field(s)")
if leaked:
    sys.exit("demo: secret values appeared in the output: " + ", ".join(leaked))
print(f"checked {len(output.splitlines())} lines of output: no secret access key, session token or provider token")
PY

CURRENT="done"
echo
echo "== Done: every flow ran against moto at $ENDPOINT; moto is stopped and temporary files removed on exit."
