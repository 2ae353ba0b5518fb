import Federation
import XCTest

/// The driver loop's rule for polling instead of sleeping (``BusyPollPolicy``): when it
/// polls, that every poll is bounded by the window, that slow or alternating gaps turn it
/// off, that short gaps turn it back on, and that a clock that steps back turns it off.
///
/// A "pass" below is one call of `keepPolling`, as the loop makes after every poll and
/// every wake-up.
final class BusyPollPolicyTests: XCTestCase {
    /// The window in nanoseconds; times below are nanoseconds after `base`.
    private let window = UInt64(BusyPollPolicy.window.components.attoseconds / 1_000_000_000)
    private let base = ContinuousClock.now

    private func at(_ nanoseconds: UInt64) -> ContinuousClock.Instant {
        base.advanced(by: .nanoseconds(Int64(nanoseconds)))
    }

    /// One wait of `length` nanoseconds that begins with progress at `now` and ends with
    /// progress: whether the loop polled through it. A pass at the end of the window stands
    /// for the loop's poll running out (or a wake-up from its sleep).
    private func wait(
        _ policy: inout BusyPollPolicy, at now: inout UInt64, length: UInt64, inFlight: Int = 1
    ) -> Bool {
        let polled = policy.keepPolling(now: at(now), inFlight: inFlight, progressed: true)
        if length >= window {
            XCTAssertFalse(policy.keepPolling(now: at(now + window), inFlight: inFlight, progressed: false))
        } else if polled {
            XCTAssertTrue(policy.keepPolling(now: at(now + length / 2), inFlight: inFlight, progressed: false))
        }
        now += length
        return polled
    }

    func testPollsThroughAShortGapAfterProgressAndStopsAtTheWindow() {
        var policy = BusyPollPolicy()
        XCTAssertTrue(policy.keepPolling(now: at(1_000), inFlight: 1, progressed: true))
        XCTAssertTrue(policy.keepPolling(now: at(1_000 + window / 2), inFlight: 1, progressed: false))
        XCTAssertTrue(policy.keepPolling(now: at(1_000 + window - 1), inFlight: 1, progressed: false))
        XCTAssertFalse(policy.keepPolling(now: at(1_000 + window), inFlight: 1, progressed: false))
        // The same wait, woken later without progress: still sleep.
        XCTAssertFalse(policy.keepPolling(now: at(1_000 + 3 * window), inFlight: 1, progressed: false))
    }

    func testNeverPollsWithMoreThanOneTransferInFlightOrWithoutProgress() {
        var policy = BusyPollPolicy()
        XCTAssertFalse(policy.keepPolling(now: at(5), inFlight: 0, progressed: false))
        for inFlight in [2, 3, 64] {
            XCTAssertFalse(policy.keepPolling(now: at(10), inFlight: inFlight, progressed: true))
        }
        // A poll under way ends as soon as a second transfer is in flight.
        XCTAssertTrue(policy.keepPolling(now: at(20), inFlight: 1, progressed: true))
        XCTAssertFalse(policy.keepPolling(now: at(21), inFlight: 2, progressed: false))
    }

    /// A cancellation takes the one transfer out without progress: the wait changed, so the
    /// loop stops polling and sleeps.
    func testAWaitThatChangesWithoutProgressEndsThePoll() {
        var policy = BusyPollPolicy()
        XCTAssertTrue(policy.keepPolling(now: at(100), inFlight: 1, progressed: true))
        XCTAssertFalse(policy.keepPolling(now: at(110), inFlight: 0, progressed: false))
        XCTAssertFalse(policy.keepPolling(now: at(120), inFlight: 0, progressed: false))
    }

    /// A server that answers in milliseconds: each wait for a response outlasts the window.
    /// After three misses the loop sleeps at once, so polling costs a few windows in all,
    /// not one per request.
    func testASlowServerTurnsPollingOffAfterThreeMisses() {
        var policy = BusyPollPolicy()
        var now: UInt64 = 1
        var polls = 0
        for _ in 0..<1_000 where wait(&policy, at: &now, length: 5_000_000) { polls += 1 }
        XCTAssertEqual(polls, 3)
    }

    /// One short and one long wait in turn (a request, then a commit to a database): half
    /// the waits would pay, which is not enough, so polling for that kind of wait stops.
    func testAlternatingShortAndLongWaitsTurnPollingOff() {
        var policy = BusyPollPolicy()
        var now: UInt64 = 1
        var pollsInLastHundred = 0
        for round in 0..<1_000 {
            let short = wait(&policy, at: &now, length: window / 10, inFlight: 0)
            let long = wait(&policy, at: &now, length: 3 * window, inFlight: 0)
            if round >= 900 { pollsInLastHundred += (short ? 1 : 0) + (long ? 1 : 0) }
        }
        XCTAssertEqual(pollsInLastHundred, 0)
    }

    /// Each kind of wait keeps its own score: a slow server turns polling for responses
    /// off, while a caller that queues its next request quickly keeps polling for work.
    func testWaitsForWorkAndForResponsesAreScoredSeparately() {
        var policy = BusyPollPolicy()
        var now: UInt64 = 1
        for _ in 0..<10 { _ = wait(&policy, at: &now, length: 5_000_000, inFlight: 1) }
        XCTAssertFalse(wait(&policy, at: &now, length: 5_000_000, inFlight: 1), "responses: off")
        XCTAssertTrue(wait(&policy, at: &now, length: window / 10, inFlight: 0), "work: still on")
    }

    /// Short waits slept through (polling would have paid) turn polling back on; long ones
    /// keep it off.
    func testShortWaitsTurnPollingBackOn() {
        var policy = BusyPollPolicy()
        var now: UInt64 = 1
        for _ in 0..<50 { _ = wait(&policy, at: &now, length: 5_000_000) }
        XCTAssertFalse(wait(&policy, at: &now, length: 5_000_000), "long waits: still off")
        var shortWaits = 0
        while !wait(&policy, at: &now, length: window / 4) {
            shortWaits += 1
            guard shortWaits < 100 else { return XCTFail("short waits never turned polling back on") }
        }
        XCTAssertGreaterThan(shortWaits, 3)
    }

    /// Progress seen only after the window (a thread descheduled for long) is a miss, not
    /// a hit.
    func testProgressAfterTheWindowIsAMiss() {
        var policy = BusyPollPolicy()
        var now: UInt64 = 1
        for _ in 0..<3 {
            XCTAssertTrue(policy.keepPolling(now: at(now), inFlight: 1, progressed: true))
            now += 2 * window  // no pass in between
        }
        XCTAssertFalse(policy.keepPolling(now: at(now), inFlight: 1, progressed: true))
    }

    /// A fast server: every wait ends within the window, and polling never stops.
    func testAFastServerKeepsPolling() {
        var policy = BusyPollPolicy()
        var now: UInt64 = 1
        for _ in 0..<1_000 {
            XCTAssertTrue(wait(&policy, at: &now, length: window / 2))
        }
    }

    /// A clock that steps back never keeps the loop polling.
    func testAClockThatStepsBackStopsPolling() {
        var policy = BusyPollPolicy()
        XCTAssertTrue(policy.keepPolling(now: at(10 * window), inFlight: 1, progressed: true))
        XCTAssertFalse(policy.keepPolling(now: at(5 * window), inFlight: 1, progressed: false))
    }
}
