#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// One session's state as a pure value: what it holds, whether a federation is in
/// flight, and what observers were last told. Every transition returns the state to
/// announce, or `nil` when observers already know it, so the client (the thin actor
/// that does the I/O) only applies events and publishes what comes back.
///
/// ```
/// notFederated ─federate─▶ federating ─success─▶ federated ─clock─▶ expired
///      ▲                        │ failure: back to the previous state
///      └──────── clear ─────────┴── identity gone ─▶ terminated (clear only)
/// ```
struct SessionStateMachine: Sendable {
    /// What the session holds; `nil` when nothing (cleared, or never federated).
    private(set) var record: SessionRecord?
    /// Federations of this session in flight in this client.
    private(set) var inFlight = 0
    /// The state observers were last told.
    private(set) var announced: SessionState = .notFederated

    /// A session first read from the store: observers are told only of later changes.
    init(record: SessionRecord?, now: Date, margin: Duration) {
        self.record = record
        announced = record?.state(now: now, margin: margin) ?? .notFederated
    }

    /// The state at `now`.
    func state(now: Date, margin: Duration) -> SessionState {
        if inFlight > 0 { return .federating }
        return record?.state(now: now, margin: margin) ?? .notFederated
    }

    /// A federation of this session starts.
    mutating func federationStarted(now: Date, margin: Duration) -> SessionState? {
        inFlight += 1
        return announce(now: now, margin: margin)
    }

    /// A federation ends: with the record the store now holds (its own, or a newer one
    /// another client stored), or with `nil` when it failed and the previous record stays.
    mutating func federationEnded(holding newRecord: SessionRecord??, now: Date, margin: Duration) -> SessionState? {
        inFlight = max(0, inFlight - 1)
        if case .some(let newRecord) = newRecord { record = newRecord }
        return announce(now: now, margin: margin)
    }

    /// The store says the session now holds `newRecord` (a change by any client, a
    /// clear, or a first read).
    mutating func stored(_ newRecord: SessionRecord?, now: Date, margin: Duration) -> SessionState? {
        record = newRecord
        return announce(now: now, margin: margin)
    }

    /// Time passed: announces `expired` once the credentials pass their margin.
    mutating func clockTicked(now: Date, margin: Duration) -> SessionState? {
        announce(now: now, margin: margin)
    }

    /// The current state when observers have not been told it yet (and marks it told).
    private mutating func announce(now: Date, margin: Duration) -> SessionState? {
        let current = state(now: now, margin: margin)
        guard current != announced else { return nil }
        announced = current
        return current
    }

    /// When the session's credentials will read `expired`, if it is federated now.
    func expiryDue(margin: Duration) -> Date? {
        guard record?.phase == .federated, let expiration = record?.credentials?.expiration else { return nil }
        return expiration.addingTimeInterval(-margin.timeInterval)
    }
}
