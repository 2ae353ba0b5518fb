import CSQLite
import CSQLiteGuard

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
    /// The most bytes a sealed item may hold when written, and in a migration's scan
    /// (``Sealing/maximumSealedBytes``); with ``rowLimit`` the bound keeps a value a group
    /// member planted in a shared database from making a reader allocate without limit.
    static let maximumLength = Sealing.maximumSealedBytes
    /// SQLite's length limit, which applies to whole rows: an item's key and the row's own
    /// bytes on top of the largest value.
    static let rowLimit = maximumLength + (64 << 10)

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
    /// Set when SQLite's in-memory schema may differ from what was checked: after a refused
    /// recompile (SQLite loaded a changed schema to compile it) or a failed check. The next
    /// statement prepared reopens the connection, so that the schema it compiles against is
    /// loaded in the very snapshot ``StoreSchema/checkObjects(on:)`` reads. Otherwise a member
    /// could load one schema into this connection and show the check another under the same
    /// `schema_version` (which they can set), and SQLite would never reload.
    private var schemaUntrusted = false
    /// `PRAGMA` settings run through ``execute(_:)``, run again on a reopened connection.
    private var settings: [String] = []
    /// The busy timeout in force (zero inside ``withoutWaiting(_:)``), which a reopened
    /// connection gets too.
    private var activeBusyTimeout: Duration
    /// Set by ``close()``: a closed connection never reopens.
    private var isClosed = false

    /// Opens an existing database file (``StoreLayout`` creates and checks it first); never
    /// follows a symbolic link and never creates the file.
    init(path: String, busyTimeout: Duration) throws(KeystoreError) {
        self.path = path
        self.busyTimeout = busyTimeout
        activeBusyTimeout = busyTimeout
        compileGuard = .allocate(capacity: 1)
        compileGuard.initialize(to: ib_sqlite3_compile_guard(guarding: 0, refused: 0))
        // Every stored property is set by now, so a throw still runs `deinit`, which frees
        // the guard: freeing it here too was a double free (an abort when no descriptor was
        // left, `testAConnectionThatCannotOpenThrowsAndTheProcessGoesOn`).
        handle = try Self.openHandle(path: path, busyTimeout: busyTimeout, guard: compileGuard)
    }

    private static func openHandle(
        path: String, busyTimeout: Duration, guard compileGuard: UnsafeMutablePointer<ib_sqlite3_compile_guard>
    ) throws(KeystoreError) -> OpaquePointer {
        if let problem = loadedLibraryProblem { throw KeystoreError(.io, problem, path: path) }
        _ = shmGuard
        _ = openGuard
        var connection: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW
        let result = sqlite3_open_v2(path, &connection, flags, nil)
        guard result == SQLITE_OK, let connection else {
            let code = connection.map { sqlite3_extended_errcode($0) } ?? result
            let error = KeystoreError.sqlite(code, connection: connection, path: path, operation: "open")
            sqlite3_close_v2(connection)
            throw error
        }
        // Extended result codes in errors (`SQLITE_OPEN_EXRESCODE` would need 3.37).
        sqlite3_extended_result_codes(connection, 1)
        let hardened = ib_sqlite3_harden(connection, Int32(rowLimit))
        guard hardened == SQLITE_OK else {
            let error = KeystoreError.sqlite(hardened, connection: connection, path: path, operation: "configuring the connection")
            sqlite3_close_v2(connection)
            throw error
        }
        ib_sqlite3_install_compile_guard(connection, compileGuard)
        sqlite3_busy_timeout(connection, Int32(clamping: busyTimeout.wholeMilliseconds))
        return connection
    }

    /// The oldest libsqlite3 the keystore opens databases with: 3.31, for
    /// `SQLITE_OPEN_NOFOLLOW` (an older library ignores it, and would follow a link planted
    /// at a database's path) and switching views off (`ib_sqlite3_harden`). Debian 11 and
    /// RHEL 9 ship 3.34, Debian 12 3.40, Ubuntu 22.04 3.37.
    static let oldestLibraryVersion: Int32 = 3_031_000

    /// Why a libsqlite3 of `version` (`sqlite3_libversion_number()`), built with
    /// `threadSafe` (`sqlite3_threadsafe()`), cannot hold the keystore, or `nil`.
    static func libraryProblem(version: Int32, threadSafe: Int32) -> String? {
        func dotted(_ number: Int32) -> String { "\(number / 1_000_000).\(number / 1000 % 1000).\(number % 1000)" }
        if version < oldestLibraryVersion {
            return "the system libsqlite3 is \(dotted(version)); the keystore needs \(dotted(oldestLibraryVersion)) or later"
        }
        if threadSafe == 0 {
            // SQLITE_THREADSAFE=0 leaves SQLite's global state unguarded; the keystore's
            // connections run on several threads.
            return "the system libsqlite3 \(dotted(version)) was built without thread safety (SQLITE_THREADSAFE=0); the keystore needs a thread-safe build"
        }
        return nil
    }

    /// ``libraryProblem(version:threadSafe:)`` of the libsqlite3 this process loaded.
    private static let loadedLibraryProblem = libraryProblem(version: sqlite3_libversion_number(), threadSafe: sqlite3_threadsafe())

    /// Installed before the first database opens (`ib_sqlite3_shm_guard_install`): a member
    /// of a shared group who truncates a database's `-shm` file would otherwise end every
    /// process that has it open, with `SIGBUS`. Its result is not an error: without the
    /// guard (an SQLite whose system calls cannot be replaced) the keystore works as before.
    private static let shmGuard: Int32 = ib_sqlite3_shm_guard_install()

    /// Installed with ``shmGuard``: SQLite opens nothing but regular files and directories
    /// (`ib_sqlite3_open_guard_install`), so a FIFO a group member puts at a `-wal` after the
    /// keystore's checks fails that connection instead of holding it.
    private static let openGuard: Int32 = ib_sqlite3_open_guard_install()

    /// The guard's install result: 0, or an `errno` value (logged when a keystore opens).
    static var shmGuardResult: Int32 { shmGuard }

    /// ``openGuard``'s result: 0 when installed, else an `errno` value.
    static var openGuardResult: Int32 { openGuard }

    /// A new connection in place of this one, with the same settings and WAL hook, and no
    /// schema loaded yet. Only outside a transaction (a rolled-back one is gone anyway).
    private func reopen() throws(KeystoreError) {
        guard !isClosed else { throw KeystoreError(.storeUnavailable, "the keystore is closed", path: path) }
        dropStatements()
        if let handle { sqlite3_close_v2(handle) }
        handle = nil
        let connection = try Self.openHandle(path: path, busyTimeout: activeBusyTimeout, guard: compileGuard)
        handle = connection
        // The schema is loaded, and checked, in one snapshot before anything else runs: some
        // settings load it too, in a snapshot of their own that no check reads, and SQLite
        // keeps a schema it holds for as long as `schema_version` stays (a member sets it).
        try inOwnSnapshot { () throws(KeystoreError) in try StoreSchema.checkObjects(on: self) }
        if let walHook { sqlite3_wal_hook(connection, Self.walCallback, walHook.toOpaque()) }
        for setting in settings { try exec(setting) }
        schemaUntrusted = false
    }

    /// Runs `body` in a read transaction whose snapshot is fixed before it (`PRAGMA
    /// data_version` starts it and reads no schema), so a schema SQLite loads inside is
    /// loaded from the snapshot `body` reads. A `BEGIN` alone starts no snapshot: a schema
    /// loaded before the first read would come from one of its own.
    private func inOwnSnapshot<R>(_ body: () throws(KeystoreError) -> R) throws(KeystoreError) -> R {
        try exec("BEGIN")
        do {
            try startSnapshot()
            let result = try body()
            try exec("COMMIT")
            return result
        } catch {
            try? exec("ROLLBACK")
            throw error
        }
    }

    /// Starts the open transaction's read snapshot without loading the schema.
    private func startSnapshot() throws(KeystoreError) {
        try withUncheckedStatement("PRAGMA data_version") { statement throws(KeystoreError) in _ = try statement.step() }
    }

    /// Runs `body` with compiles allowed: for our own statements, compiled against a checked
    /// schema or needing none.
    private func unguarded<R, Failure: Error>(_ body: () throws(Failure) -> R) throws(Failure) -> R {
        let outer = compileGuard.pointee.guarding
        compileGuard.pointee.guarding = 0
        defer { compileGuard.pointee.guarding = outer }
        return try body()
    }

    /// ``StoreSchema/checkObjects(on:)``; a schema that fails it stays loaded, so the
    /// connection is no longer trusted to compile anything.
    private func checkSchema() throws(KeystoreError) {
        do {
            try StoreSchema.checkObjects(on: self)
        } catch {
            schemaUntrusted = true
            throw error
        }
    }

    /// Before anything is compiled or a transaction begins: a connection whose schema is not
    /// to be trusted starts over, which it can only do outside a transaction.
    private func startOverIfUntrusted() throws(KeystoreError) {
        guard schemaUntrusted else { return }
        guard isAutocommit else { throw Self.schemaChanged(path) }
        try reopen()
    }

    private static func schemaChanged(_ path: String) -> KeystoreError {
        KeystoreError(.storeUnavailable, "the database's schema changed during the operation; try again", path: path)
    }

    deinit {
        close()
        compileGuard.deallocate()
    }

    /// Finalises every cached statement and closes the connection; later calls fail with
    /// ``KeystoreError/Code/storeUnavailable``.
    func close() {
        isClosed = true
        dropStatements()
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
        sqlite3_wal_hook(connection, Self.walCallback, hook.toOpaque())
        walHook?.release()
        walHook = hook
    }

    private static let walCallback: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafePointer<CChar>?, Int32) -> Int32 = {
        context, _, _, pages in
        if let context { Unmanaged<WALHook>.fromOpaque(context).takeUnretainedValue().body(Int(pages)) }
        return SQLITE_OK
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
        try exec(sql)
        if !sql.hasPrefix("PRAGMA") {
            // Schema statements of our own (under the write lock): what was compiled before
            // them is stale, and the next statement prepared checks the result.
            dropStatements()
        }
    }

    /// Runs a connection setting (`PRAGMA synchronous=FULL`), and again on every connection
    /// that replaces this one.
    func applySetting(_ pragma: String) throws(KeystoreError) {
        try exec(pragma)
        if !settings.contains(pragma) { settings.append(pragma) }
    }

    private func dropStatements() {
        for prepared in statements { sqlite3_finalize(prepared.statement) }
        statements.removeAll()
    }

    /// `sqlite3_exec`, unguarded: for settings, schema statements run under the write lock
    /// right after a check, and transaction control, none of which runs schema code.
    private func exec(_ sql: String) throws(KeystoreError) {
        let connection = try open()
        let result = unguarded { sqlite3_exec(connection, sql, nil, nil, nil) }
        guard result == SQLITE_OK else { throw error(result, "executing SQL") }
    }

    /// Runs `body` with the cached prepared statement for `sql`, reset and cleared afterwards
    /// so it holds no read snapshot and no bound value.
    ///
    /// A statement is prepared only against a schema that passed
    /// ``StoreSchema/checkObjects(on:)`` in the snapshot SQLite loaded it from, and runs
    /// guarded: if the schema changes afterwards (SQLite then compiles the statement again
    /// before running it), the compile is refused, and the statement is prepared anew on a
    /// reopened connection. So no statement of this connection ever runs SQL a group member
    /// put in a shared database's schema.
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
                guard compileGuard.pointee.refused != 0 else { throw error }
                // SQLite loaded a changed schema to compile the statement again, and the
                // compile was refused: that schema was never checked.
                compileGuard.pointee.refused = 0
                if isAutocommit {
                    // Loaded in the failed statement's own snapshot, which no check can read
                    // again: the next prepare starts over on a new connection.
                    schemaUntrusted = true
                } else {
                    // Loaded in this transaction's snapshot, which a check reads too.
                    try checkSchema()
                    dropStatements()
                }
                attempts += 1
                guard attempts < 3 else {
                    throw KeystoreError(.storeUnavailable, "the database's schema kept changing during the operation; try again", path: path)
                }
            }
        }
    }

    /// The cached statement for `sql`, or a new one, compiled against a schema checked in the
    /// same snapshot.
    private func preparedStatement(_ sql: String) throws(KeystoreError) -> OpaquePointer {
        // Every cached statement of an untrusted connection was compiled against a schema
        // SQLite has since replaced.
        try startOverIfUntrusted()
        if let cached = statements.first(where: { $0.sql == sql }) { return cached.statement }
        return try unguarded { () throws(KeystoreError) -> OpaquePointer in
            // Outside a transaction, the check and the compile share a snapshot of their own.
            // Inside one, its snapshot is already fixed (``transaction(beginning:_:)``).
            if isAutocommit {
                return try inOwnSnapshot { () throws(KeystoreError) -> OpaquePointer in try checkAndPrepare(sql) }
            }
            return try checkAndPrepare(sql)
        }
    }

    private func checkAndPrepare(_ sql: String) throws(KeystoreError) -> OpaquePointer {
        try checkSchema()
        let connection = try open()
        var prepared: OpaquePointer?
        // The schema is loaded and checked: our own SQL may call functions now.
        ib_sqlite3_allow_function_arguments(connection, 1)
        let result = sqlite3_prepare_v3(connection, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &prepared, nil)
        ib_sqlite3_allow_function_arguments(connection, 0)
        guard result == SQLITE_OK, let prepared else { throw error(result, "preparing a statement") }
        statements.append(PreparedStatement(sql: sql, statement: prepared))
        return prepared
    }

    /// ``execute(_:)`` for our own schema statements that call functions (a table rename
    /// does, internally), run inside a transaction after a statement of it checked the
    /// schema, so the schema SQLite holds is a checked one.
    func executeOnCheckedSchema(_ sql: String) throws(KeystoreError) {
        guard !schemaUntrusted, !isAutocommit else { throw Self.schemaChanged(path) }
        let connection = try open()
        ib_sqlite3_allow_function_arguments(connection, 1)
        defer { ib_sqlite3_allow_function_arguments(connection, 0) }
        try execute(sql)
    }

    /// Runs `body` with a statement prepared for this call only and finalised after it,
    /// unguarded and without a schema check: for the schema check itself.
    func withUncheckedStatement<R>(_ sql: String, _ body: (SQLiteStatement) throws(KeystoreError) -> R) throws(KeystoreError) -> R {
        let connection = try open()
        var prepared: OpaquePointer?
        let result = unguarded { sqlite3_prepare_v2(connection, sql, -1, &prepared, nil) }
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
        sqlite3_busy_timeout(try open(), 0)
        activeBusyTimeout = .zero
        defer {
            // On the handle in use now: `body` may have reopened the connection.
            activeBusyTimeout = busyTimeout
            if let handle { sqlite3_busy_timeout(handle, Int32(clamping: busyTimeout.wholeMilliseconds)) }
        }
        return try body()
    }

    /// Runs `body` in a deferred read transaction, so every statement sees one snapshot.
    func readTransaction<R>(_ body: () throws(KeystoreError) -> R) throws(KeystoreError) -> R {
        try transaction(beginning: "BEGIN", body)
    }

    /// Runs `body` in a read transaction, or as it is when `alreadyInOne` (the caller's
    /// transaction then gives its snapshot).
    func transactionUnless<R>(_ alreadyInOne: Bool, _ body: () throws(KeystoreError) -> R) throws(KeystoreError) -> R {
        alreadyInOne ? try body() : try readTransaction(body)
    }

    /// Transaction control runs through `sqlite3_exec`: it needs no schema, so it can neither
    /// be refused nor fail a schema check, and a rollback always ends the transaction.
    private func transaction<R>(beginning begin: String, _ body: () throws(KeystoreError) -> R) throws(KeystoreError) -> R {
        // Statements inside prepare against the transaction's snapshot.
        try startOverIfUntrusted()
        try exec(begin)
        if begin == "BEGIN" {
            // A deferred BEGIN fixes no snapshot until the first read; start it now, before
            // any statement prepared inside loads the schema.
            do {
                try startSnapshot()
            } catch {
                rollback()
                throw error
            }
        }
        do {
            let result = try body()
            if begin != "BEGIN" { try checkStillInPlace() }
            try exec("COMMIT")
            return result
        } catch {
            rollback()
            throw error
        }
    }

    /// Throws when the database file this connection has open is no longer the one at its
    /// path (renamed over, or removed): a commit would go to a file nobody opens again, while
    /// new connections read the one now there, and SQLite itself only logs it. Checked under
    /// the write lock before each commit: one `stat` of the path.
    private func checkStillInPlace() throws(KeystoreError) {
        guard try hasMoved() else { return }
        throw Self.replaced(path, "nothing was written")
    }

    /// Whether the database file this connection has open is no longer the one at its path.
    func hasMoved() throws(KeystoreError) -> Bool {
        var moved: Int32 = 0
        return sqlite3_file_control(try open(), "main", SQLITE_FCNTL_HAS_MOVED, &moved) == SQLITE_OK && moved != 0
    }

    /// The error for a call on a database whose file was replaced or removed while open.
    static func replaced(_ path: String, _ consequence: String) -> KeystoreError {
        KeystoreError(
            .storeUnavailable,
            "the database file was replaced or removed while the keystore had it open; \(consequence) (open the keystore again)",
            path: path)
    }

    func rollback() {
        if !isAutocommit { try? exec("ROLLBACK") }
    }

    /// Steps a statement without parameters to completion.
    func run(_ sql: String) throws(KeystoreError) {
        try withStatement(sql) { statement throws(KeystoreError) in
            while try statement.step() {}
        }
    }
}
