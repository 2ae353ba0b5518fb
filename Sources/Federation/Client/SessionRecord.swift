#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What a session holds between calls, and what is saved for it.
/// The provider token is never part of it.
struct SessionRecord: Sendable, Hashable, Codable {
    /// The settled phase; `expired` is derived from the clock, `federating` from in-flight work.
    enum Phase: String, Sendable, Hashable, Codable {
        case federated
        case terminated
    }

    var phase: Phase
    var identityId: String?
    /// ``AuthProvider/identifier``, or `nil` for a guest identity.
    var provider: String?
    var credentials: AWSCredentials?
    /// The version of the record this one replaced, when it was above this record's own:
    /// a later federation of a session replaces it even with credentials that expire
    /// sooner (a shorter duration, a narrower policy, another role), so it is stored under
    /// that version rather than its own (``storeVersion``). `nil` otherwise.
    var versionFloor: Int64? = nil

    var isGuest: Bool { phase == .federated && provider == nil }

    /// The state at `now` with `margin`.
    func state(now: Date, margin: Duration) -> SessionState {
        switch phase {
        case .terminated: .terminated
        case .federated: (credentials?.isExpired(at: now, margin: margin) ?? true) ? .expired : .federated
        }
    }
}
