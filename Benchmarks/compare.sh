#!/usr/bin/env bash
# Benchmarks/compare.sh — IdentityBroker against boto3, URLSession and the raw-libcurl floor,
# plus memory per session, CLI start-up, keystore and migration figures (issue 6).
#
# Sets up what it needs (nginx-light, curl, python3 + boto3, a C compiler; hyperfine when
# the package exists), builds release binaries in .build-bench (the Benchmarks package in
# .build-bench/benchmarks, the root package's federate CLI in .build-bench/cli), starts nginx
# on a free loopback port as a canned Cognito (fixed JSON chosen by X-Amz-Target, keep-alive), runs
# everything, stops what it started, and prints ONE JSON object as its last line.
#
# Environment:
#   FEDERATIONS=N        federations per throughput run (default 10000; 2 requests each)
#   SESSIONS_SMALL/LARGE live sessions for the memory figures (default 1000 / 10000)
#   MIGRATE_ITEMS=N      items to migrate (default 10000)
#   DURABLE_ITEMS=N      durable sets per round, keystore and floor alike (default 300)
#   SKIP_BUILD=1         use the binaries already in .build-bench
#   STORAGE_FEDERATIONS=N  federations per durable run at concurrency 1 (default 3000; c = 64
#                        uses FEDERATIONS); FLOOR_ITEMS=N appends+fdatasync per floor round (500)
#   STARTUP_SESSIONS=N   saved sessions for the keystore start-up figure (default 100000)
#   ONLY_STARTUP=1       only the CLI start-up figure (`federate credentials` on a cache hit
#                        against `noop`, beside the C floor of the same cache hit,
#                        Benchmarks/CacheHitFloor): builds noop and federate, starts nginx for the one
#                        login, skips everything else; the JSON then holds only its fields
#   STARTUP_ROUNDS=N     alternating noop / CLI rounds for that figure (default 5; medians)
#   STARTUP_RUNS=N       runs per command and round (default 100, after 20 warm-up runs)
#   MEMORY_SESSIONS=N    saved sessions for the resident-memory figure (default 1000000);
#   MEMORY_TOUCH=N / MEMORY_CACHE=N  distinct sessions read through the client / its cache
#                        capacity (default 50000 / 10000)
#   SQLITE_MIGRATE_ITEMS=N  items for SQLiteKeystore.migrate (default 10000)
#   CONCURRENCY_LEVELS="1 4 16 64 256"  the throughput sweep (broker, boto3, URLSession and the
#                        curl floor at each level; 1 and 64 must stay for the ratios). The JSON's
#                        "sweep" object holds every level; Benchmarks/plot_sweep.py draws it.
#   SWEEP_ROUNDS=N       rounds per level in which the curl floor and the broker alternate, one
#                        run each (default 5; medians)
#   ONLY_SWEEP=1         only the throughput sweep (no memory, CLI, keystore, SQLite, PostgreSQL)
#   SKIP_STORAGE=1       skip the SQLite keystore figures (issue 10); they are then null
#   SKIP_POSTGRES=1      skip the PostgreSQL keystore figures (issue 11); they are then null
#   ONLY_POSTGRES=1      run only the PostgreSQL figures (builds only broker-bench; every
#                        other figure is null): for working on PostgresKeystore
#   ONLY_SQLITE=1        likewise, only the SQLite keystore figures (issue 10)
#   PG_EVENTS=N          cross-instance events timed (default 1000); PGBENCH_SECONDS=N per
#                        pgbench floor run (default 10)
#
# The PostgreSQL figures start their own server with initdb's default settings (fsync and
# synchronous_commit on) in a temporary directory, on 127.0.0.1 and a free port, as the
# postgres user when run as root; apt postgresql is installed when no server is found.
#
# The storage figures at c = 1 run Benchmarks/DurableFederationFloor beside the broker: the same
# durable federation in C (libcurl, then the keystore's own SQLite or PostgreSQL statements),
# which gives the *_c1_floor_storage_us, *_c1_allowed_storage_us and *_c1_ceiling fields; at
# c = 64 it keeps 64 federations in flight with shared reads and a group commit, for the
# *_c64_floor_storage_us, *_c64_allowed_storage_us and *_c64_ceiling fields.
#
# The SQLite figures (issue 10) need ~2 GB free on the project's disk for the 1,000,000
# seeded sessions (removed afterwards).
#
# Floor (d): the curl tool (libcurl's own driver) with --parallel --parallel-max C over a
# generated config of 2N requests with the same headers and bodies, output discarded, no
# parsing. At concurrency 1 that is --parallel-max 1: one connection, requests back to back.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
FEDERATIONS=${FEDERATIONS:-10000}
SWEEP_ROUNDS=${SWEEP_ROUNDS:-5}
case "$SWEEP_ROUNDS" in ''|*[!0-9]*|0) echo "compare.sh: SWEEP_ROUNDS must be a whole number of at least 1, not '$SWEEP_ROUNDS'" >&2; exit 2 ;; esac
SESSIONS_SMALL=${SESSIONS_SMALL:-1000}
SESSIONS_LARGE=${SESSIONS_LARGE:-10000}
MIGRATE_ITEMS=${MIGRATE_ITEMS:-10000}
DURABLE_ITEMS=${DURABLE_ITEMS:-300}
STORAGE_FEDERATIONS=${STORAGE_FEDERATIONS:-3000}
FLOOR_ITEMS=${FLOOR_ITEMS:-500}
STARTUP_SESSIONS=${STARTUP_SESSIONS:-100000}
STARTUP_ROUNDS=${STARTUP_ROUNDS:-5}
STARTUP_RUNS=${STARTUP_RUNS:-100}
MEMORY_SESSIONS=${MEMORY_SESSIONS:-1000000}
MEMORY_TOUCH=${MEMORY_TOUCH:-50000}
MEMORY_CACHE=${MEMORY_CACHE:-10000}
SQLITE_MIGRATE_ITEMS=${SQLITE_MIGRATE_ITEMS:-10000}
CONCURRENCY_LEVELS=${CONCURRENCY_LEVELS:-1 4 16 64 256}
SCRATCH=$ROOT/.build-bench
# Two packages, two scratch paths: the benchmarks (Benchmarks/Package.swift) and the CLI (the root's).
BIN=$SCRATCH/benchmarks/release
CLI_BIN=$SCRATCH/cli/release

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi

