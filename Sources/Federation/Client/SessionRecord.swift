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

    var isGuest: Bool { phase == .federated && provider == nil }

    /// The state at `now` with `margin`.
    func state(now: Date, margin: Duration) -> SessionState {
        switch phase {
        case .terminated: .terminated
        case .federated: (credentials?.isExpired(at: now, margin: margin) ?? true) ? .expired : .federated
        }
    }
}
