public import Logging
import PostgresNIO
public import SecureStorage
import Synchronization

/// The fleet ``Keystore``: AES-256-GCM sealed items in PostgreSQL, shared by every instance
/// of a tool on every host that opens the same database, service and access group.
///
/// ```swift
/// let configuration = try PostgresKeystore.Configuration(url: "postgres://broker@db:5432/identity?sslmode=verify-full")
/// let keystore = try await PostgresKeystore(
///     configuration: configuration, service: "my-tool", keySource: .environment())
/// try await keystore.set(Array("value".utf8), forKey: "my-tool.greeting")
/// let value = try await keystore.value(forKey: "my-tool.greeting")
/// await keystore.close()
/// ```
///
/// Items are sealed exactly as by SecureStorage's SQLite engine (the associated data binds
/// service, access group and key), so only ciphertext reaches the database, and a row moved
/// to another key, service or group fails to open. The service and access group are columns:
/// many tools and groups share one database.
///
/// - Writes: ``commit(_:)`` applies a batch atomically, in one statement that the server
///   commits before it answers (one round trip, no lock beyond the rows it writes);
///   concurrent commits are combined into one statement. A
///   versioned set applies when there is no item, either side is unversioned, or the stored
///   version is not newer.
/// - Reads never wait for commits (PostgreSQL's MVCC); concurrent ``value(forKey:)`` calls
///   are combined into one query that looks each key up on its own (`unnest` and a
///   subquery per key), and each caller opens only its own row.
/// - ``changes()`` follows every instance's commits through `LISTEN`/`NOTIFY`.
/// - Outages: calls fail with ``KeystoreError/Code/storeUnavailable`` naming `host:port`
///   within ``Configuration/operationTimeout`` and succeed again soon after the server is
///   back (within about twice ``Configuration/reconnectDelay`` once calls have seen the
///   outage), however long it was away; nothing needs recreating. Change streams get
///   ``KeystoreChange/all`` after a reconnect.
///
/// ## Lifecycle
///
/// The keystore owns a postgres-nio `PostgresClient` (a connection pool) and the task that
/// runs it (a new pool after an outage whose end the old one was slow to notice). Call
/// ``close()`` when done: it ends every change stream and that task, closing the connections. A keystore released without ``close()`` cancels the task from `deinit`.
public final class PostgresKeystore: Keystore, WriterFilteringKeystore {
    /// The service (tool) whose items this keystore holds.
    public let service: String
    /// The access group this keystore reads and writes.
    public let accessGroup: AccessGroup
    /// The configuration the keystore was opened with.
    public let configuration: Configuration

    /// The connection pool, replaced when it lags behind the server's return after an outage.
    let pool: PostgresPool
    let namespace: PostgresNamespace
    let origin: Int64
    private let feed: PostgresChangeFeed
    private let committer: PostgresGroupCommitter
    private let reader: PostgresGrouper<String, [UInt8]?>
    /// Every operation's deadline (they all have the configuration's length).
    let deadlines: DeadlineQueue
    let logger: Logger
    private let callerLogger: Logger?
    private let closed = Atomic<Bool>(false)

