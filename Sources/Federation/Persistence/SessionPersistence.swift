/// Where a ``FederationClient`` keeps sessions across restarts.
/// Implementations must make each call durable before returning.
protocol SessionPersistence: Sendable {
    /// Every saved session, by name.
    func loadAll() throws(FederationError) -> [String: SessionRecord]
    /// Saves `record` as `session`, replacing what was there.
    func save(_ record: SessionRecord, session: String) throws(FederationError)
    /// Removes `session`; removing a missing session succeeds.
    func remove(session: String) throws(FederationError)
}