log() { printf '== %s\n' "$*" >&2; }

# ---------------------------------------------------------------- set-up
need_apt=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need_apt+=(nginx-light)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-pip)
if ! command -v hyperfine >/dev/null 2>&1 && apt-cache show hyperfine >/dev/null 2>&1; then
    need_apt+=(hyperfine)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
    log "installing ${need_apt[*]}"
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
if [ "${ONLY_STARTUP:-0}" != 1 ] && ! python3 -c 'import boto3' 2>/dev/null; then
    log "installing boto3"
    python3 -m pip install -q boto3 2>/dev/null \
        || python3 -m pip install -q --user boto3 2>/dev/null \
        || python3 -m pip install -q --break-system-packages boto3
fi

if [ "${SKIP_BUILD:-0}" != 1 ]; then
    log "building release binaries in .build-bench"
    products=(broker-bench urlsession-bench noop federate federate-server)
    if [ "${ONLY_STARTUP:-0}" = 1 ]; then products=(noop federate federate-server); fi
    if [ "${ONLY_POSTGRES:-0}" = 1 ] || [ "${ONLY_SQLITE:-0}" = 1 ]; then products=(broker-bench); fi
    if [ "${ONLY_SWEEP:-0}" = 1 ]; then products=(broker-bench urlsession-bench); fi
    for product in "${products[@]}"; do
        # The benchmarks are a package of their own; the CLI is the root package's.
        package=(--package-path "$ROOT/Benchmarks" --scratch-path "$SCRATCH/benchmarks")
        case "$product" in federate|federate-server) package=(--package-path "$ROOT" --scratch-path "$SCRATCH/cli") ;; esac
        if ! swift build -c release "${package[@]}" --product "$product" >"$SCRATCH.$product.log" 2>&1; then
            if [ "$product" = federate ] || [ "$product" = federate-server ]; then
                log "the federate CLI does not build yet; its figure will be null (see $SCRATCH.$product.log)"
            else
                cat "$SCRATCH.$product.log" >&2
                exit 1
            fi
        fi
    done
fi

WORK=$(mktemp -d /tmp/identity-broker-bench.XXXXXX)
NGINX_PID=""
PG_DIR=""; PG_BIN=""
# PostgreSQL refuses to run as root: its server commands run as postgres then.
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cleanup() {
    if [ -n "$PG_DIR" ] && [ -d "$PG_DIR/data" ]; then
        as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -w -m immediate stop >/dev/null 2>&1 || true
        rm -rf "$PG_DIR"
    fi
    if [ -n "$NGINX_PID" ] && kill -0 "$NGINX_PID" 2>/dev/null; then
        kill "$NGINX_PID" 2>/dev/null || true
        wait "$NGINX_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- canned Cognito
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ENDPOINT="http://127.0.0.1:$PORT/"
IDENTITY_ID="us-east-1:11111111-2222-4333-8444-555555555555"
# A session token as long as real Cognito ones (about 1 KB of base64).
SESSION_TOKEN=$(python3 -c 'import base64; print(base64.b64encode(bytes(range(256)) * 3).decode()[:1000])')
GET_ID_BODY="{\"IdentityId\":\"$IDENTITY_ID\"}"
# Credentials that expire 6 hours after this run starts: the client refuses an expiration in
# the past or more than 36 hours ahead (a static one would soon be either).
EXPIRATION=$(( $(date +%s) + 6 * 3600 ))
GET_CREDS_BODY="{\"Credentials\":{\"AccessKeyId\":\"ASIAQBENCHMARK000001\",\"Expiration\":$EXPIRATION,\"SecretKey\":\"wJalrXUtnFEMI/K7MDENG/bPxRfiCYBENCHMARKEY\",\"SessionToken\":\"$SESSION_TOKEN\"},\"IdentityId\":\"$IDENTITY_ID\"}"

mkdir -p "$WORK/nginx/logs"
cat >"$WORK/nginx/nginx.conf" <<EOF
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
daemon off;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $WORK/nginx/body;
    proxy_temp_path $WORK/nginx/proxy;
    fastcgi_temp_path $WORK/nginx/fastcgi;
    uwsgi_temp_path $WORK/nginx/uwsgi;
    scgi_temp_path $WORK/nginx/scgi;
    keepalive_timeout 300s;
    keepalive_requests 100000000;
    server_tokens off;
    map_hash_bucket_size 128;
    map \$http_x_amz_target \$cognito_body {
        default '{"__type":"UnknownOperationException","message":"unknown target"}';
        AWSCognitoIdentityService.GetId '$GET_ID_BODY';
        AWSCognitoIdentityService.GetCredentialsForIdentity '$GET_CREDS_BODY';
    }
    server {
        listen 127.0.0.1:$PORT backlog=4096;
        location / {
            default_type application/x-amz-json-1.1;
            return 200 \$cognito_body;
        }
    }
}
EOF
log "starting nginx on $ENDPOINT"
"$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -e "$WORK/nginx/logs/error.log" &
NGINX_PID=$!
for _ in $(seq 100); do
    kill -0 "$NGINX_PID" 2>/dev/null || { echo "nginx failed to start" >&2; exit 1; }
    if curl -s -o /dev/null "$ENDPOINT" 2>/dev/null; then break; fi
    sleep 0.05
done
answer=$(curl -s -H 'X-Amz-Target: AWSCognitoIdentityService.GetId' -d '{}' "$ENDPOINT")
[ "$answer" = "$GET_ID_BODY" ] || { echo "nginx did not answer as expected: $answer" >&2; exit 1; }

# ---------------------------------------------------------------- helpers
last_line() { tail -n 1; }
# One sealed session's size, which the storage floors write (the C floor reads it from
# here); only the runs with storage figures need it.
if [ "${ONLY_STARTUP:-0}" != 1 ] && [ "${ONLY_SWEEP:-0}" != 1 ]; then
    FLOOR_RECORD_BYTES=$("$BIN/broker-bench" record-bytes --endpoint "$ENDPOINT" | last_line)
    export FLOOR_RECORD_BYTES
