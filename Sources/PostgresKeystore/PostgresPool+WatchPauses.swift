extension PostgresPool {
    /// The pauses between the watch's connection attempts (``PostgresPool``): a pure value
    /// type, so that the rule is tested apart from the server.
    ///
    /// Pauses double from 100 ms up to the reconnect delay while the server cannot be reached,
    /// is starting up or is shutting down (SQLSTATE 57P03, which every restart passes
    /// through). While it refuses logins (class 28) or has no free connection slot (53300),
    /// refusals that last, they grow up to a minute, as postgres-nio's own retries do, to
    /// spare the server's log and its slots; the next failure of another kind brings them
    /// back to the short ones.
    struct WatchPauses: Sendable, Equatable {
        /// The pause before the next attempt.
        private(set) var next: Duration = .milliseconds(100)
        private var longest: Duration
        private let reconnectDelay: Duration

        /// The longest pause for refusals that last.
        static let longestForRefusals = Duration.seconds(60)

        /// Pauses that grow to `reconnectDelay` (no shorter than the first pause, 100 ms).
        init(reconnectDelay: Duration) {
            self.reconnectDelay = reconnectDelay
            longest = reconnectDelay
        }

        /// Takes the pause before an attempt: returns it, and doubles the next one up to the
        /// current longest.
        mutating func take() -> Duration {
            defer { next = min(next * 2, longest) }
            return next
        }

        /// Records an attempt that failed with `sqlState` (`nil` when the server was not
        /// reached or gave no SQLSTATE).
        mutating func failed(sqlState: String?) {
            if let sqlState, sqlState.hasPrefix("28") || sqlState == "53300" {
                longest = Self.longestForRefusals
            } else {
                longest = reconnectDelay
                next = min(next, longest)
            }
        }
    }
}
