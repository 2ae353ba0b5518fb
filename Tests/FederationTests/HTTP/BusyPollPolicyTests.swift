import Federation
import XCTest

/// The driver loop's rule for polling instead of sleeping (``BusyPollPolicy``): when it
/// polls, that every poll is bounded by the window, that a slow server turns it off after
/// a few misses, and that short sleeps turn it back on.
final class BusyPollPolicyTests: XCTestCase {
    private let window = BusyPollPolicy.window

    func testPollsThroughAShortGapAfterProgressAndStopsAtTheWindow() {
        var policy = BusyPollPolicy()
        XCTAssertTrue(policy.keepPolling(now: 1_000, inFlight: 1, progressed: true))
        XCTAssertTrue(policy.keepPolling(now: 1_000 + window / 2, inFlight: 1, progressed: false))
        XCTAssertTrue(policy.keepPolling(now: 1_000 + window - 1, inFlight: 1, progressed: false))
        XCTAssertFalse(policy.keepPolling(now: 1_000 + window, inFlight: 1, progressed: false))
        // Not polling any more: no progress means sleep.
        XCTAssertFalse(policy.keepPolling(now: 1_000 + window + 1, inFlight: 1, progressed: false))
    }

    func testNeverPollsWithMoreThanOneTransferInFlightOrWithoutProgress() {
        var policy = BusyPollPolicy()
        XCTAssertFalse(policy.keepPolling(now: 0, inFlight: 0, progressed: false))
        for inFlight in [2, 3, 64] {
            XCTAssertFalse(policy.keepPolling(now: 10, inFlight: inFlight, progressed: true))
        }
        // A poll under way ends as soon as a second transfer is in flight.
        XCTAssertTrue(policy.keepPolling(now: 20, inFlight: 1, progressed: true))
        XCTAssertFalse(policy.keepPolling(now: 21, inFlight: 2, progressed: false))
    }

    /// A server that answers in milliseconds: each wait for a response outlasts the window.
    /// After `maximumCredit` misses the loop sleeps at once, so polling costs a few windows
    /// in all, not one per request.
    func testASlowServerTurnsPollingOffAfterTheCreditIsSpent() {
        var policy = BusyPollPolicy()
        var now: UInt64 = 0
        var polls = 0
        for _ in 0..<20 {
            if policy.keepPolling(now: now, inFlight: 1, progressed: true) {
                polls += 1
                XCTAssertFalse(policy.keepPolling(now: now + window, inFlight: 1, progressed: false))
            } else {
                policy.slept(for: 5_000_000, inFlight: 1)
            }
            now += 5_000_000
        }
        XCTAssertEqual(polls, BusyPollPolicy.maximumCredit)
    }

    /// Each kind of wait keeps its own credit: a slow server spends the credit for
    /// responses, while a caller that queues its next request quickly keeps polling for work.
    func testWaitsForWorkAndForResponsesKeepSeparateCredit() {
        var policy = BusyPollPolicy()
        var now: UInt64 = 0
        for _ in 0..<BusyPollPolicy.maximumCredit {
            XCTAssertTrue(policy.keepPolling(now: now, inFlight: 1, progressed: true))
            XCTAssertFalse(policy.keepPolling(now: now + window, inFlight: 1, progressed: false))
            now += 2 * window
        }
        XCTAssertFalse(policy.keepPolling(now: now, inFlight: 1, progressed: true), "credit for responses spent")
        // A completion leaves nothing in flight: polling for the next request is still allowed.
        XCTAssertTrue(policy.keepPolling(now: now + 1, inFlight: 0, progressed: true))
    }

    /// Sleeps shorter than the window (polling would have paid) earn credit back; long
    /// sleeps do not.
    func testShortSleepsEarnCreditBack() {
        var policy = BusyPollPolicy()
        var now: UInt64 = 0
        for _ in 0..<BusyPollPolicy.maximumCredit {
            _ = policy.keepPolling(now: now, inFlight: 1, progressed: true)
            _ = policy.keepPolling(now: now + window, inFlight: 1, progressed: false)
            now += 2 * window
        }
        XCTAssertFalse(policy.keepPolling(now: now, inFlight: 1, progressed: true))
        policy.slept(for: window * 10, inFlight: 1)
        XCTAssertFalse(policy.keepPolling(now: now + 1, inFlight: 1, progressed: true), "a long sleep earns nothing")
        policy.slept(for: window / 4, inFlight: 1)
        XCTAssertTrue(policy.keepPolling(now: now + 2, inFlight: 1, progressed: true), "a short sleep earns a credit")
    }

    /// A wait that ends with progress inside the window is a hit: the credit spent by
    /// earlier misses comes back, so a fast server keeps polling indefinitely.
    func testHitsRestoreCredit() {
        var policy = BusyPollPolicy()
        var now: UInt64 = 0
        for _ in 0..<(BusyPollPolicy.maximumCredit - 1) {
            _ = policy.keepPolling(now: now, inFlight: 1, progressed: true)
            _ = policy.keepPolling(now: now + window, inFlight: 1, progressed: false)
            now += 2 * window
        }
        // One credit left; from here on every response arrives within the window.
        for _ in 0..<100 {
            XCTAssertTrue(policy.keepPolling(now: now, inFlight: 1, progressed: true))
            XCTAssertTrue(policy.keepPolling(now: now + window / 2, inFlight: 1, progressed: false))
            now += window / 2 + 1
        }
        // Back to full credit: it takes `maximumCredit` misses to stop again.
        var misses = 0
        while policy.keepPolling(now: now, inFlight: 1, progressed: true) {
            XCTAssertFalse(policy.keepPolling(now: now + window, inFlight: 1, progressed: false))
            misses += 1
            now += 2 * window
        }
        XCTAssertEqual(misses, BusyPollPolicy.maximumCredit)
    }

    func testTheClockIsMonotonic() {
        let first = BusyPollPolicy.now()
        let second = BusyPollPolicy.now()
        XCTAssertGreaterThan(first, 0)
        XCTAssertGreaterThanOrEqual(second, first)
    }
}