fi
# A copy of stdin on stderr, for the person watching, waited for (bash 4.4+) so that it comes
# before the script's next line. Not `tee /dev/stderr`: opening that path when stderr is a file
# (`compare.sh > log 2>&1`) truncates it, and the log loses everything before.
show_too() { tee >(cat >&2); wait $!; }
# median of the numbers on stdin; empty lines (a run that failed and printed nothing) are
# left out, not counted as 0
median() { awk 'NF' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# The storage targets' floor (Benchmarks/DurableFederationFloor): the same durable federation
# at c = 1 in C, built on first use; durable_floor MODE ARGS prints its rate, or nothing
# (and the figures that need it are null) when it does not build or run.
durable_floor() {
    if [ ! -x "$WORK/durable_federation_floor" ]; then
        cc -O2 -o "$WORK/durable_federation_floor" "$ROOT/Benchmarks/DurableFederationFloor/durable_federation_floor.c" \
            -lcurl -lsqlite3 -ldl -lpthread >"$WORK/durable_floor.log" 2>&1 || { log "the C durable-federation floor did not build"; return 0; }
    fi
    "$WORK/durable_federation_floor" "$@" 2>>"$WORK/durable_floor.log" || log "the C durable-federation floor failed: $1"
}
# c_floor_rounds CONCURRENCY COUNT ENGINE TARGET MEMORY_KEY DURABLE_KEY: 3 alternating rounds of
# the C floor in memory and on ENGINE (TARGET: its database, "%d" taking the round; for SQLite
# the files are removed after each round); the medians go to R[MEMORY_KEY] and R[DURABLE_KEY].
c_floor_rounds() {
    local concurrency=$1 count=$2 engine=$3 target=$4 memory_key=$5 durable_key=$6 round path
    local mems=() durables=()
    for round in 1 2 3; do
        # shellcheck disable=SC2059
        path=$(printf "$target" "$round")
        mems+=("$(FLOOR_CONCURRENCY=$concurrency durable_floor memory "$ENDPOINT" "$count")")
        durables+=("$(FLOOR_CONCURRENCY=$concurrency durable_floor "$engine" "$ENDPOINT" "$count" "$path")")
        log "  C floor c = $concurrency, round $round: in memory ${mems[-1]}, $engine ${durables[-1]} fed/s"
        if [ "$engine" = sqlite ]; then rm -f "$path" "$path"-*; fi
    done
    if [ -n "${mems[*]// /}" ] && [ -n "${durables[*]// /}" ]; then
        R[$memory_key]=$(printf '%s\n' "${mems[@]}" | median)
        R[$durable_key]=$(printf '%s\n' "${durables[@]}" | median)
    fi
}

# ---------------------------------------------------------------- CLI cache hit vs noop
# The one source of the CLI start-up figure. Rounds alternate noop and the cache hit, so
# both see the same load; each round's figure is hyperfine's median (a loop's mean without
# hyperfine), and the result is the median over rounds (cli_vs_noop: of the per-round ratios).
CLI_VS_NOOP=null; CLI_MS=null; NOOP_MS=null; FLOOR_MS=null; EMPTY_MS=null; FLOOR_VS_NOOP=null
time_command() { # milliseconds of one run of "$@": hyperfine's median when present, else a loop's mean
    if command -v hyperfine >/dev/null 2>&1; then
        hyperfine -N --warmup 20 --runs "$STARTUP_RUNS" --export-json "$WORK/hf.json" "$(printf '%q ' "$@")" >/dev/null 2>&1
        python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["results"][0]["median"] * 1000, 3))' "$WORK/hf.json"
    else
        for _ in $(seq 20); do "$@" >/dev/null 2>&1; done
        local start end
        start=$(date +%s%N)
        for _ in $(seq "$STARTUP_RUNS"); do "$@" >/dev/null 2>&1; done
        end=$(date +%s%N)
        awk -v ns="$((end - start))" -v n="$STARTUP_RUNS" 'BEGIN { printf "%.3f\n", ns / n / 1e6 }'
    fi
}
cli_startup() {
    if [ ! -x "$CLI_BIN/federate" ]; then
        log "no federate binary; cli_vs_noop is null"
        return
    fi
    # The cache hit an SDK sees: one saved session, the key from $IDENTITY_BROKER_KEY (no
    # key file, no scrypt), `federate credentials` printing it.
    local key
    key=$(python3 -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())')
    printf '%s' "EAAGm0PX4ZCpsBAKZCZBbench0token0opaque0value0ZD" >"$WORK/token"
    if IDENTITY_BROKER_KEYSTORE="$WORK/cli-keystore" IDENTITY_BROKER_KEY="$key" "$CLI_BIN/federate" login \
            --pool-id us-east-1:00000000-0000-4000-8000-000000000000 --provider facebook \
            --token-file "$WORK/token" --endpoint "$ENDPOINT" --session bench >/dev/null 2>"$WORK/cli.err" \
        && IDENTITY_BROKER_KEYSTORE="$WORK/cli-keystore" IDENTITY_BROKER_KEY="$key" \
            "$CLI_BIN/federate" credentials --session bench >/dev/null 2>>"$WORK/cli.err"; then
        # The floor: the same cache hit in C on the same libraries (Benchmarks/CacheHitFloor),
        # checked to open the item before it is timed, and an empty C program, so that the
        # floor's own cost can be added to the Swift no-op.
        local floor=() database
        database=$(find "$WORK/cli-keystore" -name '*.sqlite' | head -n 1)
        printf 'int main(void) { return 0; }\n' >"$WORK/empty.c"
        if cc -O2 -o "$WORK/empty" "$WORK/empty.c" \
            && cc -O2 -o "$WORK/cache_hit_floor" "$ROOT/Benchmarks/CacheHitFloor/cache_hit_floor.c" -lsqlite3 -lcrypto \
            && IDENTITY_BROKER_KEY="$key" "$WORK/cache_hit_floor" "$database" identity-broker session.bench >/dev/null; then
            floor=("$WORK/cache_hit_floor" "$database" identity-broker session.bench)
        else
            log "the C cache-hit floor did not build or open the item; cli_floor_vs_noop is null"
        fi
        local noops=() clis=() ratios=() floors=() empties=() noop cli round
        for round in $(seq "$STARTUP_ROUNDS"); do
            noop=$(time_command "$BIN/noop")
            cli=$(IDENTITY_BROKER_KEYSTORE="$WORK/cli-keystore" IDENTITY_BROKER_KEY="$key" \
                time_command "$CLI_BIN/federate" credentials --session bench)
            noops+=("$noop"); clis+=("$cli")
            ratios+=("$(awk -v a="$cli" -v b="$noop" 'BEGIN { printf "%.3f", a / b }')")
            if [ "${#floor[@]}" -gt 0 ]; then
                floors+=("$(IDENTITY_BROKER_KEY="$key" time_command "${floor[@]}")")
                empties+=("$(time_command "$WORK/empty")")
                log "  round $round: noop $noop ms, federate credentials $cli ms, C floor ${floors[-1]} ms, empty C ${empties[-1]} ms"
            else
                log "  round $round: noop $noop ms, federate credentials $cli ms"
            fi
        done
        NOOP_MS=$(printf '%s\n' "${noops[@]}" | median)
        CLI_MS=$(printf '%s\n' "${clis[@]}" | median)
        CLI_VS_NOOP=$(printf '%s\n' "${ratios[@]}" | median)
        log "federate credentials (cache hit): $CLI_MS ms, noop $NOOP_MS ms, $CLI_VS_NOOP x noop (medians of $STARTUP_ROUNDS rounds)"
        if [ "${#floors[@]}" -gt 0 ]; then
            FLOOR_MS=$(printf '%s\n' "${floors[@]}" | median)
            EMPTY_MS=$(printf '%s\n' "${empties[@]}" | median)
            # A Swift cache hit pays the no-op (runtime loading) plus the floor's own work.
            FLOOR_VS_NOOP=$(awk -v n="$NOOP_MS" -v f="$FLOOR_MS" -v e="$EMPTY_MS" 'BEGIN { printf "%.3f", (n + f - e) / n }')
            log "C floor of the cache hit: $FLOOR_MS ms (empty C program $EMPTY_MS ms): no Swift cache hit goes under $FLOOR_VS_NOOP x noop"
        fi
    else
        log "federate login/credentials not usable yet ($(head -c 300 "$WORK/cli.err")); cli_vs_noop is null"
    fi
}
if [ "${ONLY_STARTUP:-0}" = 1 ]; then
    cli_startup
    printf '{"cli_vs_noop":%s,"cli_ms":%s,"noop_ms":%s,"cli_floor_vs_noop":%s,"cli_floor_ms":%s,"empty_c_ms":%s,"startup_rounds":%s,"startup_runs":%s,"cpus":%s}\n' \
        "$CLI_VS_NOOP" "$CLI_MS" "$NOOP_MS" "$FLOOR_VS_NOOP" "$FLOOR_MS" "$EMPTY_MS" "$STARTUP_ROUNDS" "$STARTUP_RUNS" "$(nproc)"
    exit 0
