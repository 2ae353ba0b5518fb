public import Federation

/// What a ``CredentialServer`` serves: which sessions of its ``FederationClient``.
///
/// The server always listens on 127.0.0.1, on a port the system picks, and serves each
/// session at `GET /credentials/<session>` (see ``CredentialEndpoint``).
public struct CredentialServerConfiguration: Sendable, Hashable {
    /// The sessions served, each at its own path; at least one. Names follow
    /// ``SessionName``'s rule, which keeps them valid URL path segments as they are.
    public var sessions: [String]

    /// How long a connection may go without a request part (a whole header block, a piece
    /// of body) before the server closes it; must be positive. Default: 10 seconds.
    ///
    /// Any local user can connect to the port. Without a limit, one who opens connections and
    /// sends nothing, or half a request, holds them for ever, until the process runs out of
    /// file descriptors and the child's own fetches fail. The SDKs' container provider sends
    /// its request as soon as it connects, so it never comes near this.
    public var idleTimeout: Duration = .seconds(10)

    /// How long a graceful shutdown lets requests in flight finish before it cancels them;
    /// must be positive. Default: 10 seconds.
    ///
    /// A request can outlast any wait for it (a keystore that does not answer, a client
    /// that does not let its answer be written): without a limit, a shutdown, and
    /// `federate exec` after its command exited, could wait for it for good. Longer than
    /// the keystore's own timeouts lets a slow read still be answered.
    public var gracefulShutdownLimit: Duration = .seconds(10)

    /// Serves `sessions` (default: ``FederationClient/defaultSession``).
    public init(sessions: [String] = [FederationClient.defaultSession]) {
        self.sessions = sessions
    }

    /// Serves one session.
    public init(session: String) {
        self.init(sessions: [session])
    }
}
