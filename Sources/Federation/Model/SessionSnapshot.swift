#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// A session as read at one moment.
public struct SessionSnapshot: Sendable, Hashable {
    /// The session's name (one per end user; `default` when unnamed).
    public var name: String
    /// The state at the moment of reading.
    public var state: SessionState
    /// The Cognito identity ID, when the session has one.
    public var identityId: String?
    /// The provider of the last successful federation; `nil` for a guest or no session.
    public var provider: AuthProvider?
    /// Whether the identity is an unauthenticated (guest) one.
    public var isGuest: Bool
    /// The credentials, present only when ``state`` is ``SessionState/federated``.
    public var credentials: AWSCredentials?
    /// When the last credentials expire (also when ``state`` is ``SessionState/expired``).
    public var expiration: Date?

    /// Creates a snapshot.
    public init(
        name: String,
        state: SessionState,
        identityId: String? = nil,
        provider: AuthProvider? = nil,
        isGuest: Bool = false,
        credentials: AWSCredentials? = nil,
        expiration: Date? = nil
    ) {
        self.name = name
        self.state = state
        self.identityId = identityId
        self.provider = provider
        self.isGuest = isGuest
        self.credentials = credentials
        self.expiration = expiration
    }
}

extension SessionSnapshot: CustomStringConvertible {
    /// A one-line summary; credentials appear in their redacted form.
    public var description: String {
        "SessionSnapshot(name: \(name), state: \(state), identityId: \(identityId ?? "nil"), provider: \(provider?.identifier ?? (isGuest ? "guest" : "nil")), credentials: \(credentials.map { "\($0)" } ?? "nil"))"
    }
}