fi


# The floor's curl config: 2N requests, each with its own headers and body (`next`).
GET_ID_REQUEST="{\"IdentityPoolId\":\"us-east-1:00000000-0000-4000-8000-000000000000\",\"Logins\":{\"graph.facebook.com\":\"EAAGm0PX4ZCpsBAKZCZBbench0token0opaque0value0ZD\"}}"
GET_CREDS_REQUEST="{\"IdentityId\":\"$IDENTITY_ID\",\"Logins\":{\"graph.facebook.com\":\"EAAGm0PX4ZCpsBAKZCZBbench0token0opaque0value0ZD\"}}"
make_curl_config() { # $1 federations, $2 file
    python3 - "$1" "$2" "$ENDPOINT" "$GET_ID_REQUEST" "$GET_CREDS_REQUEST" <<'EOF'
import json, sys
n, path, url, get_id, get_creds = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
def block(target, body):
    return (f'url = "{url}"\noutput = "/dev/null"\n'
            f'header = "Content-Type: application/x-amz-json-1.1"\n'
            f'header = "X-Amz-Target: AWSCognitoIdentityService.{target}"\n'
            f'header = "Accept: application/json"\n'
            f'data-binary = {json.dumps(body)}\n')
with open(path, "w") as f:
    f.write("\nnext\n".join(block("GetId", get_id) + "\nnext\n" + block("GetCredentialsForIdentity", get_creds)
                            for _ in range(n)))
    f.write("\n")
EOF
}
floor_rate() { # $1 concurrency -> federations/s
    local start end
    start=$(date +%s%N)
    curl -s --parallel --parallel-immediate --parallel-max "$1" -K "$WORK/floor.curl" 2>/dev/null
    end=$(date +%s%N)
    awk -v n="$FEDERATIONS" -v ns="$((end - start))" 'BEGIN { printf "%.1f\n", n / (ns / 1e9) }'
}

declare -A R
if [ "${ONLY_SQLITE:-0}" = 1 ]; then SKIP_POSTGRES=1; fi
if [ "${ONLY_POSTGRES:-0}" = 1 ] || [ "${ONLY_SQLITE:-0}" = 1 ]; then
    if [ "${ONLY_POSTGRES:-0}" = 1 ]; then SKIP_STORAGE=1; fi
else
# ---------------------------------------------------------------- throughput
make_curl_config "$FEDERATIONS" "$WORK/floor.curl"
make_curl_config 200 "$WORK/floor-warm.curl"
for c in $CONCURRENCY_LEVELS; do
    # The floor and the broker alternate, one run each per round, so that both medians come
    # from the same minutes: on a shared host either rate drifts by 10-30 % within a minute,
    # and three floor runs followed by three broker runs measured that drift, not the client.
    log "concurrency $c: curl floor (--parallel-max $c) and IdentityBroker (broker-bench), alternating, $SWEEP_ROUNDS rounds"
    curl -s --parallel --parallel-max "$c" -K "$WORK/floor-warm.curl" 2>/dev/null
    floors=(); brokers=()
    for ((round = 1; round <= SWEEP_ROUNDS; round++)); do
        floors+=("$(floor_rate "$c")")
        brokers+=("$("$BIN/broker-bench" --endpoint "$ENDPOINT" --federations "$FEDERATIONS" --concurrency "$c" --repeats 1 | show_too | last_line)")
        log "  round $round: floor ${floors[-1]}, IdentityBroker ${brokers[-1]} federations/s"
    done
    R[floor_c$c]=$(printf '%s\n' "${floors[@]}" | median)
    R[broker_c$c]=$(printf '%s\n' "${brokers[@]}" | median)
    log "  medians: floor ${R[floor_c$c]}, IdentityBroker ${R[broker_c$c]} federations/s"

    log "concurrency $c: URLSession + JSONDecoder (urlsession-bench)"
    R[urlsession_c$c]=$("$BIN/urlsession-bench" --endpoint "$ENDPOINT" --federations "$FEDERATIONS" --concurrency "$c" | show_too | last_line)

    log "concurrency $c: boto3"
    R[boto3_c$c]=$(python3 "$ROOT/Benchmarks/boto3_bench.py" --endpoint "$ENDPOINT" --federations "$FEDERATIONS" --concurrency "$c" | show_too | last_line)
