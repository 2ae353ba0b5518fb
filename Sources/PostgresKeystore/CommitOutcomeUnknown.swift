/// A connection failed while `COMMIT` was in flight: the transaction may or may not have been
/// applied, so the operation must not be retried blindly.
struct CommitOutcomeUnknown: Error {
    let underlying: any Error
}
