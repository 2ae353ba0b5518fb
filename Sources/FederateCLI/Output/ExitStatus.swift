/// The exit codes of the `federate` contract (docs/cli.md, "Exit codes").
package enum ExitStatus: Int32, Sendable {
    /// Success.
    case ok = 0
    /// A bug or an unexpected condition.
    case internalError = 1
    /// A usage error or bad local input: unreadable token file, malformed JWT, bad option value.
    case usage = 2
    /// No valid credentials: no session, or it expired. Push a new token.
    case noValidCredentials = 3
    /// The identity service rejected the request: not authorized, bad pool configuration,
    /// terminated identity, resource not found.
    case rejected = 4
    /// The identity service could not be reached or kept failing: network, timeout,
    /// throttling, HTTP 5xx, after retries.
    case unavailable = 5
    /// The keystore could not be used: tampered item, wrong key, bad permissions, corruption.
    case keystore = 6
    /// `exec`: the command was found but could not be executed (as a shell reports it).
    case commandNotExecutable = 126
    /// `exec`: the command was not found (as a shell reports it).
    case commandNotFound = 127
}