done

if [ "${ONLY_SWEEP:-0}" = 1 ]; then SKIP_STORAGE=1; SKIP_POSTGRES=1; else
# ---------------------------------------------------------------- memory per live session
for n in "$SESSIONS_SMALL" "$SESSIONS_LARGE"; do
    log "memory: $n live sessions"
    out=$("$BIN/broker-bench" memory --endpoint "$ENDPOINT" --sessions "$n" | show_too)
    R[heap_$n]=$(echo "$out" | awk '/heap_bytes_per_session/ { print $2 }')
    R[rss_$n]=$(echo "$out" | awk '/heap_bytes_per_session/ { print $4 }')
done

# ---------------------------------------------------------------- CLI cache hit vs noop
cli_startup

# ---------------------------------------------------------------- keystore
# Durable sets and the write+fsync+rename+dir-fsync floor alternate, 3 rounds each, on the
# same file system (disk latency drifts; alternating keeps the ratio honest).
KS_DIR="$ROOT/.build-bench/keystore-bench"   # on the project's disk, like a real keystore
rm -rf "$KS_DIR"; mkdir -p "$KS_DIR"
sets=(); floors=(); gets=()
for round in 1 2 3; do
    mkdir -p "$KS_DIR/floor$round"
    floors+=("$("$BIN/broker-bench" fsync-floor --directory "$KS_DIR/floor$round" --items "$DURABLE_ITEMS" | last_line)")
    out=$("$BIN/broker-bench" keystore --directory "$KS_DIR/ks$round" --items "$DURABLE_ITEMS" --gets 50000)
    sets+=("$(echo "$out" | last_line)")
    gets+=("$(echo "$out" | awk '/^get_us/ { print $2 }')")
    log "keystore round $round: durable sets ${sets[-1]}/s, floor ${floors[-1]}/s, get ${gets[-1]} us"
done
R[durable_set]=$(printf '%s\n' "${sets[@]}" | median)
R[durable_floor]=$(printf '%s\n' "${floors[@]}" | median)
R[get_us]=$(printf '%s\n' "${gets[@]}" | median)

# ---------------------------------------------------------------- migration
# Filling 10,000 items is set-up, not the measurement: it runs with fsync turned into a
# no-op (LD_PRELOAD), then `sync`, then the migration itself runs normally.
cat >"$WORK/nofsync.c" <<'EOF'
int fsync(int fd) { (void)fd; return 0; }
int fdatasync(int fd) { (void)fd; return 0; }
EOF
cc -shared -fPIC -O2 -o "$WORK/nofsync.so" "$WORK/nofsync.c"
MIG_DIR="$KS_DIR/migrate"
log "migration: filling $MIGRATE_ITEMS items"
LD_PRELOAD="$WORK/nofsync.so" "$BIN/broker-bench" migrate --directory "$MIG_DIR" --items "$MIGRATE_ITEMS" --fill-only >&2
sync
log "migration: migrating $MIGRATE_ITEMS items"
R[migrate]=$("$BIN/broker-bench" migrate --directory "$MIG_DIR" --items "$MIGRATE_ITEMS" --skip-fill | last_line)
log "  ${R[migrate]} s"
rm -rf "$KS_DIR"

fi # ONLY_SWEEP
fi # ONLY_POSTGRES

# ---------------------------------------------------------------- SQLite keystore (issue 10)
# A FederationClient on a durable SQLiteKeystore against the same client with no keystore
# (InMemoryKeystore), alternating in one process per concurrency (3 rounds, medians); at
# c = 1 each round also times the durability floor: append one sealed-session-sized record
# to a file and fdatasync it. Then start-up and resident memory over many saved sessions
# (seeded with KeystoreBatches of 10,000 straight through SQLiteKeystore.commit: set-up, not
# measured), and SQLiteKeystore.migrate. All on the project's disk, like a real keystore.
if [ "${SKIP_STORAGE:-0}" != 1 ]; then
    SQL_DIR="$ROOT/.build-bench/sqlite-bench"
    rm -rf "$SQL_DIR"; mkdir -p "$SQL_DIR"
    field() { awk -v k="$1" '$1 == k { print $2 }'; }
    for c in 1 64; do
        n=$FEDERATIONS; floor_args=()
        if [ "$c" = 1 ]; then n=$STORAGE_FEDERATIONS; floor_args=(--floor-items "$FLOOR_ITEMS"); fi
        log "SQLite keystore vs in-memory, concurrency $c ($n federations per run)"
        mkdir -p "$SQL_DIR/c$c"
        out=$("$BIN/broker-bench" storage-throughput --endpoint "$ENDPOINT" --directory "$SQL_DIR/c$c" \
            --concurrency "$c" --federations "$n" --repeats 3 "${floor_args[@]}" | show_too)
        R[sqlite_c$c]=$(echo "$out" | field sqlite_fed_per_s)
        R[inmemory_c$c]=$(echo "$out" | field inmemory_fed_per_s)
        if [ "$c" = 1 ]; then
            R[fdatasync_floor]=$(echo "$out" | field floor_per_s)
            R[record_bytes]=$(echo "$out" | field record_bytes)
        fi
        rm -rf "$SQL_DIR/c$c"
    done
    # The same durable federation in C, with its own in-memory and fdatasync figures (3
    # alternating rounds, medians): the storage overhead no client of SQLite avoids here.
    mems=(); durables=(); appends=()
    for round in 1 2 3; do
        mems+=("$(durable_floor memory "$ENDPOINT" "$STORAGE_FEDERATIONS")")
        durables+=("$(durable_floor sqlite "$ENDPOINT" "$STORAGE_FEDERATIONS" "$SQL_DIR/floor$round.sqlite")")
        appends+=("$(durable_floor append - "$STORAGE_FEDERATIONS" "$SQL_DIR/floor$round.append")")
        log "  C floor round $round: in memory ${mems[-1]}, SQLite ${durables[-1]} fed/s; append+fdatasync ${appends[-1]}/s"
        rm -f "$SQL_DIR/floor$round".*
    done
    if [ -n "${mems[*]// /}" ] && [ -n "${durables[*]// /}" ] && [ -n "${appends[*]// /}" ]; then
        R[c_inmemory_c1]=$(printf '%s\n' "${mems[@]}" | median)
        R[c_sqlite_c1]=$(printf '%s\n' "${durables[@]}" | median)
        R[c_append]=$(printf '%s\n' "${appends[@]}" | median)
    fi
    # And at c = 64: 64 C federations in flight, reads and commits shared (group commit).
    c_floor_rounds 64 "$FEDERATIONS" sqlite "$SQL_DIR/floor64-%d.sqlite" c_inmemory_c64 c_sqlite_c64

    log "start-up: seeding $STARTUP_SESSIONS sessions"
    "$BIN/broker-bench" seed --endpoint "$ENDPOINT" --directory "$SQL_DIR/startup" --sessions "$STARTUP_SESSIONS" | show_too >/dev/null
    startups=()
    for _ in $(seq 11); do
        startups+=("$("$BIN/broker-bench" startup --directory "$SQL_DIR/startup" --session "s$((STARTUP_SESSIONS / 2))" | last_line)")
    done
    R[startup_ms]=$(printf '%s\n' "${startups[@]}" | median)
    log "  open keystore + client + read one session: ${startups[*]} ms; median ${R[startup_ms]}"
    rm -rf "$SQL_DIR/startup"

    log "memory: seeding $MEMORY_SESSIONS sessions"
    "$BIN/broker-bench" seed --endpoint "$ENDPOINT" --directory "$SQL_DIR/memory" --sessions "$MEMORY_SESSIONS" | show_too >/dev/null
    rss=()
    for _ in 1 2 3; do
        rss+=("$("$BIN/broker-bench" store-memory --directory "$SQL_DIR/memory" --touch "$MEMORY_TOUCH" --cache "$MEMORY_CACHE" \
            | show_too | last_line)")
    done
    R[store_rss]=$(printf '%s\n' "${rss[@]}" | median)
    rm -rf "$SQL_DIR/memory"

    migrations=()
    for round in 1 2 3; do
        migrations+=("$("$BIN/broker-bench" sqlite-migrate --endpoint "$ENDPOINT" --directory "$SQL_DIR/migrate$round" --items "$SQLITE_MIGRATE_ITEMS" | last_line)")
        rm -rf "$SQL_DIR/migrate$round"
    done
    R[sqlite_migrate]=$(printf '%s\n' "${migrations[@]}" | median)
    log "SQLiteKeystore.migrate of $SQLITE_MIGRATE_ITEMS items: ${migrations[*]} s; median ${R[sqlite_migrate]}"
    rm -rf "$SQL_DIR"
