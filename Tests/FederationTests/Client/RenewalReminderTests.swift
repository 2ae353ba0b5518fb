import BrokerTestSupport
@testable import Federation
import Foundation
import SecureStorage
import XCTest

/// Renewal reminders: asked for a new token before the session would read expired,
/// "not now" honoured, never a refresh.
final class RenewalReminderTests: XCTestCase {
    /// Margin 10 s, lead 300 s: credentials expiring 310 s (+ `slack`) after the epoch are
    /// due for renewal `slack` seconds after federation (by the test clock).
    private func harness(slack: TimeInterval = 0.05, postponement: Duration = .seconds(60)) throws -> Harness {
        try Harness(
            configure: {
                $0.expiryMargin = .seconds(10)
                $0.renewalLeadTime = .seconds(300)
                $0.renewalPostponement = postponement
            },
            fake: FakeCognito(expiration: testEpoch.addingTimeInterval(310 + slack)))
    }

    private func reminders(_ events: [SessionEvent]) -> [SessionEvent] { events.filter(\.isRenewalDue) }

    func testAReminderComesAtTheLeadTimeWhileTheSessionStaysFederated() async throws {
        let harness = try harness()
        let events = await harness.client.events(for: "alice")
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let callsAfterFederation = harness.fake.calls.count
        harness.clock.advance(by: 1)
        let received = await collect(4, from: events)
        XCTAssertEqual(received.map(\.state), [.notFederated, .federating, .federated, .federated])
        XCTAssertEqual(received.last?.kind, .renewalDue(expiresAt: testEpoch.addingTimeInterval(300.05)))
        let snapshot = try await harness.client.session("alice")
        XCTAssertEqual(snapshot.state, .federated, "a reminder is not a state change")
        XCTAssertEqual(harness.fake.calls.count, callsAfterFederation, "nothing is refreshed")
    }

    func testTheAllSessionsStreamCarriesRemindersAndTheStateStreamDoesNot() async throws {
        let harness = try harness()
        let all = await harness.client.allStateUpdates()
        let states = await harness.client.stateUpdates(for: "alice")
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        harness.clock.advance(by: 1)
        let events = await collect(3, from: all)
        XCTAssertEqual(reminders(events).map(\.session), ["alice"])
        let stateValues = await collect(4, from: states, timeout: .milliseconds(300))
        XCTAssertEqual(stateValues, [.notFederated, .federating, .federated])
    }

    func testOneReminderPerCredentialsUntilPostponedThenNoSoonerThanTheInterval() async throws {
        let harness = try harness(slack: 100)
        let events = await harness.client.events(for: "alice")
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        harness.clock.advance(by: 101)
        _ = try await harness.client.session("alice")  // a read lets the clock act at once
        harness.clock.advance(by: 5)
        _ = try await harness.client.session("alice")
        let postponed = try await harness.client.postponeRenewalReminder(for: "alice")
        XCTAssertTrue(postponed)
        harness.clock.advance(by: 59)
        _ = try await harness.client.session("alice")
        harness.clock.advance(by: 2)
        _ = try await harness.client.session("alice")
        let received = await collect(6, from: events, timeout: .milliseconds(500))
        let due = reminders(received)
        XCTAssertEqual(due.count, 2, "one reminder, none on the next read, one more 60 s after 'not now': \(received)")
    }

    func testNoReminderAfterExpiryClearOrANewFederation() async throws {
        // A postponement reaching past the expiry: no reminder again, the expiry comes instead.
        let harness = try harness(slack: 100, postponement: .seconds(600))
        let events = await harness.client.events(for: "alice")
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        harness.clock.advance(by: 101)
        _ = try await harness.client.session("alice")
        try await harness.client.postponeRenewalReminder(for: "alice")
        harness.clock.advance(by: 1000)
        let expired = try await harness.client.session("alice")
        XCTAssertEqual(expired.state, .expired)
        // Expired: nothing to postpone a reminder for.
        let afterExpiry = try await harness.client.postponeRenewalReminder(for: "alice")
        XCTAssertFalse(afterExpiry)
        let received = await collect(6, from: events, timeout: .milliseconds(500))
        XCTAssertEqual(reminders(received).count, 1, "\(received)")
        XCTAssertEqual(received.last?.state, .expired)

        // Cleared: nothing to remind; postponing says so.
        try await harness.client.clear(session: "alice")
        let postponed = try await harness.client.postponeRenewalReminder(for: "alice")
        XCTAssertFalse(postponed)
    }

