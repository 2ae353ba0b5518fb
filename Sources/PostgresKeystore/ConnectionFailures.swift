/// A connection failed while `COMMIT` was in flight: the transaction may or may not have been
/// applied, so the operation must not be retried blindly.
struct CommitOutcomeUnknown: Error, CustomStringConvertible {
    let underlying: any Error
    var description: String { "the connection was lost while committing: the outcome is unknown" }
}

/// The pool handed out a connection that had already closed; nothing was sent on it, so the
/// operation can run again on another.
struct StaleConnection: Error, CustomStringConvertible {
    var description: String { "the connection had closed" }
}

/// The pool that handed out the connection was replaced meanwhile (``PostgresPool``): nothing
/// was sent on it, so the operation runs again on the new pool.
struct RetiredPool: Error, CustomStringConvertible {
    var description: String { "the connection pool was replaced" }
}