fi

# ---------------------------------------------------------------- PostgreSQL keystore (issue 11)
# A FederationClient on a durable PostgresKeystore against the same client with no keystore,
# alternating in one process (3 rounds, medians; fresh service per round); the single-row
# commit floor measured with pgbench -c 1 (one INSERT of a sealed-session-sized bytea per
# transaction) on the same database; then the cross-instance event delay.
if [ "${SKIP_POSTGRES:-0}" != 1 ]; then
    PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -z "$PG_BIN" ]; then
        log "installing postgresql"
        $SUDO apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
        PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
    fi
    PG_DIR=$(mktemp -d /tmp/identity-broker-pg.XXXXXX)
    if [ "$(id -u)" -eq 0 ]; then chown postgres: "$PG_DIR"; fi
    PG_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    log "PostgreSQL ($PG_BIN) on 127.0.0.1:$PG_PORT, default settings, in $PG_DIR"
    as_pg "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres --auth=trust -E UTF8 >"$WORK/initdb.log" 2>&1 \
        || { cat "$WORK/initdb.log" >&2; exit 1; }
    # Only where it listens differs from the defaults.
    as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
        -o "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1" start >/dev/null
    PSQL=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres)
    "${PSQL[@]}" -d postgres -c 'CREATE DATABASE bench' >/dev/null
    PG_URL="postgres://postgres@127.0.0.1:$PG_PORT/bench?sslmode=disable"
    field() { awk -v k="$1" '$1 == k { print $2 }'; }
    RECORD_BYTES=${FLOOR_RECORD_BYTES:?the sealed session size was not measured}
    "${PSQL[@]}" -d bench -c 'CREATE TABLE bench_floor (id bigserial PRIMARY KEY, v bytea NOT NULL)' >/dev/null
    printf "INSERT INTO bench_floor (v) VALUES (decode(repeat('5a', %d), 'hex'));\n" "$RECORD_BYTES" >"$WORK/floor.sql"
    # c = 1: each round's durable and in-memory runs (one broker-bench process), then that
    # round's pgbench floor, so that the bound's two rates come from the same minutes.
    log "PostgreSQL keystore vs in-memory, concurrency 1 ($STORAGE_FEDERATIONS federations per run)"
    durables=(); mems=(); floors=()
    for round in 1 2 3; do
        out=$("$BIN/broker-bench" postgres-throughput --endpoint "$ENDPOINT" --url "$PG_URL" \
            --concurrency 1 --federations "$STORAGE_FEDERATIONS" --repeats 1 | show_too)
        durables+=("$(echo "$out" | field postgres_fed_per_s)")
        mems+=("$(echo "$out" | field inmemory_fed_per_s)")
        floors+=("$("$PG_BIN/pgbench" -n -c 1 -T "${PGBENCH_SECONDS:-10}" -f "$WORK/floor.sql" \
            -h 127.0.0.1 -p "$PG_PORT" -U postgres bench 2>/dev/null | awk '/^tps = / { print $3; exit }')")
        log "  pgbench floor round $round: ${floors[-1]} single-row commits/s ($RECORD_BYTES-byte bytea)"
    done
    R[postgres_c1]=$(printf '%s\n' "${durables[@]}" | median)
    R[pg_inmemory_c1]=$(printf '%s\n' "${mems[@]}" | median)
    log "PostgreSQL keystore vs in-memory, concurrency 64 ($FEDERATIONS federations per run)"
    out=$("$BIN/broker-bench" postgres-throughput --endpoint "$ENDPOINT" --url "$PG_URL" \
        --concurrency 64 --federations "$FEDERATIONS" --repeats 3 | show_too)
    R[postgres_c64]=$(echo "$out" | field postgres_fed_per_s)
    R[pg_inmemory_c64]=$(echo "$out" | field inmemory_fed_per_s)

    R[pgbench_floor]=$(printf '%s\n' "${floors[@]}" | median)
    # The same durable federation in C through libpq, with the keystore's own statements and a
    # listening connection (3 alternating rounds, medians).
    pg_conninfo="host=127.0.0.1 port=$PG_PORT user=postgres dbname=bench sslmode=disable"
    c_floor_rounds 1 "$STORAGE_FEDERATIONS" postgres "$pg_conninfo" c_pg_inmemory_c1 c_postgres_c1
    c_floor_rounds 64 "$FEDERATIONS" postgres "$pg_conninfo" c_pg_inmemory_c64 c_postgres_c64

    log "cross-instance event delay (${PG_EVENTS:-1000} events)"
    out=$("$BIN/broker-bench" postgres-events --endpoint "$ENDPOINT" --url "$PG_URL" --events "${PG_EVENTS:-1000}" | show_too)
    R[pg_event_median]=$(echo "$out" | field event_ms_median)
    R[pg_event_p99]=$(echo "$out" | field event_ms_p99)
    R[pg_commit_median]=$(echo "$out" | field commit_ms_median)
    R[pg_federate_median]=$(echo "$out" | field federate_ms_median)
    R[pg_client_event_median]=$(echo "$out" | field client_event_ms_median)
    R[pg_client_event_p99]=$(echo "$out" | field client_event_ms_p99)

    as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -w -m fast stop >/dev/null
    rm -rf "$PG_DIR"; PG_DIR=""