    func testANewFederationGetsRemindersOfItsOwn() async throws {
        let harness = try harness(slack: 100)
        let events = await harness.client.events(for: "alice")
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        harness.clock.advance(by: 101)
        _ = try await harness.client.session("alice")
        try await harness.client.postponeRenewalReminder(for: "alice")
        // The caller pushes a new token: new credentials, a new lead time.
        harness.fake.expiration = harness.clock.now.addingTimeInterval(400)
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        harness.clock.advance(by: 50)
        _ = try await harness.client.session("alice")
        harness.clock.advance(by: 50)
        _ = try await harness.client.session("alice")
        let received = await collect(10, from: events, timeout: .milliseconds(500))
        let due = reminders(received)
        XCTAssertEqual(due.count, 2, "\(received)")
        XCTAssertEqual(due.last?.kind, .renewalDue(expiresAt: testEpoch.addingTimeInterval(101 + 400 - 10)))
    }

    /// Thousands of sessions with reminders cost one timer, and every reminder arrives.
    func testManySessionsShareOneTimer() async throws {
        let harness = try harness(slack: 0.2)
        let watchdog = streamWatchdog(harness.client)
        defer { watchdog.cancel() }
        let all = await harness.client.allStateUpdates()
        let count = 2_000
        for index in 0..<count {
            try await harness.client.federate(token: "opaque-\(index)", provider: .facebook, session: "s\(index)")
        }
        let timers = await harness.client.timerCount
        XCTAssertEqual(timers, 1)
        harness.clock.advance(by: 1)
        var remindedSessions = Set<String>()
        for await event in all where event.isRenewalDue {
            remindedSessions.insert(event.session)
            if remindedSessions.count == count { break }
        }
        XCTAssertEqual(remindedSessions.count, count)
    }

    /// An observer that subscribes after a reminder came due (an app starting inside the lead
    /// window) is reminded: the reminder is not spent before its stream exists.
    func testAReminderAlreadyDueReachesANewObserver() async throws {
        let harness = try harness(slack: 100)
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        harness.clock.advance(by: 101)
        let events = await harness.client.events(for: "alice")
        let received = await collect(2, from: events, timeout: .seconds(2))
        XCTAssertEqual(received.first?.state, .federated)
        XCTAssertEqual(reminders(received).count, 1, "\(received)")

        try await assertAFirstObserverOfEverySessionIsReminded(readFirst: false)
    }

    /// A reminder that falls due while nobody would receive it (the session's states are
    /// observed, its events are not, and nobody observes every session) is not spent: the
    /// clock acts on the session (a read) and the timer then waits for the expiry alone; the
    /// first observer of its events, or of every session, within the lead window is reminded,
    /// once.
    func testAReminderDueWhileNobodyWouldReceiveItIsKeptForTheFirstObserver() async throws {
        let harness = try harness(slack: 100)
        let states = await harness.client.stateUpdates(for: "alice")
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        harness.clock.advance(by: 101)
        _ = try await harness.client.session("alice")  // the clock acts: a reminder due, nobody to tell
        let expiryDue = testEpoch.addingTimeInterval(410 - 10)
        let waitsForTheExpiry = await eventually(timeout: .seconds(10)) { await harness.client.expirySchedule.next == expiryDue }
        XCTAssertTrue(waitsForTheExpiry, "the timer keeps waking for a reminder nobody receives")

        let events = await harness.client.events(for: "alice")
        _ = try await harness.client.session("alice")  // and once only
        let received = await collect(4, from: events, timeout: .milliseconds(500))
        XCTAssertEqual(received.first?.state, .federated)
        XCTAssertEqual(reminders(received).count, 1, "\(received)")

        try await assertAFirstObserverOfEverySessionIsReminded(readFirst: true)
        withExtendedLifetime(states) {}
    }

