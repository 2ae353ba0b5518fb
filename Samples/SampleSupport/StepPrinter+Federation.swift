public import Federation

extension StepPrinter {
    /// Details a federation's result: identity ID, access key ID and expiration.
    /// Never the secret key or session token.
    public func detail(_ result: FederationResult) {
        detail("identity ID:   \(result.identityId)")
        detail("access key ID: \(result.credentials.accessKeyId), expires \(result.credentials.expiration)")
    }

    /// Details a session as read back: state, provider and identity ID (no credentials).
    public func detail(_ snapshot: SessionSnapshot) {
        detail("state: \(snapshot.state), provider: \(snapshot.provider?.identifier ?? "none"), identity ID: \(snapshot.identityId ?? "none")")
    }
}
