import Logging
import NIOCore
import PostgresNIO

extension PostgresConnection {
    /// Runs a statement whose rows are not needed; on a connection already closed, throws
    /// ``StaleConnection`` without sending it.
    ///
    /// postgres-nio (1.33) writes a query to its channel without a promise for the write: one
    /// written after the channel closed is dropped, and its answer never comes, so the caller
    /// waits until its operation's deadline. That is likely for the statement sent right
    /// after another failed because the server went away (a `ROLLBACK`: on a busy machine a
    /// commit lost before `COMMIT` timed out instead of running again), and for the first
    /// statement on a connection the pool handed out before it learned of the close.
    ///
    /// The check and the write happen together on the connection's event loop, where the
    /// channel cannot close in between: a statement written while it is open is answered or
    /// failed by the connection when it closes. Used for transaction control, a connection's
    /// set-up and the change feed's heartbeat; other statements (a read's, a commit's own)
    /// follow one answered on the same connection a moment before, or `perform`'s check,
    /// which leaves a window of a few instructions rather than none.
    func runUnlessClosed(_ query: PostgresQuery, logger: Logger) async throws {
        _ = try await queryUnlessClosed(query, logger: logger)
    }

    /// ``runUnlessClosed(_:logger:)``, returning the rows (collected on the event loop): for
    /// the commit's `CALL`, which must not be dropped unanswered nor reported as perhaps
    /// applied when it was never sent.
    func queryUnlessClosed(_ query: PostgresQuery, logger: Logger) async throws -> PostgresQueryResult {
        try await eventLoop.flatSubmit { () -> EventLoopFuture<PostgresQueryResult> in
            guard !self.isClosed else { return self.eventLoop.makeFailedFuture(StaleConnection()) }
            return self.query(query, logger: logger)
        }.get()
    }

    /// Adds a listener for `channel` (postgres-nio then sends `LISTEN`), on the event loop
    /// after checking that the connection is open; throws ``StaleConnection`` otherwise.
    ///
    /// postgres-nio writes the listener to its channel without a promise: written after the
    /// channel closed, it is dropped unused, and its `deinit` then stops the process with a
    /// precondition failure.
    func addListenerUnlessClosed(
        channel: String,
        handler: @escaping @Sendable (PostgresListenContext, PostgresMessage.NotificationResponse) -> Void
    ) async throws -> PostgresListenContext {
        try await eventLoop.submit { () throws -> PostgresListenContext in
            guard !self.isClosed else { throw StaleConnection() }
            return self.addListener(channel: channel, handler: handler)
        }.get()
    }
}