fi

# ---------------------------------------------------------------- report
python3 - "$FEDERATIONS" "$SESSIONS_SMALL" "$SESSIONS_LARGE" "$MIGRATE_ITEMS" "$CLI_VS_NOOP" "$CLI_MS" "$NOOP_MS" \
    "$(for k in "${!R[@]}"; do printf '%s=%s\n' "$k" "${R[$k]}"; done)" \
    "$STARTUP_SESSIONS" "$MEMORY_SESSIONS" "$MEMORY_TOUCH" "$MEMORY_CACHE" "$SQLITE_MIGRATE_ITEMS" \
    "$FLOOR_VS_NOOP" "$FLOOR_MS" "$SWEEP_ROUNDS" <<'EOF'
import json, os, sys
federations, small, large, migrate_items = (int(x) for x in sys.argv[1:5])
cli_vs_noop, cli_ms, noop_ms = (None if x == "null" else float(x) for x in sys.argv[5:8])
# A figure whose every round failed is empty: left out (null), not 0.
r = {k: float(v) for k, v in (line.split("=", 1) for line in sys.argv[8].splitlines() if line) if v}
startup_sessions, memory_sessions, memory_touch, memory_cache, sqlite_migrate_items = (int(x) for x in sys.argv[9:14])
cli_floor_vs_noop, cli_floor_ms = (None if x == "null" else float(x) for x in sys.argv[14:16])
sweep_rounds = int(sys.argv[16])

def ratio(a, b):
    return round(r[a] / r[b], 3)

clients = [("broker", "IdentityBroker (in-process)"), ("boto3", "boto3 + threads"),
           ("urlsession", "URLSession + JSONDecoder"), ("floor", "curl --parallel (floor)")]
out = {}
if "broker_c1" in r:  # absent with ONLY_POSTGRES=1
    print(file=sys.stderr)
    print(f"{'client':32} {'fed/s c1':>10} {'fed/s c64':>10}", file=sys.stderr)
    for key, name in clients:
        print(f"{name:32} {r[key + '_c1']:>10.0f} {r[key + '_c64']:>10.0f}", file=sys.stderr)
    print(f"machine: {os.cpu_count()} CPUs, N = {federations} federations (2 requests each)", file=sys.stderr)
    for c in (1, 64):
        for other in ("boto3", "urlsession", "floor"):
            out[f"broker_vs_{other}_c{c}"] = ratio(f"broker_c{c}", f"{other}_c{c}")
    for key, _ in clients:
        for c in (1, 64):
            out[f"{key}_fed_per_s_c{c}"] = round(r[f"{key}_c{c}"], 1)
    # Every level of the sweep, for Benchmarks/plot_sweep.py.
    levels = sorted({int(k.rsplit("_c", 1)[1]) for k in r if k.startswith("broker_c")})
    out["sweep"] = {"concurrency": levels, **{key: [round(r[f"{key}_c{c}"], 1) for c in levels] for key, _ in clients}}
if "durable_set" in r:  # absent with ONLY_SWEEP=1
    out["bytes_per_session_1k"] = round(r[f"heap_{small}"])
    out["bytes_per_session_10k"] = round(r[f"heap_{large}"])
    out["rss_bytes_per_session_1k"] = round(r[f"rss_{small}"])
    out["rss_bytes_per_session_10k"] = round(r[f"rss_{large}"])
    out["cli_vs_noop"] = cli_vs_noop
    out["cli_ms"] = None if cli_ms is None else round(cli_ms, 3)
    out["noop_ms"] = None if noop_ms is None else round(noop_ms, 3)
    out["cli_floor_vs_noop"] = cli_floor_vs_noop
    out["cli_floor_ms"] = None if cli_floor_ms is None else round(cli_floor_ms, 3)
    out["durable_set_vs_floor"] = ratio("durable_set", "durable_floor")
    out["durable_sets_per_s"] = round(r["durable_set"], 1)
    out["durable_floor_per_s"] = round(r["durable_floor"], 1)
    out["keystore_get_us"] = round(r["get_us"], 2)
    out[f"migrate_{migrate_items // 1000}k_seconds"] = round(r["migrate"], 3)
# Issue 10: the SQLite keystore behind the client (null when SKIP_STORAGE=1).
def count(n):
    return f"{n // 1_000_000}m" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)
def value(key, digits=1, scale=1.0):
    return round(r[key] * scale, digits) if key in r else None
