#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// Something that happened to one session: a state change, or a reminder that its
/// credentials will soon need a new provider token.
public struct SessionEvent: Sendable, Hashable {
    /// What kind of event this is.
    public enum Kind: Sendable, Hashable {
        /// The session entered ``SessionEvent/state``.
        case stateChanged
        /// The session is still ``SessionState/federated``, but its credentials read
        /// ``SessionState/expired`` at `expiresAt` (their expiration minus the expiry margin):
        /// push a new provider token before then, or say "not now" with
        /// ``FederationClient/postponeRenewalReminder(for:)``. Nothing is refreshed for you.
        case renewalDue(expiresAt: Date)
    }

    /// The session.
    public var session: String
    /// Its state: the new one for ``Kind/stateChanged``, ``SessionState/federated`` for a reminder.
    public var state: SessionState
    /// What happened.
    public var kind: Kind

    /// Creates an event; a state change unless `kind` says otherwise.
    public init(session: String, state: SessionState, kind: Kind = .stateChanged) {
        self.session = session
        self.state = state
        self.kind = kind
    }

    /// Whether this is a renewal reminder.
    public var isRenewalDue: Bool {
        if case .renewalDue = kind { return true }
        return false
    }
}
