import BrokerTestSupport
@testable import Federation
import Foundation
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
}