    /// Opens the keystore for `service` in `accessGroup`, creating the schema on first use.
    ///
    /// - Parameters:
    ///   - configuration: The server, TLS, pool and timeouts.
    ///   - service: The name of the tool owning the items; non-empty, at most 150 bytes.
    ///   - accessGroup: The namespace the items live in; ``AccessGroup/none`` by default.
    ///     Unlike `SQLiteKeystore`, opening never moves items between groups: move them
    ///     with ``migrate(configuration:service:from:to:keySource:logger:)``.
    ///   - keySource: Where the 256-bit key comes from: ``KeySource/environment(variable:)``,
    ///     ``KeySource/passphrase(_:)`` (its salt lives in the database, so every instance
    ///     derives the same key), ``KeySource/raw(_:)``, or ``KeySource/keyFile`` with
    ///     ``Configuration/keyFilePath`` set.
    ///   - logger: A logger for debug messages; never given a secret or the password.
    /// - Throws: ``KeystoreError``: ``KeystoreError/Code/storeUnavailable`` when the server
    ///   cannot be reached within ``Configuration/operationTimeout``,
    ///   ``KeystoreError/Code/invalidKey`` for an unusable key source or a key that does not
    ///   open the access group's key check (another key than the group's items are sealed
    ///   with; see <doc:RunningAFleet>),
    ///   ``KeystoreError/Code/invalidName`` for a bad service or group name,
    ///   ``KeystoreError/Code/corruptFormat`` for a schema newer than this release.
    public init(
        configuration: Configuration,
        service: String,
        accessGroup: AccessGroup = .none,
        keySource: KeySource,
        logger: Logger? = nil
    ) async throws(KeystoreError) {
        let quiet = try Self.prepareOpening(service: service, group: accessGroup, configuration: configuration, logger: logger)
        // The opening runs on a connection of its own, before any pool exists: a failure to
        // connect is reported at once, and a keystore that does not open leaves no pool behind.
        let opened = try await OperationDeadline.run(configuration.operationTimeout, onTimeout: {
            Self.timeout("opening the keystore", configuration)
        }) { () throws(KeystoreError) -> OpenedNamespace in
            try await Self.withOwnConnection(configuration, logger: quiet) { (own) throws(KeystoreError) in
                try await Self.openNamespace(
                    service: service, group: accessGroup, keySource: keySource, configuration: configuration, on: own, logger: quiet)
            }
        }
        let pool = PostgresPool(configuration: configuration, searchPath: opened.schema, logger: quiet)
        do throws(KeystoreError) {
            let (namespace, commitCall) = (opened.namespace, opened.commitCall)
            let origin = Int64(bitPattern: try KeystoreError.rethrowing {
                try CryptoRuntime.randomBytes(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            })
            self.service = service
            self.accessGroup = accessGroup
            self.configuration = configuration
            self.pool = pool
            self.namespace = namespace
            self.origin = origin
            self.logger = quiet
            self.callerLogger = logger
            let deadlines = DeadlineQueue(configuration.operationTimeout)
            self.deadlines = deadlines
            let feed = PostgresChangeFeed(
                pool: pool, namespace: namespace, origin: origin, configuration: configuration,
                deadlines: deadlines, logger: quiet)
            self.feed = feed
            let closedError = { @Sendable in
                KeystoreError(.storeUnavailable, "the keystore is closed", path: configuration.endpoint)
            }
            // One group at a time: PostgreSQL serialises notifying commits through their WAL
            // flush anyway, so a second group would only wait on the server, and splitting
            // what waits into more, smaller statements costs each its own commit. Measured at
            // c = 64 on 2 CPUs: 4 groups in flight did ~25-40 % fewer durable federations
            // per second than 1, with ~60 % more server CPU.
            self.committer = PostgresGroupCommitter(
                maximumInFlight: Self.committingConnections,
                maximumOperations: Self.maximumGroupOperations,
                deadlines: deadlines,
                retryBudget: configuration.operationTimeout,
                closedError: closedError,
                timeoutError: { Self.timeout("committing a batch", configuration) },
                execute: { [pool, quiet] batches, distinct in
                    let sending = CommitSending()
                    do throws(KeystoreError) {
                        return .success(try await Self.perform(
                            "committing a batch", pool: pool, deadlines: deadlines,
                            cancellable: false, logger: quiet
                        ) { connection, logger in
                            guard sending.mayBeSent() else { throw CommitAbandoned() }
                            let operations = batches.map(\.operations)
                            let applied = distinct
                                ? try await Self.applyDistinct(
                                    operations, namespace: namespace, origin: origin, call: commitCall,
                                    allowance: configuration.operationTimeout, on: connection, logger: logger)
                                : [try await Self.applyInOrder(operations[0], namespace: namespace, origin: origin, on: connection, logger: logger)]
                            // Told here, as soon as the commit is known to have applied, rather
                            // than to the callers: one past its deadline (a COMMIT that answered
                            // late) is gone, and this instance's subscribers would never learn of
                            // the change, since the feed skips notifications of its own origin.
                            for (batch, results) in zip(batches, applied) {
                                feed.deliverLocal(Self.changedKeys(batch.operations, applied: results), writer: batch.writer)
                            }
                            return applied
                        })
                    } catch {
                        // A server's refusal rolled the transaction back (a write refused as
                        // read-only included), and a statement not sent yet never will be;
                        // one sent and then unanswered (a timeout, a lost connection) may
                        // have applied, now or later.
                        if sending.giveUp() && error.code == .storeUnavailable
                            && !error.reason.contains(KeystoreError.readOnlyServerReason)
                        {
                            feed.commitMayHaveApplied(
                                batches.flatMap { $0.operations.map(\.key) }, window: Self.uncertainCommitWindow(configuration))
                        }
                        return .failure(error)
                    }
                })
            // Few groups, so that concurrent reads share statements: with 6 read groups in
            // flight instead of 2, c = 64 did fewer durable federations per second for ~50 %
            // more server and ~25 % more client CPU. At least one, within what the commits
            // and the change feed leave of the pool.
            self.reader = PostgresGrouper(
                maximumInFlight: max(1, min(Self.readingConnections, configuration.poolSize - Self.committingConnections - 1)),
                deadlines: deadlines,
                closedError: closedError,
                timeoutError: { Self.timeout("reading an item", configuration) },
                select: { waiting in Array(waiting.indices.prefix(Self.maximumGroupReads)) },
                run: { [pool, quiet] keys in
                    do throws(KeystoreError) {
                        let rows = try await Self.perform(
                            "reading an item", pool: pool, deadlines: deadlines,
                            cancellable: false, logger: quiet
                        ) { connection, logger in
                            try await Self.readSealed(keys, namespace: namespace, on: connection, logger: logger)
                        }
                        return keys.map { .success(rows[ItemKey.Exact($0)]) }
                    } catch {
                        return keys.map { _ in .failure(error) }
                    }
                })
        } catch {
            pool.shutDown()
            throw error
        }
        logger?.debug("keystore opened", metadata: [
            "broker.service": "\(service)",
            "broker.accessGroup": "\(accessGroup)",
            "broker.keySource": "\(keySource)",
            "broker.endpoint": "\(configuration.endpoint)",
        ])
    }

    deinit {
        feed.close()
        pool.shutDown()
    }

    /// Ends every ``changes()`` stream, then the connection pool's task, closing its
    /// connections; returns when they are closed. Later calls fail with
    /// ``KeystoreError/Code/storeUnavailable``. Calling it again does nothing.
    public func close() async {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        feed.close()
        committer.close()
        reader.close()
        await pool.close()
    }

    /// Returns the value stored under `key`, or `nil` when there is none.
    ///
    /// - Throws: ``KeystoreError/Code/authenticationFailed`` or
    ///   ``KeystoreError/Code/corruptFormat`` for this item alone when its row does not open;
    ///   ``KeystoreError/Code/storeUnavailable`` when the server cannot be reached.
    public func value(forKey key: String) async throws(KeystoreError) -> [UInt8]? {
        try PostgresNamespace.validate(key: key)
        guard !isClosed else {
            throw KeystoreError(.storeUnavailable, "the keystore is closed", path: configuration.endpoint)
        }
        // Concurrent reads share one query; each caller opens only its own row, so a damaged
        // item fails its reader alone.
        let sealed = try await reader.submit(key).get()
        return try sealed.map { sealed throws(KeystoreError) in try namespace.open(sealed, forKey: key) }
    }

    /// The most keys one combined read carries.
    static let maximumGroupReads = 256

    /// The sealed rows of `keys` (which may repeat) that exist, by key (its bytes: two keys
    /// `String` calls equal may be two items, ``ItemKey/Exact``).
    static func readSealed(
        _ keys: [String], namespace: PostgresNamespace, on connection: PostgresConnection, logger: Logger
    ) async throws -> [ItemKey.Exact: [UInt8]] {
        var rows: [ItemKey.Exact: [UInt8]] = [:]
        if keys.count == 1 {
            // A lone key keeps the plain equality (no array to encode or unnest).
            let key = keys[0]
            let statement = PostgresSchema.ReadOne(service: namespace.service, group: namespace.groupColumn, key: key)
            for value in try await PostgresSchema.run(statement, on: connection, logger: logger) {
                rows[ItemKey.Exact(key)] = Array(value.readableBytesView)
            }
            return rows
        }
        let statement = PostgresSchema.ReadMany(
            service: namespace.service, group: namespace.groupColumn, keys: Set(keys.map(ItemKey.Exact.init)).map(\.key))
        for case (let key, let value?) in try await PostgresSchema.run(statement, on: connection, logger: logger) {
            rows[ItemKey.Exact(key)] = Array(value.readableBytesView)
        }
        return rows
    }

    /// The keys of every item of this service in this access group, sorted. Keys no item
    /// of this keystore can have (longer than an item key may be: another role wrote them)
    /// are left out, and never sent by the server.
    public func keys() async throws(KeystoreError) -> [String] {
        let namespace = self.namespace
        return try await perform("listing keys") { connection, logger in
            try await connection.query("""
                SELECT key FROM identity_broker_items
                WHERE service = \(namespace.service) AND access_group = \(namespace.groupColumn)
                  AND pg_catalog.octet_length(key) <= \(unescaped: String(PostgresNamespace.maximumKeyBytes))
                """, logger: logger).collect().map { try $0.decode(String.self) }
        }.sorted()
    }

    /// The most operations one combined commit statement carries.
    static let maximumGroupOperations = 256

    /// How many commit groups run at once (each on its own connection).
    static let committingConnections = 1

    /// How many combined reads run at once (each on its own connection).
    static let readingConnections = 2

    /// Applies every operation of `batch` atomically.
    ///
    /// A batch whose keys are distinct is one statement, committed by the server before it
    /// answers (a procedure): the versioned upserts, the removes and the `NOTIFY` naming the
    /// changed keys, with no advisory lock, so concurrent commits of a namespace proceed
    /// together. Batches of concurrent calls are combined into one such statement when their
    /// keys are disjoint. A batch naming a key more than once runs operation by operation, in
    /// a transaction. A connection lost once the commit may have been sent is reported, since
    /// the outcome is unknown; one found closed before is replaced and the commit runs on
    /// another.
    ///
    /// - Returns: Per operation, whether it was applied.
    /// - Throws: ``KeystoreError/Code/invalidName`` for an empty or over-long key (nothing is
    ///   applied); ``KeystoreError/Code/storeUnavailable`` when the server cannot be reached.
    @discardableResult
    public func commit(_ batch: KeystoreBatch) async throws(KeystoreError) -> [Bool] {
        guard !batch.isEmpty else { return [] }
        guard !isClosed else {
            throw KeystoreError(.storeUnavailable, "the keystore is closed", path: configuration.endpoint)
        }
        let namespace = self.namespace
        let sealed = try batch.sealed(
            validate: { (key) throws(KeystoreError) in try PostgresNamespace.validate(key: key) },
            seal: { (value, key) throws(KeystoreError) in try namespace.seal(value, forKey: key) })
        // The committer enforces the caller's deadline: a batch still queued when it passes
        // is withdrawn.
        // Its changes reach this instance's subscribers from the committer, before it returns.
        let applied = try await committer.commit(sealed, writer: batch.writer).get()
        callerLogger?.trace("keystore batch committed", metadata: [
            "broker.service": "\(service)",
            "broker.operations": "\(applied.count)",
        ])
        return applied
    }

    /// Four operation timeouts, and at least a minute. A caller is told its commit failed at
    /// its deadline; the group holding the batch may have started just before (up to one
    /// timeout), retry its batches one by one until its own timeout (the next), and such a
    /// retry may wait up to a timeout for a connection, start up to one more after it was
    /// sent (the server refuses a commit that starts later, however long the network held it
    /// back), and run up to one more on the server before the server cancels it.
    public var uncertainCommitWindow: Duration {
        Self.uncertainCommitWindow(configuration)
    }

    static func uncertainCommitWindow(_ configuration: Configuration) -> Duration {
        max(.seconds(60), configuration.operationTimeout * 4)
    }

    /// Keys changed from now on by this instance (delivered right after each commit) and by
    /// any other instance sharing the database (through `LISTEN`/`NOTIFY`, while at least one
    /// stream is iterated).
    ///
    /// A stream may also report changes committed shortly before it was created. It gets
    /// ``KeystoreChange/all`` after the feed reconnects (server restart, network failure)
    /// and when its buffer (``Configuration/changeBufferSize``) overflows. It ends when the
    /// keystore is closed.
    public func changes() -> AsyncStream<KeystoreChange> {
        feed.subscribe()
    }

    /// ``changes()`` without this instance's commits made by batches tagged `writer`; the
    /// same commits made by another instance (another origin) are still delivered.
    package func changes(excludingWriter writer: UInt64) -> AsyncStream<KeystoreChange> {
        feed.subscribe(excludingWriter: writer)
    }

    /// Whether ``close()`` was called.
    var isClosed: Bool { closed.load(ordering: .acquiring) }

    /// How many commit groups (statements or transactions) ran (for tests).
    var commitGroups: Int { committer.groupsRun }

    /// How many read queries ``value(forKey:)`` ran (for tests).
    var readGroups: Int { reader.groupsRun }

    /// Whether the change feed currently listens on a live connection (for tests).
    package var isListeningForChanges: Bool { feed.isListening }

    /// The change feed's heartbeat checks on a listening connection so far, how many of them
    /// committed a notification of their own, and how many passed on other instances'
    /// notifications alone (for tests).
    package var changeFeedChecks: (checks: Int, sent: Int, passedOnOthers: Int) {
        (feed.heartbeatChecks.load(ordering: .relaxed), feed.heartbeatsSent.load(ordering: .relaxed),
         feed.heartbeatChecksPassedOnOthers.load(ordering: .relaxed))
    }
}
