import BrokerTestSupport
import CSQLite
import Foundation
import XCTest
@testable import SecureStorage

/// A fixed raw key, so tests can open one store from several instances and processes.
func testKey(_ byte: UInt8 = 7) -> KeySource { .raw([UInt8](repeating: byte, count: 32)) }

/// Runs `body` on a plain thread and fails the test if it does not finish within `seconds`, so
/// a planted FIFO that blocked an open would fail rather than hang the suite.
func withinTimeout<T: Sendable>(_ seconds: Double, file: StaticString = #filePath, line: UInt = #line, _ body: @escaping @Sendable () -> T) -> T? {
    let done = DispatchSemaphore(value: 0)
    let box = LockedBox<T?>(nil)
    Thread.detachNewThread {
        let value = body()
        box.withLock { $0 = value }
        done.signal()
    }
    guard done.wait(timeout: .now() + seconds) == .success else {
        XCTFail("timed out after \(seconds) s (blocked?)", file: file, line: line)
        return nil
    }
    return box.current
}

/// What an attacker can plant where the store expects one of its files (each planter takes
/// the path): a symbolic link to a victim file, a FIFO, a directory. The caller removes the
/// victim file.
func hostilePlants() throws -> (victim: String, plants: [(name: String, plant: (String) -> Int32)]) {
    let victim = FileManager.default.temporaryDirectory.appendingPathComponent("victim-\(UUID().uuidString)").path
    guard FileManager.default.createFile(atPath: victim, contents: Data()) else {
        throw KeystoreError(.io, "could not create the victim file", path: victim)
    }
    return (victim, [
        ("symlink", { symlink(victim, $0) }),
        ("fifo", { mkfifo($0, 0o600) }),
        ("directory", { mkdir($0, 0o700) }),
    ])
}

/// The attack of a database moved between services: "tool"'s private database, holding one
/// item, hard-linked where "other"'s private database goes (its meta row still names "tool").
func databaseOfToolLinkedAsOther(root: String, tool: String = "tool", other: String = "other") async throws {
    let keystore = try SQLiteKeystore(root: root, service: tool, keySource: testKey())
    try await keystore.set(bytes("x"), forKey: "k")
    let path = keystore.namespace.databasePath
    keystore.close()
    let layout = try StoreLayout(root: root, service: other)
    XCTAssertEqual(link(path, layout.databasePath(.none)), 0)
}

/// Opens a store synchronously, returning the error code on failure (for the timeout helper).
func openResult(root: String, service: String = "tool", group: AccessGroup = .none, keySource: KeySource = .keyFile) -> Result<SQLiteKeystore, KeystoreError> {
    Result { () throws(KeystoreError) -> SQLiteKeystore in
        try SQLiteKeystore(root: root, service: service, accessGroup: group, keySource: keySource)
    }
}

/// Renames a copy of `keystore`'s database over it while it is open, as a group member (or
/// an operator restoring a copy) could.
func replaceDatabase(of keystore: SQLiteKeystore, file: StaticString = #filePath, line: UInt = #line) throws {
    let path = keystore.namespace.databasePath
    try FileManager.default.copyItem(atPath: path, toPath: path + ".copy")
    XCTAssertEqual(rename(path + ".copy", path), 0, file: file, line: line)
}

/// Asserts that `call`, made on a keystore whose database was replaced while open, fails
/// saying so.
func assertFailsForTheReplacedDatabase(
    _ what: String, file: StaticString = #filePath, line: UInt = #line, _ call: () async throws -> Void
) async {
    do {
        try await call()
        XCTFail("\(what) went to the replaced database", file: file, line: line)
    } catch let error as KeystoreError {
        XCTAssertEqual(error.code, .storeUnavailable, "\(error)", file: file, line: line)
        XCTAssertTrue(error.reason.contains("replaced or removed"), error.reason, file: file, line: line)
    } catch {
        XCTFail("\(error)", file: file, line: line)
    }
}

/// Runs SQL directly on a keystore's database, as an attacker with file access (or a disk
/// fault) could.
func tamper(_ path: String, _ body: (SQLiteConnection) throws(KeystoreError) -> Void) throws {
    let connection = try SQLiteConnection(path: path, busyTimeout: .seconds(5))
    defer { connection.close() }
    try body(connection)
}

