public import Logging
import Dispatch

/// The embedded ``Keystore``: AES-256-GCM sealed items in one SQLite database per namespace
/// (service and ``AccessGroup``) under a root directory.
///
/// ```swift
/// let keystore = try SQLiteKeystore(root: "/var/lib/my-tool/identity-broker", service: "my-tool")
/// try await keystore.set(Array("value".utf8), forKey: "my-tool.greeting")
/// let value = try await keystore.value(forKey: "my-tool.greeting")
/// ```
///
/// Opening creates and checks the directories, key and database (see the layout and
/// permission rules in the SecureStorage documentation), and, when
/// ``Configuration/moveItemsFromPreviousGroup`` is on and the service last used another
/// group, moves its items first. Only ciphertext reaches the database. An item holds at most
/// 1 MiB sealed (its value plus 29 bytes); a larger one is refused with
/// ``KeystoreError/Code/valueTooLarge``.
///
/// Writes from any number of tasks go to one writer connection on its own queue; batches that
/// arrive while a commit runs share the next commit (one fsync for all). Reads use separate
/// connections and never wait for a commit (a read runs on the caller's thread when it can
/// answer at once); checkpoints run in the background. A commit runs on its caller's thread
/// (a thread of Swift's cooperative pool, for an `async` caller) only when the writer is idle
/// and its lock free at once: it then blocks that thread for its fsync (and, every ~2,000 WAL
/// pages, for the rest of a checkpoint); anything that has to wait for a lock waits on the
/// writer's own queue.
/// Call ``close()`` when done (deinit does it too).
public final class SQLiteKeystore: Keystore, WriterFilteringKeystore {
    /// The root directory all namespaces live under (without trailing slashes).
    public let root: String
    /// The service (tool) name this keystore belongs to.
    public let service: String
    /// The access group this keystore reads and writes.
    public let accessGroup: AccessGroup
    /// The configuration the keystore was opened with.
    public let configuration: Configuration

    let namespace: StoreNamespace
    let origin: Int64
    let writer: GroupCommitter
    private let readers: ReaderPool
    let checkpointer: Checkpointer
    private let feed: ChangeFeed
    private let logger: Logger?

