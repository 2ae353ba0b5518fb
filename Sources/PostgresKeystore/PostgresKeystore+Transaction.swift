import Logging
import SecureStorage
import PostgresNIO

extension PostgresKeystore {
    /// Runs `body` between `BEGIN` and `COMMIT`. A failure before `COMMIT` rolls back (and
    /// closes the connection if even that fails, so it never returns to the pool inside an
    /// aborted transaction); a failure of `COMMIT` itself is ``CommitOutcomeUnknown``.
    static func transaction<T>(
        on connection: PostgresConnection, logger: Logger, _ body: () async throws -> T
    ) async throws -> T {
        try await connection.query("BEGIN", logger: logger)
        let value: T
        do {
            value = try await body()
        } catch {
            do {
                try await connection.query("ROLLBACK", logger: logger)
            } catch {
                try? await connection.close()
            }
            throw error
        }
        do {
            try await connection.query("COMMIT", logger: logger)
        } catch {
            throw CommitOutcomeUnknown(underlying: error)
        }
        return value
    }

    /// Applies sealed operations in one transaction; returns per-operation results, the keys
    /// changed (once each, in order) and the newest change sequence.
    static func apply(
        _ operations: [SealedOperation], namespace: PostgresNamespace, origin: Int64,
        on connection: PostgresConnection, logger: Logger
    ) async throws -> ([Bool], [String], Int64?) {
        try await transaction(on: connection, logger: logger) {
            try await PostgresSchema.lock(namespace, on: connection, logger: logger)
            var applied: [Bool] = []
            var changed: [String] = []
            var seen: Set<String> = []
            for operation in operations {
                let key: String
                let didApply: Bool
                switch operation {
                case .set(let itemKey, let sealed, let version):
                    key = itemKey
                    didApply = try await PostgresSchema.upsert(
                        namespace, key: itemKey, version: version, sealed: sealed, on: connection, logger: logger)
                case .remove(let itemKey):
                    key = itemKey
                    didApply = try await PostgresSchema.delete(namespace, key: itemKey, on: connection, logger: logger)
                }
                applied.append(didApply)
                if didApply && seen.insert(key).inserted { changed.append(key) }
            }
            let last = try await PostgresSchema.appendChanges(changed, namespace: namespace, origin: origin, on: connection, logger: logger)
            return (applied, changed, last)
        }
    }
}
