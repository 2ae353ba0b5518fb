/// Where a session stands. See the state machine in the module documentation.
///
/// There is no automatic refresh: a session in ``expired`` stays there until the
/// caller federates a new provider token or clears it.
public enum SessionState: String, Sendable, Hashable, Codable, CaseIterable {
    /// No identity: never federated, or cleared.
    case notFederated
    /// An exchange with the identity service is in flight.
    case federating
    /// Credentials are valid (before their expiration minus the margin).
    case federated
    /// Credentials are past their expiration minus the margin.
    case expired
    /// The service said the identity is gone or disabled. Only ``FederationClient/clear(session:)`` leaves this state.
    case terminated
}

extension SessionState: CustomStringConvertible {
    /// The case name, e.g. `federated`.
    public var description: String { rawValue }
}
