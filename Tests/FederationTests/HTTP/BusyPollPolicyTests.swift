import Federation
import XCTest

/// The driver loop's rule for polling instead of sleeping (``BusyPollPolicy``): when it
/// polls, that every poll is bounded by the window, that slow or alternating gaps turn it
/// off, and that short sleeps turn it back on.
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
    /// After a few misses the loop sleeps at once, so polling costs a few windows in all,
    /// not one per request.
    func testASlowServerTurnsPollingOffAfterAFewMisses() {
        var policy = BusyPollPolicy()
        var now: UInt64 = 0
        var polls = 0
        for _ in 0..<1_000 {
            if policy.keepPolling(now: now, inFlight: 1, progressed: true) {
                polls += 1
                XCTAssertFalse(policy.keepPolling(now: now + window, inFlight: 1, progressed: false))
            }
            policy.slept(for: 5_000_000, inFlight: 1)
            now += 5_000_000
        }
        XCTAssertEqual(polls, 3)
    }

    /// One short and one long wait in turn (a request, then a commit to a database): half
    /// the waits would pay, which is not enough, so polling for that kind of wait stops.
    func testAlternatingShortAndLongWaitsTurnPollingOff() {
        var policy = BusyPollPolicy()
        var now: UInt64 = 0
        var pollsInLastHundred = 0
        for round in 0..<1_000 {
            // The short gap: the next request comes quickly.
            let polledShort = policy.keepPolling(now: now, inFlight: 0, progressed: true)
            if !polledShort { policy.slept(for: window / 10, inFlight: 0) }
            now += window / 10
            // The long gap: nothing for two windows.
            let polledLong = policy.keepPolling(now: now, inFlight: 0, progressed: true)
            if polledLong {
                XCTAssertFalse(policy.keepPolling(now: now + window, inFlight: 0, progressed: false))
            }
            policy.slept(for: window, inFlight: 0)
            now += 2 * window
            if round >= 900 { pollsInLastHundred += (polledShort ? 1 : 0) + (polledLong ? 1 : 0) }
        }
        XCTAssertEqual(pollsInLastHundred, 0)
    }

    /// Each kind of wait keeps its own score: a slow server turns polling for responses
    /// off, while a caller that queues its next request quickly keeps polling for work.
    func testWaitsForWorkAndForResponsesAreScoredSeparately() {
        var policy = BusyPollPolicy()
        var now: UInt64 = 0
        while policy.keepPolling(now: now, inFlight: 1, progressed: true) {
            XCTAssertFalse(policy.keepPolling(now: now + window, inFlight: 1, progressed: false))
            policy.slept(for: 5_000_000, inFlight: 1)
            now += 10 * window
        }
        XCTAssertFalse(policy.keepPolling(now: now, inFlight: 1, progressed: true), "responses: off")
        // A completion leaves nothing in flight: polling for the next request is still allowed.
        XCTAssertTrue(policy.keepPolling(now: now + 1, inFlight: 0, progressed: true))
    }

    /// Sleeps shorter than the window (polling would have paid) turn polling back on;
    /// long sleeps keep it off.
    func testShortSleepsTurnPollingBackOn() {
        var policy = BusyPollPolicy()
        var now: UInt64 = 0
        while policy.keepPolling(now: now, inFlight: 1, progressed: true) {
            _ = policy.keepPolling(now: now + window, inFlight: 1, progressed: false)
            policy.slept(for: 5_000_000, inFlight: 1)
            now += 20 * window
        }
        for _ in 0..<50 { policy.slept(for: window * 10, inFlight: 1) }
        XCTAssertFalse(policy.keepPolling(now: now + 1, inFlight: 1, progressed: true), "long sleeps: still off")
        var shortSleeps = 0
        while !policy.keepPolling(now: now + 2, inFlight: 1, progressed: true) {
            policy.slept(for: window / 4, inFlight: 1)
            shortSleeps += 1
            XCTAssertLessThan(shortSleeps, 100, "short sleeps never turned polling back on")
        }
        XCTAssertGreaterThan(shortSleeps, 0)
    }

    /// A fast server: every wait ends within the window, and polling never stops.
    func testAFastServerKeepsPolling() {
        var policy = BusyPollPolicy()
        var now: UInt64 = 0
        for _ in 0..<1_000 {
            XCTAssertTrue(policy.keepPolling(now: now, inFlight: 1, progressed: true))
            XCTAssertTrue(policy.keepPolling(now: now + window / 2, inFlight: 1, progressed: false))
            now += window / 2 + 1
        }
    }

    func testTheClockIsMonotonic() {
        let first = BusyPollPolicy.now()
        let second = BusyPollPolicy.now()
        XCTAssertGreaterThan(first, 0)
        XCTAssertGreaterThanOrEqual(second, first)
    }
}
