import Logging
import PostgresNIO
import SecureStorage

/// A connection of the keystore's own, outside its pool (opening, migrating; see
/// ``PostgresKeystore/withOwnConnection(_:logger:_:)``), set up (``ConnectionSetup``) before
/// its first statement, so that no statement waits on the server for longer than the
/// operation timeout. Without it a lock another role holds would keep the server's backend
/// waiting after the keystore gave up.
struct OwnConnection: Sendable {
    let connection: PostgresConnection
    let setup: ConnectionSetup

    func run<T: Sendable>(logger: Logger, _ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await setup.prepare(connection, logger: logger)
        return try await body(connection)
    }
}

extension PostgresKeystore {
    /// Runs `body` on a connection of its own, outside the pool, set up as pooled ones are
    /// and closed when `body` ends (at once when the task is cancelled, as at the deadline).
    ///
    /// Opening a keystore and migrating go this way. A failure to connect is reported at
    /// once with its cause (refused, TLS, a failed login with its SQLSTATE), where the pool
    /// would retry it quietly until the operation timed out; a keystore that fails to open
    /// (a wrong key) has opened no pool; and a command that makes one call and exits logs in
    /// once for the opening and once for the call, rather than once more for a probe.
    static func withOwnConnection<T: Sendable>(
        _ configuration: Configuration, logger: Logger,
        _ body: @Sendable (OwnConnection) async throws(KeystoreError) -> T
    ) async throws(KeystoreError) -> T {
        let connection: PostgresConnection
        do {
            connection = try await connect(configuration, logger: logger)
        } catch {
            throw KeystoreError.postgres(error, operation: "connecting", configuration: configuration)
        }
        let own = OwnConnection(
            connection: connection,
            setup: ConnectionSetup(statementTimeout: configuration.operationTimeout, holdOff: .zero))
        // A statement postgres-nio cannot cancel would otherwise hold the task (and the
        // server's backend) until the statement timeout; closing ends both.
        let result = await withTaskCancellationHandler {
            do throws(KeystoreError) {
                return Result<T, KeystoreError>.success(try await body(own))
            } catch {
                return .failure(error)
            }
        } onCancel: {
            _ = connection.close() as EventLoopFuture<Void>
        }
        try? await connection.close()
        return try result.get()
    }
}
