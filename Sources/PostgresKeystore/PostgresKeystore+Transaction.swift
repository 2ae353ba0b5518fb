import Logging
import SecureStorage
import PostgresNIO

extension PostgresKeystore {
    /// Runs `body` between `BEGIN` and `COMMIT`. A failure before `COMMIT` rolls back (and
    /// closes the connection if even that fails, so it never returns to the pool inside an
    /// aborted transaction). `COMMIT` refused by the server (a deferred constraint, a
    /// serialisation failure, a full `NOTIFY` queue) rolled back, and throws as it came; a
    /// connection lost under it is ``CommitOutcomeUnknown``. One found closed before `COMMIT`
    /// was sent committed nothing: ``StaleConnection``, which runs again. A `COMMIT` the
    /// server answers with the tag `ROLLBACK` (the transaction was aborted by an error nobody
    /// read) fails with `io`: nothing was written.
    ///
    /// The transaction is fenced as a commit's `CALL` is (``ServerClock``): a `COMMIT` the
    /// network holds back must not commit minutes later, when its caller has long been told
    /// it failed. The server ends a session that leaves its transaction idle for longer than
    /// its statement timeout (the operation timeout), rolling it back; the keystore's
    /// transactions send their statements back to back.
    static func transaction<T>(
        on connection: PostgresConnection, logger: Logger, _ body: () async throws -> T
    ) async throws -> T {
        try await connection.runUnlessClosed("BEGIN", logger: logger)
        let value: T
        do {
            try await connection.runUnlessClosed(
                "SELECT pg_catalog.set_config('idle_in_transaction_session_timeout', pg_catalog.current_setting('statement_timeout'), true)",
                logger: logger)
            value = try await body()
        } catch {
            do {
                try await connection.runUnlessClosed("ROLLBACK", logger: logger)
            } catch {
                try? await connection.close()
            }
            throw error
        }
        let committed = try await committing { try await connection.queryUnlessClosed("COMMIT", logger: logger) }
        // A transaction the server aborted (a statement's error that went unread) answers
        // `COMMIT` with the tag `ROLLBACK` and no error: nothing was applied.
        guard committed.metadata.command == "COMMIT" else {
            throw KeystoreError(.io, "the server rolled the transaction back instead of committing it (\(committed.metadata.command)); nothing was written")
        }
        return value
    }

