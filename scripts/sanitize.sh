#!/usr/bin/env bash
# Runs the test suite under a sanitizer, each in its own scratch path.
#
#   scripts/sanitize.sh thread  [swift test arguments...]   # .build-tsan
#   scripts/sanitize.sh address [swift test arguments...]   # .build-asan
#
# Extra arguments go to `swift test`, e.g. `--filter FederationTests`.
# Exits non-zero when a test fails or the sanitizer reports anything.
# Results and the reasons behind every option: docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."

kind="${1:-}"
shift || true
case "$kind" in
    thread)
        scratch=.build-tsan
        mkdir -p "$scratch"
        # Synchronization.Mutex takes a contended lock in libswiftSynchronization's
        # uninstrumented slow path (_lockSlow/_unlockSlow), so TSan misses the
        # happens-before edge and reports the state the Mutex guards (and objects
        # handed over through it) as racing. Reproduced standalone and checked
        # against a pthread_mutex control: docs/reliability.md. Each entry names
        # one function (a mangled-name substring; TSan reads `$` as an anchor, so
        # the `$s` prefix is left out) whose racing accesses are all inside
        # `withLock` of one Mutex, or are the creation of an object published
        # through one; only entries seen matching in a run are listed. Nothing
        # broader (no file, type or module) is suppressed.
        suppressions="$PWD/$scratch/tsan-suppressions.txt"
        cat > "$suppressions" <<'SUPP'
# Federation/HTTP/CurlMultiDriver.swift: `mailbox` (Mutex<Mailbox>)
race:10Federation15CurlMultiDriverC8takeWork
race:10Federation15CurlMultiDriverC6submit
# Federation/HTTP/CurlMultiDriver.swift: CurlTransfer.phase (Mutex<Phase>), created
# on the caller's thread and handed to the driver thread through `mailbox`
race:10Federation12CurlTransferC10isFinished
# BrokerTestSupport/LoopbackHTTPServer.swift: LoopbackServerCore.state (Mutex<State>)
race:17BrokerTestSupport18LoopbackServerCoreC6record
race:17BrokerTestSupport18LoopbackServerCoreC12markFinished
race:17BrokerTestSupport18LoopbackServerCoreC15closeConnection
race:17BrokerTestSupport18LoopbackServerCoreC19reapFinishedThreads
race:17BrokerTestSupport18LoopbackServerCoreC10acceptLoop*XEfU
race:17BrokerTestSupport18LoopbackServerCoreC4stop*XEfU
# FederationTests/HTTP/CurlTransportTests.swift: Barrier's Mutex
race:15FederationTests7Barrier*arriveAndWait*XEfU
# SecureStorage/SQLite/GroupCommitter.swift: `state` (Mutex<State>)
race:13SecureStorage14GroupCommitterC6submit*XEfU
race:13SecureStorage14GroupCommitterC5drain*XEfU
# PostgresKeystore/OperationDeadline.swift: DeadlineQueue.state (Mutex<State>; its
# `order` is a NIO CircularBuffer, whose methods the reports name first)
race:16PostgresKeystore13DeadlineQueueC8register*XEfU
race:16PostgresKeystore13DeadlineQueueC6cancel*XEfU
# PostgresKeystore/PostgresGrouper.swift: `state` (Mutex<State>)
race:16PostgresKeystore0A7GrouperC6submit*XEfU
race:16PostgresKeystore0A7GrouperC5queue*XEfU
# PostgresKeystore/PostgresPool.swift: `state` (Mutex<State>), and a Generation created
# on one thread and published to others through it
race:16PostgresKeystore0A4PoolC7current*XEfU
race:16PostgresKeystore0A4PoolC7replace*XEfU
race:16PostgresKeystore0A4PoolC10GenerationC_6number
# CredentialServer/ConnectionRoster.swift: `state` (Mutex<State>)
race:16CredentialServer16ConnectionRosterC6opened*XEfU
race:16CredentialServer16ConnectionRosterC11sentRequest*XEfU
race:16CredentialServer16ConnectionRosterC8answered*XEfU
race:16CredentialServer16ConnectionRosterC6closed*XEfU
# PostgresKeystoreTests/PostgresTestSupport.swift: Locked's Mutex
race:21PostgresKeystoreTests6LockedC8withLock*XEfU
# PostgresKeystore/PostgresPool.swift, further users of `state`
race:16PostgresKeystore0A4PoolC11wasReplaced*XEfU
race:16PostgresKeystore0A4PoolC6retire*XEfU
# CredentialServer/ListeningState.swift: `phase` (Mutex<Phase>)
race:16CredentialServer14ListeningStateC*XEfU
# Federation/HTTP/CancellationSignal.swift: `state` (Mutex<State>)
race:10Federation18CancellationSignalC11withHandler*XEfU
# BrokerTestSupport/ScriptableKeystore.swift: `state` (Mutex<State>)
race:17BrokerTestSupport18ScriptableKeystoreC5value6forKey*XEfU
race:17BrokerTestSupport18ScriptableKeystoreC5value6forKey*deferL
SUPP
        export TSAN_OPTIONS="second_deadlock_stack=1 suppressions=$suppressions ${TSAN_OPTIONS:-}"
        ;;
    address)
        scratch=.build-asan
        # detect_leaks=0: LeakSanitizer reports XCTest's and the Swift runtime's
        # own process-lifetime allocations (see docs/reliability.md), which no
        # code here can free. handle_sigbus=0: the SQLite engine's guard handles
        # SIGBUS from a truncated -shm itself, and its tests raise one on purpose;
        # ASan's own handler would end those processes first. Every other ASan
        # check stays on.
        export ASAN_OPTIONS="detect_leaks=0 handle_sigbus=0 strict_string_checks=1 detect_stack_use_after_return=1 check_initialization_order=1 ${ASAN_OPTIONS:-}"
        ;;
    *)
        echo "usage: $0 thread|address [swift test arguments...]" >&2
        exit 2
        ;;
esac

# The Swift runtime's crash backtracer trips ASan (stack-buffer-underflow in its
# memory server) and hides the real report; the sanitizer prints the stack.
export SWIFT_BACKTRACE=enable=no

swift build --build-tests --scratch-path "$scratch" --sanitize="$kind"
swift test --skip-build --scratch-path "$scratch" --sanitize="$kind" "$@"
