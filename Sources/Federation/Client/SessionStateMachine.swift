#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SecureStorage

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
    /// The credentials' expiration a renewal reminder was delivered for (none again for them).
    private var remindedFor: Date?
    /// "Not now": no reminder for the credentials expiring at `expiration` before `until`.
    private var postponed: (expiration: Date, until: Date)?

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

    /// Time passed: announces `expired` once the credentials pass their margin, and says
    /// whether a renewal reminder is due now (at most once per credentials, unless postponed).
    /// With `reminders` off, a due reminder is left for a later tick (one that can reach an
    /// observer about to subscribe).
    mutating func clockTicked(now: Date, margin: Duration, renewalLead: Duration, reminders: Bool = true) -> (state: SessionState?, remind: Date?) {
        let state = announce(now: now, margin: margin)
        guard reminders, inFlight == 0, self.state(now: now, margin: margin) == .federated,
              let due = renewalDue(margin: margin, lead: renewalLead), due <= now,
              let expiresAt = expiryDue(margin: margin)
        else { return (state, nil) }
        remindedFor = record?.credentials?.expiration
        postponed = nil
        return (state, expiresAt)
    }

    /// "Not now": the next reminder for these credentials comes no sooner than `interval`
    /// from `now`, and never once they expired. Returns whether there was anything to postpone.
    mutating func postponeRenewal(now: Date, margin: Duration, interval: Duration) -> Bool {
        guard record?.state(now: now, margin: margin) == .federated, let expiration = record?.credentials?.expiration else { return false }
        postponed = (expiration, now.addingTimeInterval(interval.timeInterval))
        remindedFor = nil
        return true
    }

    /// When a renewal reminder is next due for the credentials held now, if ever: the lead
    /// time before they read `expired`, or the end of a postponement, whichever is later;
    /// `nil` when already reminded, or when that would be after they expire.
    func renewalDue(margin: Duration, lead: Duration) -> Date? {
        guard let expiration = record?.credentials?.expiration, let expiryDue = expiryDue(margin: margin) else { return nil }
        var due = expiryDue.addingTimeInterval(-lead.timeInterval)
        if let postponed, postponed.expiration == expiration {
            due = max(due, postponed.until)
        } else if remindedFor == expiration {
            return nil
        }
        return due < expiryDue ? due : nil
    }

    /// The next time the clock matters to this session (a reminder when `reminding`, or the
    /// expiry not yet announced), possibly already past; `nil` when nothing is pending, or
    /// while a federation is in flight (its end reschedules).
    func nextWakeUp(margin: Duration, renewalLead: Duration, reminding: Bool = true) -> Date? {
        guard inFlight == 0, announced != .expired, let expiryDue = expiryDue(margin: margin) else { return nil }
        guard reminding else { return expiryDue }
        return min(renewalDue(margin: margin, lead: renewalLead) ?? expiryDue, expiryDue)
    }

    /// What was reminded or postponed for the credentials held now, to outlive the cache
    /// entry (an evicted session read again must not remind twice or forget "not now").
    var reminderMemory: ReminderMemory? {
        guard let expiration = record?.credentials?.expiration else { return nil }
        let reminded = remindedFor == expiration ? expiration : nil
        let postponement = postponed.flatMap { $0.expiration == expiration ? $0 : nil }
        guard reminded != nil || postponement != nil else { return nil }
        return ReminderMemory(remindedFor: reminded, postponed: postponement)
    }

    /// Takes back `memory`, when it concerns the credentials held now.
    mutating func recall(_ memory: ReminderMemory) {
        guard let expiration = record?.credentials?.expiration, memory.expiration == expiration else { return }
        remindedFor = memory.remindedFor
        postponed = memory.postponed
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

/// A session's reminder bookkeeping for one set of credentials, kept apart from its cache
/// entry once that is evicted.
struct ReminderMemory: Sendable {
    var remindedFor: Date?
    var postponed: (expiration: Date, until: Date)?

    /// The expiration of the credentials it concerns.
    var expiration: Date? { remindedFor ?? postponed?.expiration }
}
