import CSQLite
import Foundation
import Synchronization
import XCTest
@testable import SecureStorage

/// The database layout: what a commit costs in WAL pages, and upgrades of older databases.
final class StoreSchemaTests: XCTestCase {
    /// Every page a commit touches is written to the WAL, synced, read again by readers and
    /// copied by the checkpoint. Version 1's layout wrote 44 KB for one new ~1.3 KB session
    /// and 25 KB for an update; these bounds fail if the layout regresses towards it.
    func testACommitWritesFewWALPagesForANewItemAndFewerForAnUpdate() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())
        defer { keystore.close() }
        let wal = keystore.namespace.databasePath + "-wal"
        func walBytes() -> Int { (try? FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int) ?? 0 }
        let value = [UInt8](repeating: 0x5A, count: 1_300)
        // Well under the checkpoint threshold, so the WAL only grows and its size counts pages.
        let commits = 100

        let beforeInserts = walBytes()
        for index in 0..<commits { try await keystore.set(value, forKey: "session-\(index * 7_919 % commits)") }
        let perInsert = (walBytes() - beforeInserts) / commits
        XCTAssertGreaterThan(perInsert, 0, "commits did not reach the WAL")
        XCTAssertLessThanOrEqual(perInsert, 20_000, "a new item wrote \(perInsert) bytes to the WAL")

        let beforeUpdates = walBytes()
        for index in 0..<commits { try await keystore.set(value, forKey: "session-\(index % 10)") }
        let perUpdate = (walBytes() - beforeUpdates) / commits
        XCTAssertLessThanOrEqual(perUpdate, 12_000, "an update wrote \(perUpdate) bytes to the WAL")
        XCTAssertEqual(keystore.checkpointer.backgroundPasses.load(ordering: .relaxed), 0, "a checkpoint ran and reset the WAL")
    }

    /// A database written by version 1 (items in a `WITHOUT ROWID` table, an `AUTOINCREMENT`
    /// change log) is rebuilt in the current layout when it is opened: every item and change
    /// row is kept, sequence numbers go on from where they were, and it is opened only once.
    func testAVersion1DatabaseIsUpgradedKeepingItsItemsAndChangeLog() async throws {
        let temporary = try TemporaryRoot()
        let original = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())
        // Versioned items (a version lost in the upgrade would let an older write win).
        for index in 0..<50 { try await original.set(bytes("value-\(index)"), forKey: "k\(index)", version: Int64(index)) }
        let path = original.namespace.databasePath
        original.close()
        try tamper(path) { connection throws(KeystoreError) in
            // The log's oldest rows trimmed, as a long-lived database's are: renumbered rows
            // would show as a changed oldest sequence.
            try connection.execute("DELETE FROM changes WHERE seq <= 20")
            try connection.execute("""
                CREATE TABLE items_v1(key TEXT PRIMARY KEY, version INTEGER, value BLOB NOT NULL) WITHOUT ROWID;
                INSERT INTO items_v1 SELECT key, version, value FROM items;
                DROP TABLE items;
                ALTER TABLE items_v1 RENAME TO items;
                CREATE TABLE changes_v1(seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, origin INTEGER NOT NULL);
                INSERT INTO changes_v1 SELECT seq, key, origin FROM changes;
                DROP TABLE changes;
                ALTER TABLE changes_v1 RENAME TO changes;
                UPDATE meta SET value = '1' WHERE name = 'schema_version';
                """)
        }
        let (oldOldest, oldNewest) = try sequenceBounds(path)
        XCTAssertGreaterThan(oldOldest, 1, "the fixture's log was not trimmed")
        XCTAssertEqual(try tableSQL(path, "items").contains("WITHOUT ROWID"), true, "the fixture is not a version 1 database")

        let upgraded = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())
        defer { upgraded.close() }
        for index in 0..<50 {
            let value = try await upgraded.value(forKey: "k\(index)")
            XCTAssertEqual(value, bytes("value-\(index)"))
        }
        XCTAssertFalse(try tableSQL(path, "items").contains("WITHOUT ROWID"))
        XCTAssertFalse(try tableSQL(path, "changes").contains("AUTOINCREMENT"))
        XCTAssertEqual(try schemaVersion(path), "\(StoreSchema.version)")
        XCTAssertEqual(try sequenceBounds(path).newest, oldNewest, "the change log lost rows")
        XCTAssertEqual(try sequenceBounds(path).oldest, oldOldest, "the change log was renumbered")
        // The items kept their versions: an older write to k7 (version 7) does not apply.
        let older = try await upgraded.set(bytes("older"), forKey: "k7", version: 3)
        XCTAssertFalse(older, "k7 lost its version in the upgrade")
        let k7 = try await upgraded.value(forKey: "k7")
        XCTAssertEqual(k7, bytes("value-7"))

        try await upgraded.set(bytes("after"), forKey: "k0")
        XCTAssertGreaterThan(try sequenceBounds(path).newest, oldNewest, "sequence numbers went back")
        let value = try await upgraded.value(forKey: "k0")
        XCTAssertEqual(value, bytes("after"))
    }

    /// A libsqlite3 older than the keystore needs (one that silently ignores
    /// `SQLITE_OPEN_NOFOLLOW`, before 3.31) or built without thread safety is named in the
    /// open's error instead of failing later with a bare code; the one this process loaded
    /// passes, and so does Debian 11's and RHEL 9's 3.34.
    func testALibsqlite3TooOldOrNotThreadSafeIsNamed() {
        XCTAssertNil(SQLiteConnection.libraryProblem(version: sqlite3_libversion_number(), threadSafe: sqlite3_threadsafe()))
        XCTAssertNil(SQLiteConnection.libraryProblem(version: 3_034_001, threadSafe: 1))
        XCTAssertEqual(
            SQLiteConnection.libraryProblem(version: 3_022_000, threadSafe: 1),
            "the system libsqlite3 is 3.22.0; the keystore needs 3.31.0 or later")
        XCTAssertTrue(SQLiteConnection.libraryProblem(version: 3_040_001, threadSafe: 0)?.contains("SQLITE_THREADSAFE=0") == true)
    }

    /// A database of a newer schema is refused, not written in a layout this release does not
    /// know.
    func testADatabaseOfANewerSchemaIsRefused() throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())
        let path = keystore.namespace.databasePath
        keystore.close()
        // A newer release might not use WAL: the refused database keeps its journal mode.
        try tamper(path) { connection throws(KeystoreError) in
            try connection.execute("UPDATE meta SET value = '\(StoreSchema.version + 1)' WHERE name = 'schema_version'")
            try connection.execute("PRAGMA journal_mode=DELETE")
        }
        XCTAssertThrowsError(try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())) { error in
            XCTAssertEqual((error as? KeystoreError)?.code, .corruptFormat)
            XCTAssertTrue("\(error)".contains("newer"), "\(error)")
        }
        XCTAssertEqual(try schemaVersion(path), "\(StoreSchema.version + 1)", "the refused database was written")
        XCTAssertEqual(try journalMode(path), "delete", "the refused database was switched to WAL")
    }

    /// A version no release wrote (0, negative, not a number) is called what it is, not "newer".
    func testAVersionNoReleaseWroteIsRefusedAsSuch() throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())
        let path = keystore.namespace.databasePath
        keystore.close()
        for bad in ["0", "-1", "two"] {
            try tamper(path) { connection throws(KeystoreError) in
                try connection.execute("UPDATE meta SET value = '\(bad)' WHERE name = 'schema_version'")
            }
            XCTAssertThrowsError(try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey()), bad) { error in
                XCTAssertEqual((error as? KeystoreError)?.code, .corruptFormat, bad)
                XCTAssertFalse("\(error)".contains("newer"), "\(error)")
                // Only a parsed number is quoted: the text comes from a file a group member can write.
                let expected = Int(bad).map { "schema version \($0) is not a version" } ?? "schema version is not a number"
                XCTAssertTrue("\(error)".contains(expected), "\(error)")
            }
        }
    }

    // MARK: Helpers

    private func journalMode(_ path: String) throws -> String {
        var mode = ""
        try tamper(path) { connection throws(KeystoreError) in
            mode = try connection.withStatement("PRAGMA journal_mode") { statement throws(KeystoreError) -> String in
                try statement.step() ? statement.text(0).lowercased() : ""
            }
        }
        return mode
    }

    private func tableSQL(_ path: String, _ table: String) throws -> String {
        var sql = ""
        try tamper(path) { connection throws(KeystoreError) in
            sql = try connection.withStatement("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1") { statement throws(KeystoreError) -> String in
                try statement.bind(1, text: table)
                return try statement.step() ? statement.text(0) : ""
            }
        }
        return sql
    }

    private func schemaVersion(_ path: String) throws -> String? {
        var version: String?
        try tamper(path) { connection throws(KeystoreError) in version = try StoreSchema.meta("schema_version", on: connection) }
        return version
    }

    private func sequenceBounds(_ path: String) throws -> (oldest: Int64, newest: Int64) {
        var bounds: (Int64, Int64) = (0, 0)
        try tamper(path) { connection throws(KeystoreError) in
            bounds = try connection.withStatement(StoreSchema.changeBounds) { statement throws(KeystoreError) -> (Int64, Int64) in
                _ = try statement.step()
                return (statement.int64(0), statement.int64(1))
            }
        }
        return bounds
    }
}