    /// Opens (creating on first use) the keystore for `service` in `accessGroup` under `root`.
    ///
    /// - Parameters:
    ///   - root: The root directory; created 0700 when missing. A root writable by others is
    ///     refused, and one writable by its group must be sticky (3770, say), else
    ///     ``KeystoreError/Code/insecurePermissions``.
    ///   - service: The name of the tool owning the items; non-empty, at most 150 bytes.
    ///   - accessGroup: Where the items live; see ``AccessGroup``.
    ///   - keySource: Where the 256-bit key comes from; a key file per namespace by default.
    ///   - configuration: Timeouts, change-feed polling and the group-migration policy.
    ///   - logger: A logger for debug and notice messages; never given a secret.
    /// - Throws: ``KeystoreError``.
    public init(
        root: String,
        service: String,
        accessGroup: AccessGroup = .none,
        keySource: KeySource = .keyFile,
        configuration: Configuration = .init(),
        logger: Logger? = nil
    ) throws(KeystoreError) {
        try configuration.check()
        try KeystoreError.rethrowing { try CryptoRuntime.ensureInitialised() }
        let layout = try StoreLayout(root: root, service: service, checksWayToRoot: configuration.checksWayToRoot)
        let (privateStore, privateConnection) = try Self.recordGroup(
            accessGroup, layout: layout, keySource: keySource, configuration: configuration, logger: logger
        )
        // The private database's connection stays open until the writer's is: closing the last
        // connection makes SQLite checkpoint and delete the -wal and -shm files, which the
        // next open creates again (file creation was a large part of `federate credentials`'
        // kernel time; docs/performance.md, 5b). For the private group it is the writer's
        // connection itself.
        let namespace: StoreNamespace
        let writerConnection: SQLiteConnection
        do throws(KeystoreError) {
            if let privateStore {
                namespace = privateStore
                writerConnection = privateConnection
            } else {
                guard let opened = try StoreNamespace.open(layout: layout, group: accessGroup, keySource: keySource, create: .whatIsMissing(busyTimeout: configuration.busyTimeout)) else {
                    throw KeystoreError(.invalidKey, "no key available for the access group")
                }
                namespace = opened
                writerConnection = try namespace.connect(service: service, busyTimeout: configuration.busyTimeout)
                privateConnection.close()
            }
            // Before anything is written: a process with another key must not replace items.
            try namespace.verifyKey(on: writerConnection, service: service)
        } catch {
            privateConnection.close()
            throw error
        }
        let checkpointer = Checkpointer(path: namespace.databasePath, busyTimeout: configuration.busyTimeout)
        try checkpointer.attach(to: writerConnection)
        let origin = try KeystoreError.rethrowing {
            try CryptoRuntime.randomBytes(8).reduce(Int64(0)) { $0 << 8 | Int64($1) }
        }
        let (oldest, newest) = try writerConnection.withStatement(StoreSchema.changeBounds) {
            statement throws(KeystoreError) -> (Int64?, Int64) in
            _ = try statement.step()
            return (statement.isNull(0) ? nil : statement.int64(0), statement.isNull(1) ? 0 : statement.int64(1))
        }
        // The file the writer has open, which the readers opened too: the path's, unless it was
        // replaced since SQLite opened it (checked after the watch recorded it).
        let watch = DatabaseFileWatch(path: namespace.databasePath)
        let readers = try ReaderPool(path: namespace.databasePath, busyTimeout: configuration.busyTimeout, watch: watch)
        do throws(KeystoreError) {
            if try writerConnection.hasMoved() || watch.lookNow() {
                throw SQLiteConnection.replaced(namespace.databasePath, "nothing was read")
            }
        } catch {
            readers.close()
            writerConnection.close()
            throw error
        }
        let feed = ChangeFeed(
            path: namespace.databasePath, origin: origin, interval: configuration.changePollInterval,
            busyTimeout: configuration.busyTimeout, knownSequence: newest, watch: watch, logger: logger
        )
        self.root = layout.root
        self.service = service
        self.accessGroup = accessGroup
        self.configuration = configuration
        self.namespace = namespace
        self.origin = origin
        self.feed = feed
        self.readers = readers
        self.checkpointer = checkpointer
        self.writer = GroupCommitter(
            connection: writerConnection, origin: origin, retention: configuration.changeLogRetention,
            oldestSequence: oldest
        ) { changes, lastSequence in
            feed.deliverLocal(changes, lastSequence: lastSequence)
        }
        self.logger = logger
        let guardResult = SQLiteConnection.shmGuardResult
        logger?.debug("keystore opened", metadata: [
            "broker.service": "\(service)",
            "broker.accessGroup": "\(accessGroup)",
            "broker.keySource": "\(keySource)",
            "broker.shmGuard": "\(guardResult == 0 ? "installed" : "not installed (errno \(guardResult))")",
            "broker.openGuard": "\(SQLiteConnection.openGuardResult == 0 ? "installed" : "not installed (errno \(SQLiteConnection.openGuardResult))")",
        ])
        if let fileSystem = NetworkFileSystem.name(ofFileSystemAt: namespace.databasePath) {
            logger?.warning(
                """
                the keystore's database is on a network file system (\(fileSystem)): SQLite shares its write-ahead log's index \
                between the processes of one host only, so processes on another host that open it can corrupt it; \
                share sessions between hosts through a PostgreSQL keystore
                """,
                metadata: ["broker.path": "\(namespace.databasePath)"])
        }
        if guardResult != 0 && accessGroup.isShared {
            logger?.warning(
                "SIGBUS guard not installed: a member of the access group who truncates the database's -shm file can end this process",
                metadata: ["broker.accessGroup": "\(accessGroup)", "broker.errno": "\(guardResult)"])
        }
    }

    deinit { close() }

    /// Stops the change poller, ends every ``changes()`` stream, lets queued commits finish and
    /// closes the connections, after the reads and the commit in progress; it returns once
    /// they are closed. Later calls fail with ``KeystoreError/Code/storeUnavailable``.
    /// Calling it again does nothing, and returns at once even while the first call still
    /// waits. It is synchronous, also when called as ``Keystore/close()``: it holds its
    /// thread until then (at most the busy timeout behind a read or commit in progress).
    public func close() {
        feed.close()
        writer.close()
        checkpointer.close()
        readers.close()
    }