    /// Runs `body`, which commits (a `COMMIT`, or a `CALL` of the commit procedure), and tells
    /// what its failure left: an error the server answered with (committed nothing, but see
    /// ``PostgresSchema/commitDistinct(sets:removes:namespace:origin:call:fence:on:logger:)`` on a
    /// statement timeout), or ``StaleConnection`` (found closed before anything was sent),
    /// throws as it came; any other failure (the connection lost while the server may have
    /// committed) is ``CommitOutcomeUnknown``.
    static func committing<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as PSQLError where error.code == .server && !KeystoreError.isRetryableConnectionLoss(error) {
            throw error
        } catch let error as StaleConnection {
            throw error
        } catch {
            throw CommitOutcomeUnknown(underlying: error)
        }
    }

    /// Applies batches whose keys are all distinct (within and across them) in one
    /// statement, committed by the server before it answers (``PostgresSchema/commitCall(inSchema:)``):
    /// one round trip. Returns each batch's per-operation results.
    ///
    /// Not a statement in autocommit: there the server commits after the statement has
    /// answered, and postgres-nio reports the statement's rows as a success even when that
    /// commit then fails, which would acknowledge rows never written. Not `BEGIN`, the
    /// statement and `COMMIT` either, which cost three round trips, each with two hand-offs
    /// between the caller's task and the connection's event loop. A connection lost under
    /// the call is ``CommitOutcomeUnknown``.
    ///
    /// The call carries a fence (``ServerClock``): the server refuses it, applying nothing,
    /// unless it starts within an operation timeout of being sent. A refusal that comes back
    /// sooner than that says the server's clock moved since the connection read it: read
    /// again, and the call runs again. One that comes back later is the fence at work: the
    /// caller has been told the commit failed, and it did.
    ///
    /// - Parameters:
    ///   - call: The `CALL` statement ``PostgresSchema/install(on:logger:)`` returned.
    ///   - allowance: How long after it is sent the call may still start: the operation timeout.
    static func applyDistinct(
        _ batches: [[SealedOperation]], namespace: PostgresNamespace, origin: Int64, call: String, allowance: Duration,
        on connection: PostgresConnection, logger: Logger
    ) async throws -> [[Bool]] {
        var sets: [(key: String, version: Int64?, sealed: [UInt8])] = []
        var removes: [String] = []
        for operation in batches.joined() {
            switch operation {
            case .set(let key, let sealed, let version): sets.append((key, version, sealed))
            case .remove(let key): removes.append(key)
            }
        }
        // One key order for every statement, so concurrent statements (of this instance or
        // another) lock rows in the same order and cannot deadlock on their upserts: bytes, as
        // a migration's `ORDER BY key COLLATE "C"` takes them (`String`'s `<` compares
        // normalized text, which differs for keys not in NFC). The statement sorts its upserts
        // again in the server encoding's bytes, which differ from UTF-8's in EUC_JP and the
        // like; sorted here, the server's sort finds them in order on every UTF-8 database.
        sets.sort { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
        removes.sort { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        var (applied, removed): (Set<ItemKey.Exact>, Set<ItemKey.Exact>) = ([], [])
        let current = ConnectionSetup.current
        var clock: ServerClock
        if let known = current.flatMap({ $0.setup.clock(of: $0.connection) }) {
            clock = known
        } else {
            clock = try await ServerClock.read(on: connection, logger: logger)
        }
        var lateRefusals = 0
        for attempt in 1...3 {
            let sentAt = ContinuousClock.now
            do {
                let done = try await committing {
                    try await PostgresSchema.commitDistinct(
                        sets: sets, removes: removes, namespace: namespace, origin: origin, call: call,
                        fence: clock.fence(sentAt: sentAt, allowance: allowance), on: connection, logger: logger)
                }
                (applied, removed) = (Set(done.sets.map(ItemKey.Exact.init)), Set(done.removes.map(ItemKey.Exact.init)))
                if let fresh = done.clock, let current { current.setup.record(fresh, for: current.connection) }
                break
            } catch where attempt < 3 && KeystoreError.isDeadlock(error) && !Task.isCancelled {
                // The server rolled the statement back (a set and a remove of two statements
                // can still cross); nothing applied, so it runs again, unless its caller
                // gave up meanwhile (the deadline cancels this task): sent then, it could
                // land after the keystore's uncertain window.
                continue
            } catch where ServerClock.isLateRefusal(error) {
                lateRefusals += 1
                let heldBack = ContinuousClock.now - sentAt >= allowance
                guard attempt < 3, !heldBack, !Task.isCancelled else {
                    throw KeystoreError(
                        .storeUnavailable,
                        heldBack
                            ? "the commit reached the server more than \(allowance) after it was sent (the network held it back), and the server refused it: nothing was written"
                            : Task.isCancelled
                            ? "the server refused the commit as late (its clock moved since this connection read it), and there was no time left to send it again: nothing was written"
                            : "the server refused the commit as late \(lateRefusals) times, though each was sent just now and its clock read again (its clock keeps jumping ahead): nothing was written")
                }
                clock = try await ServerClock.read(on: connection, logger: logger)
                if let current { current.setup.record(clock, for: current.connection) }
                continue
            }
        }
        return batches.map { operations in
            operations.map { operation in
                switch operation {
                case .set(let key, _, _): applied.contains(ItemKey.Exact(key))
                case .remove(let key): removed.contains(ItemKey.Exact(key))
                }
            }
        }
    }

    /// Applies one batch that names a key more than once in a transaction, operation by
    /// operation, so each sees the effect of the earlier ones (one statement could not touch
    /// a row twice); returns per-operation results. Row locks, taken by each upsert or
    /// delete, are all the ordering it needs.
    ///
    /// Rows that exist are locked in byte order first, but the new keys it inserts are not
    /// in that order, so another commit inserting the same new keys can deadlock with it. The
    /// server then aborts one of the two (nothing of it applied), and an aborted transaction
    /// here runs again, up to three times in all, as a deadlocked commit statement does;
    /// unless the operation's deadline has passed (it cancels this task): sent after it, it
    /// could land after the keystore's uncertain window. (A queued caller whose own deadline
    /// passed earlier has been answered already; the window covers what its group still does.)
    static func applyInOrder(
        _ operations: [SealedOperation], namespace: PostgresNamespace, origin: Int64,
        on connection: PostgresConnection, logger: Logger
    ) async throws -> [Bool] {
        var attempt = 1
        while true {
            do {
                return try await applyInOrderOnce(operations, namespace: namespace, origin: origin, on: connection, logger: logger)
            } catch where attempt < 3 && KeystoreError.isDeadlock(error) && !Task.isCancelled {
                attempt += 1
            }
        }
    }

    private static func applyInOrderOnce(
        _ operations: [SealedOperation], namespace: PostgresNamespace, origin: Int64,
        on connection: PostgresConnection, logger: Logger
    ) async throws -> [Bool] {
        try await transaction(on: connection, logger: logger) {
            // The operations run in their order, which is not the keys' byte order.
            try await PostgresSchema.lockInByteOrder(operations.map(\.key), namespace: namespace, on: connection, logger: logger)
            var applied: [Bool] = []
            for operation in operations {
                switch operation {
                case .set(let key, let sealed, let version):
                    applied.append(try await PostgresSchema.upsert(
                        namespace, key: key, version: version, sealed: sealed, on: connection, logger: logger))
                case .remove(let key):
                    applied.append(try await PostgresSchema.delete(namespace, key: key, on: connection, logger: logger))
                }
            }
            try await PostgresSchema.notify(
                changedKeys(operations, applied: applied), namespace: namespace, origin: origin, on: connection, logger: logger)
            return applied
        }
    }

    /// The keys `operations` changed, each once, in order: those whose operation applied.
    static func changedKeys(_ operations: [SealedOperation], applied: [Bool]) -> [String] {
        var seen: Set<ItemKey.Exact> = []
        return zip(operations, applied).compactMap { operation, didApply in
            didApply && seen.insert(ItemKey.Exact(operation.key)).inserted ? operation.key : nil
        }
    }
}
