public import Federation

/// What a ``CredentialServer`` serves: which sessions of its ``FederationClient``.
///
/// The server always listens on 127.0.0.1, on a port the system picks, and serves each
/// session at `GET /credentials/<session>` (see ``CredentialEndpoint``).
public struct CredentialServerConfiguration: Sendable, Hashable {
    /// The sessions served, each at its own path; at least one. Names follow
    /// ``SessionName``'s rule, which keeps them valid URL path segments as they are.
    public var sessions: [String]

    /// Serves `sessions` (default: ``FederationClient/defaultSession``).
    public init(sessions: [String] = [FederationClient.defaultSession]) {
        self.sessions = sessions
    }

    /// Serves one session.
    public init(session: String) {
        self.init(sessions: [session])
    }
}
