@testable import Federation
import Foundation
import XCTest

/// The session state machine alone, as a value, with no client, store or clock behind it:
/// every transition and what it tells observers (a state, or `nil` when they already know it).
final class SessionStateMachineTests: XCTestCase {
    private let start = Date(timeIntervalSince1970: 1_700_000_000)
    private let margin: Duration = .seconds(120)
    private let lead: Duration = .seconds(300)

    private func record(expiringIn seconds: TimeInterval, phase: SessionRecord.Phase = .federated) -> SessionRecord {
        SessionRecord(
            phase: phase, identityId: "us-east-1:id", provider: "accounts.google.com",
            credentials: AWSCredentials(
                accessKeyId: "ASIA", secretAccessKey: "secret", sessionToken: "token",
                expiration: start.addingTimeInterval(seconds)))
    }

    private func at(_ seconds: TimeInterval) -> Date { start.addingTimeInterval(seconds) }

    func testAFirstReadAnnouncesNothingAndLaterChangesOnce() {
        var machine = SessionStateMachine(record: record(expiringIn: 3600), now: start, margin: margin)
        XCTAssertEqual(machine.announced, .federated, "a first read is what observers start from")
        XCTAssertNil(machine.stored(record(expiringIn: 7200), now: start, margin: margin), "still federated: nothing to tell")
        XCTAssertEqual(machine.stored(nil, now: start, margin: margin), .notFederated, "cleared by anyone")
        XCTAssertNil(machine.stored(nil, now: start, margin: margin))
        XCTAssertEqual(machine.stored(record(expiringIn: 60, phase: .terminated), now: start, margin: margin), .terminated)
    }

    func testAFederationGoesThroughFederatingAndAFailureGoesBack() {
        var machine = SessionStateMachine(record: record(expiringIn: 3600), now: start, margin: margin)
        XCTAssertEqual(machine.federationStarted(now: start, margin: margin), .federating)
        XCTAssertNil(machine.federationStarted(now: start, margin: margin), "a second federation in flight")
        XCTAssertEqual(machine.inFlight, 2)
        XCTAssertNil(machine.federationEnded(holding: nil, now: start, margin: margin), "one still in flight")
        XCTAssertEqual(machine.state(now: start, margin: margin), .federating)
        // The last one fails: the previous record stays, and observers hear it again.
        XCTAssertEqual(machine.federationEnded(holding: nil, now: start, margin: margin), .federated)
        XCTAssertEqual(machine.record?.credentials?.expiration, at(3600))
        XCTAssertEqual(machine.inFlight, 0)
        XCTAssertNil(machine.federationEnded(holding: nil, now: start, margin: margin), "an extra end does not go below zero")
        XCTAssertEqual(machine.inFlight, 0)
    }

    func testAFederationEndsWithTheRecordTheStoreHolds() {
        var machine = SessionStateMachine(record: nil, now: start, margin: margin)
        XCTAssertEqual(machine.announced, .notFederated)
        XCTAssertEqual(machine.federationStarted(now: start, margin: margin), .federating)
        XCTAssertEqual(machine.federationEnded(holding: .some(record(expiringIn: 3600)), now: start, margin: margin), .federated)
        // A federation that ends on a cleared store (`.some(nil)`): nothing held.
        XCTAssertEqual(machine.federationStarted(now: start, margin: margin), .federating)
        XCTAssertEqual(machine.federationEnded(holding: .some(nil), now: start, margin: margin), .notFederated)
        XCTAssertNil(machine.record)
    }

    func testTheClockExpiresTheSessionAtItsMarginOnce() {
        var machine = SessionStateMachine(record: record(expiringIn: 3600), now: start, margin: margin)
        XCTAssertEqual(machine.expiryDue(margin: margin), at(3600 - 120))
        XCTAssertNil(machine.clockTicked(now: at(3600 - 121), margin: margin, renewalLead: .zero, reminders: false).state)
        XCTAssertEqual(machine.clockTicked(now: at(3600 - 120), margin: margin, renewalLead: .zero, reminders: false).state, .expired)
        XCTAssertNil(machine.clockTicked(now: at(3600), margin: margin, renewalLead: .zero).state, "told once")
        XCTAssertNil(machine.nextWakeUp(margin: margin, renewalLead: lead), "nothing left to wake up for")
        // No expiry is due for a session that is not federated.
        XCTAssertNil(SessionStateMachine(record: record(expiringIn: 3600, phase: .terminated), now: start, margin: margin).expiryDue(margin: margin))
    }

