import CSQLite

/// The closure behind a connection's WAL hook, passed to SQLite as its context pointer.
private final class WALHook: Sendable {
    let body: @Sendable (Int) -> Void
    init(_ body: @escaping @Sendable (Int) -> Void) { self.body = body }
}

/// A statement prepared once on a connection and kept for the connection's lifetime.
private struct PreparedStatement {
    let sql: String
    let statement: OpaquePointer
}

/// One SQLite connection with its cache of prepared statements.
///
/// A connection is opened with `SQLITE_OPEN_NOMUTEX`: its owner (the writer's serial queue or
/// a caller committing while the writer is idle, a reader borrowed from the pool, the change
/// poller's queue) uses it from one thread at a time,
/// which is what makes the unchecked `Sendable` sound.
final class SQLiteConnection: @unchecked Sendable {
    /// The most bytes any string, blob or row may hold, read or written: a sealed item is
    /// at most this long. Sessions take ~1.3 KB; the bound keeps a value a group member
    /// planted in a shared database from making a reader allocate without limit.
    static let maximumLength = 1 << 20

    let path: String
    /// How long a statement waits for another connection's lock before reporting busy.
    let busyTimeout: Duration
    private var handle: OpaquePointer?
    /// A handful of fixed SQL texts per connection, searched in order. Not a dictionary: its
    /// storage type is instantiated at run time with a conformance lookup for its key, which
    /// cost a short-lived process (`federate credentials`) more than all its SQL did.
    private var statements: [PreparedStatement] = []
    private var walHook: Unmanaged<WALHook>?

    /// Opens an existing database file (``StoreLayout`` creates and checks it first); never
    /// follows a symbolic link and never creates the file.
    init(path: String, busyTimeout: Duration) throws(KeystoreError) {
        self.path = path
        self.busyTimeout = busyTimeout
        var connection: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_EXRESCODE
        let result = sqlite3_open_v2(path, &connection, flags, nil)
        guard result == SQLITE_OK else {
            let error = KeystoreError.sqlite(result, connection: connection, path: path, operation: "open")
            sqlite3_close_v2(connection)
            throw error
        }
        let hardened = ib_sqlite3_harden(connection, Int32(Self.maximumLength))
        guard hardened == SQLITE_OK else {
            let error = KeystoreError.sqlite(hardened, connection: connection, path: path, operation: "configuring the connection")
            sqlite3_close_v2(connection)
            throw error
        }
        handle = connection
        let milliseconds = busyTimeout.wholeMilliseconds
        sqlite3_busy_timeout(connection, Int32(clamping: milliseconds))
    }

    deinit { close() }

    /// Finalises every cached statement and closes the connection; later calls fail with
    /// ``KeystoreError/Code/storeUnavailable``.
    func close() {
        for prepared in statements { sqlite3_finalize(prepared.statement) }
        statements.removeAll()
        if let handle { sqlite3_close_v2(handle) }
        handle = nil
        walHook?.release()
        walHook = nil
    }

    /// Calls `body` after each commit of this connection with the WAL's size in pages. It
    /// replaces SQLite's automatic checkpoint (which is itself a WAL hook), so whoever sets it
    /// takes over checkpointing.
    func onCommit(walPages body: @escaping @Sendable (Int) -> Void) throws(KeystoreError) {
        let connection = try open()
        let hook = Unmanaged.passRetained(WALHook(body))
        sqlite3_wal_hook(connection, { context, _, _, pages in
            if let context { Unmanaged<WALHook>.fromOpaque(context).takeUnretainedValue().body(Int(pages)) }
            return SQLITE_OK
        }, hook.toOpaque())
        walHook?.release()
        walHook = hook
    }

    /// Copies what it can of the WAL into the database without waiting for any reader or
    /// writer (SQLite's `PASSIVE` checkpoint, the kind its automatic checkpoint runs).
    /// - Returns: Whether every frame of the WAL is now in the database (the next write then
    ///   starts the WAL over from its beginning).
    @discardableResult
    func checkpointPassively() throws(KeystoreError) -> Bool {
        let connection = try open()
        var frames: Int32 = 0
        var copied: Int32 = 0
        let result = sqlite3_wal_checkpoint_v2(connection, nil, SQLITE_CHECKPOINT_PASSIVE, &frames, &copied)
        guard result == SQLITE_OK else { throw error(result, "checkpointing the WAL") }
        return copied >= frames
    }