def durable_ratios(engine, durable, inmemory, floor):
    """Durable ÷ in-memory at c = 64, and at c = 1 against the bound a durable federation can
    at best reach: the in-memory federation plus one commit of the floor (null when skipped)."""
    keys = (f"{engine}_vs_inmemory_c64", f"{engine}_vs_bound_c1", f"{engine}_c1_bound_fed_per_s")
    if f"{durable}_c1" not in r:
        out.update(dict.fromkeys(keys))
        return
    bound_c1 = 1 / (1 / r[f"{inmemory}_c1"] + 1 / r[floor])
    out[keys[0]] = round(r[f"{durable}_c64"] / r[f"{inmemory}_c64"], 3)
    out[keys[1]] = round(r[f"{durable}_c1"] / bound_c1, 3)
    out[keys[2]] = round(bound_c1, 1)
def c1_ceiling(engine, inmemory, floor, c_inmemory, c_durable, c_floor=None):
    """What the C floor (Benchmarks/DurableFederationFloor) says about the c = 1 target.
    - {engine}_c1_floor_storage_us: the C client's durable federation less its in-memory
      one: the read and commit no client of this engine avoids on this machine;
    - {engine}_c1_allowed_storage_us: what the broker's target (0.8 of its bound) leaves for
      them, given the broker's own in-memory federation and the floor commit;
    - {engine}_c1_ceiling: the broker's ratio if its storage cost no more than the C floor's;
    - {engine}_c1_floor_vs_own_bound: the C client's ratio, on its own in-memory figure (and
      its own append floor for SQLite)."""
    keys = [f"{engine}_c1_{k}" for k in ("floor_storage_us", "allowed_storage_us", "ceiling", "floor_vs_own_bound")]
    if not all(k in r for k in (f"{inmemory}_c1", floor, c_inmemory, c_durable)):
        out.update(dict.fromkeys(keys))
        return
    t_memory, t_floor = 1 / r[f"{inmemory}_c1"], 1 / r[floor]
    storage = 1 / r[c_durable] - 1 / r[c_inmemory]
    out[keys[0]] = round(storage * 1e6, 1)
    out[keys[1]] = round(((t_memory + t_floor) / 0.8 - t_memory) * 1e6, 1)
    out[keys[2]] = round((t_memory + t_floor) / (t_memory + storage), 3)
    own_floor = 1 / r[c_floor] if c_floor else t_floor
    out[keys[3]] = round((1 / r[c_inmemory] + own_floor) * r[c_durable], 3)
def c64_ceiling(engine, durable, inmemory, target):
    """What the C floor at c = 64 (64 federations in flight, group commit) says about the
    c = 64 target (durable ÷ in-memory ≥ target):
    - {engine}_c64_floor_storage_us: the C client's durable federation less its in-memory one,
      per federation at full throughput;
    - {engine}_c64_allowed_storage_us: what the target leaves the broker, given its own
      in-memory federation: t_memory / target − t_memory;
    - {engine}_c64_ceiling: the broker's ratio if its storage cost no more than the C floor's;
    - {engine}_c64_floor_own_ratio: the C client's durable ÷ in-memory."""
    keys = [f"{engine}_c64_{k}" for k in ("floor_storage_us", "allowed_storage_us", "ceiling", "floor_own_ratio")]
    c_memory, c_durable = f"c_{'pg_' if engine == 'postgres' else ''}inmemory_c64", f"c_{engine}_c64"
    if not all(k in r for k in (f"{inmemory}_c64", f"{durable}_c64", c_memory, c_durable)):
        out.update(dict.fromkeys(keys))
        return
    t_memory = 1 / r[f"{inmemory}_c64"]
    storage = 1 / r[c_durable] - 1 / r[c_memory]
    out[keys[0]] = round(storage * 1e6, 1)
    out[keys[1]] = round((t_memory / target - t_memory) * 1e6, 1)
    out[keys[2]] = round(t_memory / (t_memory + storage), 3)
    out[keys[3]] = round(r[c_durable] / r[c_memory], 3)
# The floor: one fdatasync of a sealed-session-sized record.
durable_ratios("sqlite", "sqlite", "inmemory", "fdatasync_floor")
c1_ceiling("sqlite", "inmemory", "fdatasync_floor", "c_inmemory_c1", "c_sqlite_c1", "c_append")
c64_ceiling("sqlite", "sqlite", "inmemory", 0.8)
for c in (1, 64):
    out[f"sqlite_fed_per_s_c{c}"] = value(f"sqlite_c{c}")
    out[f"inmemory_fed_per_s_c{c}"] = value(f"inmemory_c{c}")
out["fdatasync_floor_per_s"] = value("fdatasync_floor")
out["fdatasync_floor_record_bytes"] = value("record_bytes", 0)
out[f"startup_{count(startup_sessions)}_sessions_ms"] = value("startup_ms", 2)
out[f"rss_mb_{count(memory_sessions)}_saved_{count(memory_touch)}_read_{count(memory_cache)}_cache"] = value("store_rss", 1, 1 / 1e6)
out[f"sqlite_migrate_{count(sqlite_migrate_items)}_seconds"] = value("sqlite_migrate", 3)
# Issue 11: the PostgreSQL keystore behind the client (null when SKIP_POSTGRES=1).
# The floor: one single-row commit (pgbench -c 1).
durable_ratios("postgres", "postgres", "pg_inmemory", "pgbench_floor")
c1_ceiling("postgres", "pg_inmemory", "pgbench_floor", "c_pg_inmemory_c1", "c_postgres_c1")
c64_ceiling("postgres", "postgres", "pg_inmemory", 0.5)
for c in (1, 64):
    out[f"postgres_fed_per_s_c{c}"] = value(f"postgres_c{c}")
    out[f"postgres_inmemory_fed_per_s_c{c}"] = value(f"pg_inmemory_c{c}")
out["pgbench_single_row_commits_per_s"] = value("pgbench_floor")
out["postgres_event_delay_ms_median"] = value("pg_event_median", 3)
out["postgres_event_delay_ms_p99"] = value("pg_event_p99", 3)
# Client A's federation to client B's state stream (A's whole federation included).
out["postgres_client_event_delay_ms_median"] = value("pg_client_event_median", 3)
out["postgres_client_event_delay_ms_p99"] = value("pg_client_event_p99", 3)
out["postgres_federate_ms_median"] = value("pg_federate_median", 3)
out["postgres_commit_ms_median"] = value("pg_commit_median", 3)
out["federations"] = federations
if "broker_c1" in r:
    out["sweep_rounds"] = sweep_rounds  # floor and broker runs per level, alternating (medians)
out["cpus"] = os.cpu_count()
print(json.dumps(out, separators=(",", ":")))
EOF