/// How many rows `table` of the database at `path` holds, read as someone with access to
/// the file could.
func rowCount(_ path: String, table: String) throws -> Int {
    var count = 0
    try tamper(path) { connection throws(KeystoreError) in
        count = try connection.withStatement("SELECT count(*) FROM \(table)") { statement throws(KeystoreError) -> Int in
            _ = try statement.step()
            return Int(statement.int64(0))
        }
    }
    return count
}

func sealedValue(_ connection: SQLiteConnection, key: String) throws(KeystoreError) -> [UInt8]? {
    try StoreSchema.sealedValue(forKey: key, on: connection)
}

func storeSealed(_ connection: SQLiteConnection, key: String, value: [UInt8]) throws(KeystoreError) {
    try StoreSchema.replaceSealedValue(value, forKey: key, on: connection)
}

/// Collects changes from a stream until `predicate` holds or `seconds` pass.
func collectChanges(
    _ stream: AsyncStream<KeystoreChange>,
    within seconds: Double,
    until predicate: @escaping @Sendable (Set<KeystoreChange>) -> Bool
) async -> Set<KeystoreChange> {
    await withTaskGroup(of: Set<KeystoreChange>?.self) { group in
        group.addTask {
            var seen: Set<KeystoreChange> = []
            for await change in stream {
                seen.insert(change)
                if predicate(seen) { return seen }
            }
            return seen
        }
        group.addTask {
            try? await Task.sleep(for: .seconds(seconds))
            return nil
        }
        var result: Set<KeystoreChange> = []
        for await value in group {
            if let value { result = value }
            group.cancelAll()
            break
        }
        return result
    }
}

/// Runs `sql` on a database through a plain libsqlite3 connection, without the keystore's
/// connection settings (triggers and views on, no length limit): what a group member who
/// can write a shared database runs.
func plainSQLite(_ path: String, _ sql: String) throws {
    var handle: OpaquePointer?
    defer { sqlite3_close_v2(handle) }
    guard sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK else {
        throw KeystoreError(.io, "could not open the database", path: path)
    }
    sqlite3_busy_timeout(handle, 5000)
    guard sqlite3_exec(handle, sql, nil, nil, nil) == SQLITE_OK else {
        throw KeystoreError(.io, "could not run the SQL: \(String(cString: sqlite3_errmsg(handle)))", path: path)
    }
}

/// A plain libsqlite3 connection kept open, as a group member's process holds one: for
/// attacks that need a transaction held across the victim's call.
final class PlainSQLiteConnection: @unchecked Sendable {
    private var handle: OpaquePointer?
    let path: String

    init(_ path: String) throws {
        self.path = path
        guard sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK else {
            throw KeystoreError(.io, "could not open the database", path: path)
        }
        sqlite3_busy_timeout(handle, 5000)
    }

    deinit { sqlite3_close_v2(handle) }

    func run(_ sql: String) throws {
        guard sqlite3_exec(handle, sql, nil, nil, nil) == SQLITE_OK else {
            throw KeystoreError(.io, "could not run the SQL: \(String(cString: sqlite3_errmsg(handle)))", path: path)
        }
    }
}

/// Stores `count` items `k0`… (values `value-0`…, versions 0…) in one commit, as "tool" in
/// `group` under `root`.
func fill(_ root: String, group: AccessGroup, count: Int, keySource: KeySource = .keyFile) async throws {
    let keystore = try SQLiteKeystore(root: root, service: "tool", accessGroup: group, keySource: keySource)
    defer { keystore.close() }
    var batch = KeystoreBatch()
    for index in 0..<count { batch.set(bytes("value-\(index)"), forKey: "k\(index)", version: Int64(index)) }
    try await keystore.commit(batch)
}

/// Every item of "tool" in `group` under `root`, read with `keySource`, by key.
func contents(_ root: String, group: AccessGroup, keySource: KeySource = .keyFile) async throws -> [String: String] {
    let keystore = try SQLiteKeystore(root: root, service: "tool", accessGroup: group, keySource: keySource)
    defer { keystore.close() }
    var result: [String: String] = [:]
    for key in try await keystore.keys() { result[key] = string(try await keystore.requireValue(forKey: key)) }
    return result
}
