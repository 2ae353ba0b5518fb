import Federation

/// An error whose classification the tests choose; `secret` stands for data a
/// real error message might hold and must never reach a log.
struct RetryTestError: Error, Equatable, CustomStringConvertible {
    var disposition: RetryDisposition
    var hint: Duration? = nil
    var tag: Int = 0
    var secret: String = "SECRET-session-token-do-not-log"

    var description: String { "RetryTestError(\(secret))" }

    @Sendable static func classify(_ error: any Error) -> (RetryDisposition, hint: Duration?) {
        guard let error = error as? RetryTestError else { return (.doNotRetry, nil) }
        return (error.disposition, error.hint)
    }
}