    /// A session federated while nobody would receive its reminder is scheduled for its expiry
    /// alone; an observer of its events, or of every session, that subscribes before the
    /// reminder is due puts the reminder back in the schedule, and the timer delivers it on
    /// time (no read).
    func testAnObserverSubscribingBeforeTheLeadTimeIsRemindedOnTime() async throws {
        for everySession in [false, true] {
            let harness = try harness(slack: 0.3)
            try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
            let scheduled = await harness.client.expirySchedule.next
            let expiryOnly = try XCTUnwrap(scheduled)
            XCTAssertGreaterThan(expiryOnly, testEpoch.addingTimeInterval(200), "scheduled for a reminder nobody would receive")
            let events = everySession ? await harness.client.allStateUpdates() : await harness.client.events(for: "alice")
            let rescheduled = await harness.client.expirySchedule.next
            let next = try XCTUnwrap(rescheduled)
            XCTAssertLessThan(next, testEpoch.addingTimeInterval(1), "every session: \(everySession)")
            harness.clock.advance(by: 1)
            let received = await collect(everySession ? 1 : 2, from: events, timeout: .seconds(3))
            XCTAssertEqual(reminders(received).map(\.session), ["alice"], "every session: \(everySession): \(received)")
        }
    }

    /// A session whose reminder came due (and, with `readFirst`, was read since, while nobody
    /// observed it) reminds the first observer of every session at once.
    private func assertAFirstObserverOfEverySessionIsReminded(readFirst: Bool, line: UInt = #line) async throws {
        let harness = try self.harness(slack: 100)
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "bob")
        harness.clock.advance(by: 101)
        if readFirst { _ = try await harness.client.session("bob") }
        let all = await harness.client.allStateUpdates()
        let received = await collect(1, from: all, timeout: .seconds(2))
        XCTAssertEqual(reminders(received).map(\.session), ["bob"], line: line)
    }

    /// Reads reschedule the session's wake-up; they must not pile entries up in the schedule
    /// (a credential server reading at 100 requests a second would add 360,000 an hour).
    func testReadsDoNotGrowTheSchedule() async throws {
        let harness = try harness(slack: 100)
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        for _ in 0..<5_000 {
            _ = try await harness.client.session("alice")
        }
        let entries = await harness.client.expirySchedule.count
        XCTAssertLessThanOrEqual(entries, 2)
    }

    /// A session evicted from a small cache and read again keeps what it was reminded of and
    /// its "not now": no second reminder for the same credentials, none before the postponement ends.
    func testEvictionForgetsNeitherAReminderNorANotNow() async throws {
        let harness = try Harness(
            configure: {
                $0.expiryMargin = .seconds(10)
                $0.renewalLeadTime = .seconds(300)
                $0.renewalPostponement = .seconds(60)
                $0.sessionCacheCapacity = 1
            },
            fake: FakeCognito(expiration: testEpoch.addingTimeInterval(410)))
        let all = await harness.client.allStateUpdates()
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        harness.clock.advance(by: 101)
        _ = try await harness.client.session("alice")  // reminded
        _ = try await harness.client.session("bob")  // evicts alice
        _ = try await harness.client.session("alice")  // read again: reminded already
        try await harness.client.postponeRenewalReminder(for: "alice")
        _ = try await harness.client.session("bob")
        harness.clock.advance(by: 30)
        _ = try await harness.client.session("alice")  // read again inside the postponement
        // A marker in the all-sessions stream between the two halves.
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "marker")
        _ = try await harness.client.session("bob")
        harness.clock.advance(by: 31)
        _ = try await harness.client.session("alice")  // the postponement is over
        // One collection: a stream whose consumer is cancelled ends.
        let received = await collect(20, from: all, timeout: .milliseconds(500))
        let alice = received.filter { $0.session == "alice" || ($0.session == "marker" && !$0.isRenewalDue) }
        let marker = try XCTUnwrap(alice.firstIndex { $0.session == "marker" }, "\(received)")
        XCTAssertEqual(reminders(Array(alice[..<marker])).count, 1, "one reminder before the postponement, none inside it: \(received)")
        XCTAssertEqual(reminders(Array(alice[marker...])).count, 1, "one once it is over: \(received)")
    }

    /// Observers of every session hear of the expiry and the clear of a session the cache
    /// evicted (held by nobody, it would otherwise change silently).
    func testObserversOfEverySessionHearOfAnEvictedSessionsExpiryAndClear() async throws {
        let harness = try Harness(configure: { $0.sessionCacheCapacity = 1 })
        let all = await harness.client.allStateUpdates()
        let probe = await harness.client.allStateUpdates()
        try await harness.client.federate(token: TestJWT.valid(sub: "a"), provider: .google, session: "alice")
        try await harness.client.federate(token: TestJWT.valid(sub: "b"), provider: .google, session: "bob")  // evicts alice
        // Past alice's renewal reminder, not her expiry: read back, she is announced nothing
        // (a reminder is only for sessions held; her state did not change).
        harness.clock.advance(by: 3600 - 120 - 300 + 10)
        _ = await harness.client.allStateUpdates()  // due times are acted on when someone subscribes
        try await Task.sleep(for: .milliseconds(200))
        harness.clock.advance(by: 7200)
        _ = await harness.client.allStateUpdates()
        let expired = await first(SessionEvent(session: "alice", state: .expired), in: probe)
        XCTAssertTrue(expired, "alice's expiry was never announced")
        harness.fake.expiration = testEpoch.addingTimeInterval(7200 + 3600)
        try await harness.client.federate(token: TestJWT.valid(sub: "c"), provider: .google, session: "carol")  // evicts alice again
        try await harness.client.clear(session: "alice")
        let events = await collect(20, from: all, timeout: .seconds(1)).filter { $0.session == "alice" }
        XCTAssertEqual(events.map(\.state), [.federating, .federated, .expired, .notFederated], "\(events)")
    }

    /// An evicted session whose read-back fails when it falls due (the store away) is read
    /// again later, so observers of every session still hear of its expiry.
    func testAnEvictedSessionsExpiryIsAnnouncedOnceTheStoreIsReadableAgain() async throws {
        let (store, harness, probe) = try await clientWithAliceEvicted()
        store.setUnreachable(true)
        let readBack = await aliceIsReadBackWhenDue(store, harness)
        XCTAssertTrue(readBack, "alice was not read back")
        store.setUnreachable(false)
        harness.clock.advance(by: 2)  // past the first retry's due time
        _ = await harness.client.allStateUpdates()
        let expired = await first(SessionEvent(session: "alice", state: .expired), in: probe)
        XCTAssertTrue(expired, "alice's expiry was never announced")
    }

    /// Evicted sessions that fall due together (the wall clock stepped past a whole credential
    /// lifetime) are read back a few at a time, not one read each at once; every expiry is
    /// still announced.
    func testEvictedSessionsFallingDueTogetherAreReadBackAFewAtATime() async throws {
        let store = ScriptableKeystore(wrapping: InMemoryKeystore())
        let harness = try Harness(configure: { $0.sessionCacheCapacity = 1 }, keystore: store)
        let all = await harness.client.allStateUpdates()
        let count = 150
        for index in 0..<count {
            try await harness.client.federate(token: TestJWT.valid(sub: "u\(index)"), provider: .google, session: "s\(index)")
        }
        store.setReadDelay(.milliseconds(20))
        harness.clock.advance(by: 7200)
        _ = await harness.client.allStateUpdates()  // due times are acted on when someone subscribes
        let events = await collect(3 * count, from: all, timeout: .seconds(30))
        let expired = Set(events.filter { $0.state == .expired }.map(\.session))
        XCTAssertEqual(expired.count, count, "every expiry is announced")
        XCTAssertGreaterThan(store.counts.mostConcurrentReads, 1, "the read-backs ran one by one")
        XCTAssertLessThanOrEqual(store.counts.mostConcurrentReads, FederationClient.reloadWidth)
    }

    /// A failed read-back's retry that falls due once nobody observes every session is not
    /// made, and its failure count goes with it (kept, one entry per such session stayed for
    /// the client's life); so does one whose session was cached again meanwhile.
    func testARetriedReadBackThatIsNotMadeLeavesNoFailureCountBehind() async throws {
        for cachedAgain in [false, true] {
            let store = ScriptableKeystore(wrapping: InMemoryKeystore())
            let harness = try Harness(configure: { $0.sessionCacheCapacity = 1 }, keystore: store)
            var all: AsyncStream<SessionEvent>? = await harness.client.allStateUpdates()
            try await harness.client.federate(token: TestJWT.valid(sub: "a"), provider: .google, session: "alice")
            try await harness.client.federate(token: TestJWT.valid(sub: "b"), provider: .google, session: "bob")  // evicts alice
            store.setUnreachable(true)
            let readBack = await aliceIsReadBackWhenDue(store, harness)
            XCTAssertTrue(readBack, "alice was not read back")
            let counted = await eventually { await harness.client.evictedReadFailures["alice"] != nil }
            XCTAssertTrue(counted, "the failed read-back was not counted")
            store.setUnreachable(false)
            if cachedAgain {
                _ = try await harness.client.session("alice")  // evicts bob
            } else {
                all = nil  // the last observer of every session goes
            }
            harness.clock.advance(by: 60)  // past the retry's due time
            await harness.client.announceDueExpiries()
            let failures = await harness.client.evictedReadFailures
            XCTAssertEqual(failures, [:], "cached again: \(cachedAgain)")
            withExtendedLifetime(all) {}
        }
    }

    /// An evicted session whose item no longer opens is read back once when it falls due, and
    /// not again: it would not open later either, and retrying it would read it forever.
    func testAnEvictedSessionThatDoesNotOpenIsNotReadAgainAndAgain() async throws {
        let (store, harness, all) = try await clientWithAliceEvicted()
        // Damaged unseen (the feed drops the change), as a bad sector or another version would.
        store.setDropsStoreChanges(true)
        try await store.set(Array("not a session record".utf8), forKey: "session.alice")
        let readBack = await aliceIsReadBackWhenDue(store, harness)
        XCTAssertTrue(readBack, "alice was not read back")
        let readsAfterFailure = store.counts.reads(of: "session.alice")
        for _ in 0..<3 {
            harness.clock.advance(by: 60)  // past any retry's due time
            _ = await harness.client.allStateUpdates()
            try await Task.sleep(for: .milliseconds(100))
        }
        XCTAssertEqual(store.counts.reads(of: "session.alice"), readsAfterFailure, "an item that does not open was read again")
        withExtendedLifetime(all) {}
    }

    /// Due times are wall-clock times: a clock stepped forward while the timer sleeps (NTP, a
    /// resumed virtual machine) still gets the expiry announced, since the timer never sleeps
    /// longer than `longestExpiryTimerSleep` before looking at the clock again.
    func testAnExpiryIsAnnouncedWhenTheWallClockStepsForwardDuringTheTimersSleep() async throws {
        let harness = try Harness()
        await harness.client.setLongestExpiryTimerSleep(.milliseconds(50))
        let states = await harness.client.stateUpdates(for: "alice")
        try await harness.client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        try await Task.sleep(for: .milliseconds(120))  // the timer slept and looked once at least
        harness.clock.advance(by: 7200)
        let seen = await collect(4, from: states, timeout: .seconds(3))
        XCTAssertEqual(seen, [.notFederated, .federating, .federated, .expired])
    }

    /// A client that caches one session, observed by a stream of every session's events,
    /// whose alice (an hour's credentials) bob's federation evicted.
    private func clientWithAliceEvicted() async throws -> (ScriptableKeystore, Harness, AsyncStream<SessionEvent>) {
        let store = ScriptableKeystore(wrapping: InMemoryKeystore())
        let harness = try Harness(configure: { $0.sessionCacheCapacity = 1 }, keystore: store)
        let all = await harness.client.allStateUpdates()
        try await harness.client.federate(token: TestJWT.valid(sub: "a"), provider: .google, session: "alice")
        try await harness.client.federate(token: TestJWT.valid(sub: "b"), provider: .google, session: "bob")  // evicts alice
        return (store, harness, all)
    }

    /// Moves the clock past alice's expiry; whether she is then read back (the read may fail).
    private func aliceIsReadBackWhenDue(_ store: ScriptableKeystore, _ harness: Harness) async -> Bool {
        let readsBefore = store.counts.reads(of: "session.alice")
        harness.clock.advance(by: 7200)
        _ = await harness.client.allStateUpdates()  // due times are acted on when someone subscribes
        return await eventually { store.counts.reads(of: "session.alice") > readsBefore }
    }

    /// Whether `event` arrives on `stream` within `timeout`.
    private func first(_ event: SessionEvent, in stream: AsyncStream<SessionEvent>, timeout: Duration = .seconds(5)) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                for await element in stream where element == event { return true }
                return false
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return false
            }
            let found = await group.next() ?? false
            group.cancelAll()
            return found
        }
    }
}

extension FederationClient {
    func setLongestExpiryTimerSleep(_ duration: Duration) {
        longestExpiryTimerSleep = duration
    }
}