    /// Returns the value stored under `key`, or `nil` when there is none.
    ///
    /// - Throws: ``KeystoreError/Code/authenticationFailed`` or
    ///   ``KeystoreError/Code/corruptFormat`` for this item alone when it cannot be opened;
    ///   other codes when the database cannot be read.
    public func value(forKey key: String) async throws(KeystoreError) -> [UInt8]? {
        try StoreNamespace.validate(key: key)
        let namespace = self.namespace
        return try await readers.read { connection throws(KeystoreError) -> [UInt8]? in
            try Self.value(forKey: key, on: connection, namespace: namespace)
        }
    }

    /// The opened value of `key` read on `connection`; shared with ``SingleReader``.
    static func value(forKey key: String, on connection: SQLiteConnection, namespace: StoreNamespace) throws(KeystoreError) -> [UInt8]? {
        let sealed = try StoreSchema.sealedValue(forKey: key, on: connection)
        return try sealed.map { sealed throws(KeystoreError) in try namespace.open(sealed, forKey: key) }
    }

    /// The keys of every item of this service in this access group, sorted.
    ///
    /// A row whose key cannot be read (over the keystore's length limit, which a member of a
    /// shared group can plant, or damaged) is left out, with a warning, rather than failing
    /// the whole listing: like an unreadable item, it affects only itself.
    public func keys() async throws(KeystoreError) -> [String] {
        let (keys, unreadable) = try await readers.read { connection throws(KeystoreError) -> ([String], Int) in
            try StoreSchema.everyItem(StoreSchema.selectKeys, byId: StoreSchema.selectKeyById, on: connection) { $0.text(0) }
        }
        if unreadable > 0 {
            logger?.warning("keys left out of the listing: their rows cannot be read", metadata: [
                "broker.service": "\(service)", "broker.accessGroup": "\(accessGroup)", "broker.rows": "\(unreadable)",
            ])
        }
        return keys.sorted()
    }

    /// Applies every operation of `batch` in one atomic, durable commit, shared with batches
    /// other tasks submitted meanwhile.
    ///
    /// - Returns: Per operation, whether it was applied.
    /// - Throws: ``KeystoreError/Code/invalidName`` for an empty or over-long key (nothing is
    ///   applied); ``KeystoreError/Code/storeUnavailable`` when the store stayed busy past
    ///   ``Configuration/busyTimeout``; ``KeystoreError/Code/io`` for a failed write.
    @discardableResult
    public func commit(_ batch: KeystoreBatch) async throws(KeystoreError) -> [Bool] {
        guard !batch.isEmpty else { return [] }
        let namespace = self.namespace
        let sealed = try batch.sealed(
            validate: { (key) throws(KeystoreError) in try StoreNamespace.validate(key: key) },
            seal: { (value, key) throws(KeystoreError) in try namespace.seal(value, forKey: key) })
        let writer = self.writer
        let result: Result<[Bool], KeystoreError>
        if let committed = writer.commitIfIdle(sealed, writer: batch.writer) {
            result = committed
        } else {
            result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<[Bool], KeystoreError>, Never>) in
                writer.submit(sealed, writer: batch.writer) { continuation.resume(returning: $0) }
            }
        }
        let applied = try result.get()
        logger?.trace("keystore batch committed", metadata: [
            "broker.service": "\(service)",
            "broker.operations": "\(applied.count)",
        ])
        return applied
    }

    /// Keys changed from now on by this instance (delivered right after each commit) and by
    /// any other process or instance sharing the database (found by polling every
    /// ``Configuration/changePollInterval`` while at least one stream it returned exists).
    ///
    /// A stream may also report changes committed shortly before it was created. It buffers
    /// up to 4,096 changes; a subscriber that falls further behind loses the oldest and
    /// receives ``KeystoreChange/all``. It ends when the keystore is closed.
    public func changes() -> AsyncStream<KeystoreChange> {
        feed.subscribe()
    }

    /// ``changes()`` without this instance's commits made solely by batches tagged `writer`.
    package func changes(excludingWriter writer: UInt64) -> AsyncStream<KeystoreChange> {
        feed.subscribe(excludingWriter: writer)
    }
}