    func testOneRenewalReminderPerCredentialsUnlessPostponed() {
        var machine = SessionStateMachine(record: record(expiringIn: 3600), now: start, margin: margin)
        let due = at(3600 - 120 - 300)
        XCTAssertEqual(machine.renewalDue(margin: margin, lead: lead), due)
        XCTAssertEqual(machine.nextWakeUp(margin: margin, renewalLead: lead), due)
        XCTAssertNil(machine.clockTicked(now: at(0), margin: margin, renewalLead: lead).remind, "not due yet")
        XCTAssertNil(machine.clockTicked(now: due, margin: margin, renewalLead: lead, reminders: false).remind, "left for a later tick")
        XCTAssertEqual(machine.clockTicked(now: due, margin: margin, renewalLead: lead).remind, at(3600 - 120), "reminded, with when they expire")
        XCTAssertNil(machine.clockTicked(now: due.addingTimeInterval(1), margin: margin, renewalLead: lead).remind, "once per credentials")
        XCTAssertNil(machine.renewalDue(margin: margin, lead: lead))

        // "Not now": another reminder no sooner than the postponement's end.
        XCTAssertTrue(machine.postponeRenewal(now: due, margin: margin, interval: .seconds(60)))
        XCTAssertEqual(machine.renewalDue(margin: margin, lead: lead), due.addingTimeInterval(60))
        XCTAssertNil(machine.clockTicked(now: due.addingTimeInterval(59), margin: margin, renewalLead: lead).remind)
        XCTAssertNotNil(machine.clockTicked(now: due.addingTimeInterval(60), margin: margin, renewalLead: lead).remind)
        // A postponement past the expiry means no reminder at all.
        XCTAssertTrue(machine.postponeRenewal(now: due.addingTimeInterval(60), margin: margin, interval: .seconds(3600)))
        XCTAssertNil(machine.renewalDue(margin: margin, lead: lead))
        XCTAssertEqual(machine.nextWakeUp(margin: margin, renewalLead: lead), at(3600 - 120), "the expiry is still due")

        // New credentials: reminded again in their turn.
        XCTAssertNil(machine.stored(record(expiringIn: 7200), now: due, margin: margin))
        XCTAssertEqual(machine.renewalDue(margin: margin, lead: lead), at(7200 - 120 - 300))
        // Nothing to postpone once expired, or without a record.
        XCTAssertFalse(machine.postponeRenewal(now: at(7200), margin: margin, interval: .seconds(60)))
        var empty = SessionStateMachine(record: nil, now: start, margin: margin)
        XCTAssertFalse(empty.postponeRenewal(now: start, margin: margin, interval: .seconds(60)))
    }

    func testNoReminderWhileAFederationIsInFlight() {
        var machine = SessionStateMachine(record: record(expiringIn: 3600), now: start, margin: margin)
        _ = machine.federationStarted(now: start, margin: margin)
        let due = at(3600 - 120 - 300)
        XCTAssertNil(machine.clockTicked(now: due, margin: margin, renewalLead: lead).remind)
        XCTAssertNil(machine.nextWakeUp(margin: margin, renewalLead: lead), "the federation's end reschedules")
        XCTAssertEqual(machine.federationEnded(holding: nil, now: due, margin: margin), .federated)
        XCTAssertNotNil(machine.clockTicked(now: due, margin: margin, renewalLead: lead).remind)
    }

    /// An evicted session read again neither reminds twice nor forgets "not now", and a
    /// memory of other credentials is not taken back.
    func testReminderMemoryOutlivesTheCacheEntryForTheSameCredentialsOnly() {
        var machine = SessionStateMachine(record: record(expiringIn: 3600), now: start, margin: margin)
        XCTAssertNil(machine.reminderMemory, "nothing reminded yet")
        let due = at(3600 - 120 - 300)
        _ = machine.clockTicked(now: due, margin: margin, renewalLead: lead)
        let memory = try? XCTUnwrap(machine.reminderMemory)
        XCTAssertEqual(memory?.expiration, at(3600))

        var readAgain = SessionStateMachine(record: record(expiringIn: 3600), now: due, margin: margin)
        XCTAssertEqual(readAgain.renewalDue(margin: margin, lead: lead), due)
        if let memory { readAgain.recall(memory) }
        XCTAssertNil(readAgain.renewalDue(margin: margin, lead: lead), "already reminded for these credentials")

        var renewed = SessionStateMachine(record: record(expiringIn: 7200), now: due, margin: margin)
        if let memory { renewed.recall(memory) }
        XCTAssertEqual(renewed.renewalDue(margin: margin, lead: lead), at(7200 - 120 - 300), "another set of credentials")
    }
}
