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
    /// The authorizer's state (see `ib_sqlite3_compile_guard`): set while a statement prepared
    /// earlier runs, so that SQLite compiling it again for a changed schema is refused until
    /// the new schema has passed ``StoreSchema/checkObjects(on:)``. Freed in `deinit`, after
    /// the connection that points at it has closed.
    private let compileGuard: UnsafeMutablePointer<ib_sqlite3_compile_guard>

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
        compileGuard = .allocate(capacity: 1)
        compileGuard.initialize(to: ib_sqlite3_compile_guard(guarding: 0, refused: 0))
        handle = connection
        ib_sqlite3_install_compile_guard(connection, compileGuard)
        let milliseconds = busyTimeout.wholeMilliseconds
        sqlite3_busy_timeout(connection, Int32(clamping: milliseconds))
    }

    deinit {
        close()
        compileGuard.deallocate()
    }

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
    ///
    /// A statement is prepared only against a schema that passed
    /// ``StoreSchema/checkObjects(on:)``, and runs guarded: if the schema changes afterwards
    /// (SQLite then compiles the statement again before running it), the compile is refused,
    /// the new schema is checked, and the statement is prepared anew. So no statement of this
    /// connection ever runs SQL a group member put in a shared database's schema.
    func withStatement<R>(_ sql: String, _ body: (SQLiteStatement) throws(KeystoreError) -> R) throws(KeystoreError) -> R {
        var attempts = 0
        while true {
            let statement = try preparedStatement(sql)
            let outer = compileGuard.pointee.guarding
            compileGuard.pointee = ib_sqlite3_compile_guard(guarding: 1, refused: 0)
            do {
                defer {
                    compileGuard.pointee.guarding = outer
                    sqlite3_reset(statement)
                    sqlite3_clear_bindings(statement)
                }
                return try body(SQLiteStatement(statement: statement, connection: self))
            } catch {
                attempts += 1
                guard compileGuard.pointee.refused != 0, attempts < 3 else { throw error }
                // The schema changed since the statement was prepared: prepare it again, which
                // checks the new schema first.
                compileGuard.pointee.refused = 0
                forget(statement)
            }
        }
    }

    /// The cached statement for `sql`, or a new one prepared against a schema just checked.
    private func preparedStatement(_ sql: String) throws(KeystoreError) -> OpaquePointer {
        if let cached = statements.first(where: { $0.sql == sql }) { return cached.statement }
        let connection = try open()
        let outer = compileGuard.pointee.guarding
        compileGuard.pointee.guarding = 0
        defer { compileGuard.pointee.guarding = outer }
        for _ in 0..<3 {
            let checked = try StoreSchema.checkObjects(on: self)
            var prepared: OpaquePointer?
            let result = sqlite3_prepare_v3(connection, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &prepared, nil)
            guard result == SQLITE_OK, let prepared else { throw error(result, "preparing a statement") }
            // Compiled against the schema checked above, unless it changed in between.
            if try StoreSchema.schemaVersion(on: self) == checked {
                statements.append(PreparedStatement(sql: sql, statement: prepared))
                return prepared
            }
            sqlite3_finalize(prepared)
        }
        throw KeystoreError(.storeUnavailable, "the database's schema kept changing while a statement was prepared", path: path)
    }

    private func forget(_ statement: OpaquePointer) {
        statements.removeAll { $0.statement == statement }
        sqlite3_finalize(statement)
    }

    /// Runs `body` with a statement prepared for this call only and finalised after it,
    /// unguarded and without a schema check: for the schema check itself.
    func withUncheckedStatement<R>(_ sql: String, _ body: (SQLiteStatement) throws(KeystoreError) -> R) throws(KeystoreError) -> R {
        let connection = try open()
        let outer = compileGuard.pointee.guarding
        compileGuard.pointee.guarding = 0
        defer { compileGuard.pointee.guarding = outer }
        var prepared: OpaquePointer?
        let result = sqlite3_prepare_v2(connection, sql, -1, &prepared, nil)
        guard result == SQLITE_OK, let prepared else { throw error(result, "preparing a statement") }
        defer { sqlite3_finalize(prepared) }
        return try body(SQLiteStatement(statement: prepared, connection: self))
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