    private func open() throws(KeystoreError) -> OpaquePointer {
        guard let handle else { throw KeystoreError(.storeUnavailable, "the keystore is closed", path: path) }
        return handle
    }

    func error(_ code: Int32, _ operation: String) -> KeystoreError {
        KeystoreError.sqlite(code, connection: handle, path: path, operation: operation)
    }

    /// Runs SQL without results (schema, pragmas that return nothing useful).
    func execute(_ sql: String) throws(KeystoreError) {
        let connection = try open()
        let result = sqlite3_exec(connection, sql, nil, nil, nil)
        guard result == SQLITE_OK else { throw error(result, "executing SQL") }
    }

    /// Runs `body` with the cached prepared statement for `sql`, reset and cleared afterwards
    /// so it holds no read snapshot and no bound value.
    func withStatement<R>(_ sql: String, _ body: (SQLiteStatement) throws(KeystoreError) -> R) throws(KeystoreError) -> R {
        let connection = try open()
        let statement: OpaquePointer
        if let cached = statements.first(where: { $0.sql == sql }) {
            statement = cached.statement
        } else {
            var prepared: OpaquePointer?
            let result = sqlite3_prepare_v3(connection, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &prepared, nil)
            guard result == SQLITE_OK, let prepared else { throw error(result, "preparing a statement") }
            statements.append(PreparedStatement(sql: sql, statement: prepared))
            statement = prepared
        }
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
        }
        return try body(SQLiteStatement(statement: statement, connection: self))
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE on this connection.
    var changes: Int {
        guard let handle else { return 0 }
        return Int(sqlite3_changes(handle))
    }

    /// The rowid of the last row this connection inserted.
    var lastInsertedRowID: Int64? {
        guard let handle else { return nil }
        return sqlite3_last_insert_rowid(handle)
    }

    /// Whether no transaction is open (after a failed COMMIT, one may still be).
    var isAutocommit: Bool {
        guard let handle else { return true }
        return sqlite3_get_autocommit(handle) != 0
    }

    /// Runs `body` in a `BEGIN IMMEDIATE` transaction (the write lock is taken up front, so a
    /// busy store fails at BEGIN, after the busy timeout, rather than half-way), rolling back on
    /// any error.
    func immediateTransaction<R>(_ body: () throws(KeystoreError) -> R) throws(KeystoreError) -> R {
        try transaction(beginning: "BEGIN IMMEDIATE", body)
    }

    /// ``immediateTransaction(_:)`` that does not wait for another connection's write lock:
    /// `BEGIN IMMEDIATE` fails at once with ``KeystoreError/Code/storeUnavailable`` when the
    /// store is busy, having changed nothing.
    func immediateTransactionWithoutWaiting<R>(_ body: () throws(KeystoreError) -> R) throws(KeystoreError) -> R {
        try withoutWaiting { () throws(KeystoreError) -> R in try transaction(beginning: "BEGIN IMMEDIATE", body) }
    }

    /// Runs `body` with no busy timeout: a statement that needs another connection's lock
    /// fails at once with ``KeystoreError/Code/storeUnavailable`` instead of waiting.
    func withoutWaiting<R>(_ body: () throws(KeystoreError) -> R) throws(KeystoreError) -> R {
        let connection = try open()
        sqlite3_busy_timeout(connection, 0)
        defer { sqlite3_busy_timeout(connection, Int32(clamping: busyTimeout.wholeMilliseconds)) }
        return try body()
    }

    /// Runs `body` in a deferred read transaction, so every statement sees one snapshot.
    func readTransaction<R>(_ body: () throws(KeystoreError) -> R) throws(KeystoreError) -> R {
        try transaction(beginning: "BEGIN", body)
    }

    private func transaction<R>(beginning begin: String, _ body: () throws(KeystoreError) -> R) throws(KeystoreError) -> R {
        try run(begin)
        do {
            let result = try body()
            try run("COMMIT")
            return result
        } catch {
            rollback()
            throw error
        }
    }

    func rollback() {
        if !isAutocommit { try? run("ROLLBACK") }
    }

    /// Steps a statement without parameters to completion.
    func run(_ sql: String) throws(KeystoreError) {
        try withStatement(sql) { statement throws(KeystoreError) in
            while try statement.step() {}
        }
    }
}
