/// A failure the CLI reports as one line on stderr with a contract exit code.
///
/// The message says what happened and what to do next; it must never hold a
/// secret (provider token, secret key, session token, keystore key).
package struct CLIFailure: Error, Sendable {
    /// The exit code.
    package var status: ExitStatus
    /// One line: the cause and the next step.
    package var message: String

    package init(_ status: ExitStatus, _ message: String) {
        self.status = status
        self.message = message
    }
}
