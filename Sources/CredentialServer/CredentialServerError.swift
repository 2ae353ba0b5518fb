/// An error from a ``CredentialServer``.
///
/// Match on ``code`` (compare with `==`); new codes can be added without breaking
/// existing `switch`es. Never carries the token or a credential.
public struct CredentialServerError: Error, Sendable, CustomStringConvertible {
    /// The stable kind of a ``CredentialServerError``.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable, Hashable {
            case invalidConfiguration
            case sessionNotServed
            case notRunning
            case alreadyRan
            case serverFailed
        }

        private let base: Base

        private init(_ base: Base) { self.base = base }

        /// The configuration names no session, a session name breaks ``Federation/SessionName``'s
        /// rule, or the idle timeout is not positive.
        public static let invalidConfiguration = Code(.invalidConfiguration)
        /// The session asked for is not one the server serves.
        public static let sessionNotServed = Code(.sessionNotServed)
        /// The server stopped (or failed to start) before it listened.
        public static let notRunning = Code(.notRunning)
        /// ``CredentialServer/run()`` was called a second time; a server runs once.
        public static let alreadyRan = Code(.alreadyRan)
        /// The server could not listen (the socket could not be bound, no file descriptor was
        /// left) or failed while serving; the message says why.
        public static let serverFailed = Code(.serverFailed)

        /// The code's name, e.g. `notRunning`.
        public var description: String { base.rawValue }
    }

    /// The stable kind of error.
    public var code: Code
    /// What went wrong, in one sentence.
    public var message: String

    /// Creates an error.
    public init(code: Code, message: String) {
        self.code = code
        self.message = message
    }

    /// `code: message`.
    public var description: String { "\(code): \(message)" }
}
