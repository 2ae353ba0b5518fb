import BrokerTestSupport
import Foundation
import XCTest
@testable import SecureStorage

/// A shared group's database is writable by every member of its Unix group, so its schema and
/// its rows are input from another user. What a member plants there must not run in another
/// member's process, nor make it allocate without bound: it fails the open or the one item.
final class SQLiteSchemaTamperingTests: XCTestCase {
    private let team = try! AccessGroup(name: "team")

    private func open(_ root: String) throws(KeystoreError) -> SQLiteKeystore {
        try SQLiteKeystore(root: root, service: "tool", accessGroup: team, keySource: testKey())
    }

    func testAPlantedTriggerNeverRunsAndTheNextOpenIsRefused() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try open(temporary.root)
        defer { keystore.close() }
        try await keystore.set(bytes("a"), forKey: "a")
        // A trigger that would refuse every write; one that spins would hang the victim.
        try plainSQLite(keystore.namespace.databasePath, "CREATE TRIGGER planted BEFORE INSERT ON items BEGIN SELECT RAISE(ABORT, 'planted ran'); END")

        // Already open: the statement is prepared again against the new schema, without it.
        try await keystore.set(bytes("b"), forKey: "b")
        let value = try await keystore.value(forKey: "b")
        XCTAssertEqual(string(value), "b")

        assertTamperingRefused(root: temporary.root, what: "trigger")
    }

    func testAViewInPlaceOfTheItemsTableIsNeverReadAndTheNextOpenIsRefused() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try open(temporary.root)
        defer { keystore.close() }
        try await keystore.set(bytes("a"), forKey: "a")
        // A view whose every read would run a query of the member's choosing.
        try plainSQLite(keystore.namespace.databasePath, """
            ALTER TABLE items RENAME TO kept;
            CREATE VIEW items(id, key, version, value) AS SELECT id, key, version, value FROM kept;
            """)
        do {
            _ = try await keystore.value(forKey: "a")
            XCTFail("read through a planted view")
        } catch {
            XCTAssertNotEqual(error.code, .itemNotFound)
        }
        assertTamperingRefused(root: temporary.root, what: "view")
    }

    func testAVirtualTableInPlaceOfTheItemsTableIsRefused() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try open(temporary.root)
        let path = keystore.namespace.databasePath
        keystore.close()
        try plainSQLite(path, """
            ALTER TABLE items RENAME TO kept;
            CREATE VIRTUAL TABLE items USING fts5(id, key, version, value);
            """)
        assertTamperingRefused(root: temporary.root, what: "table")
    }

    /// Opening fails, naming what was planted but not its name (text a member chose), and the
    /// single-read path the CLI uses fails the same way.
    private func assertTamperingRefused(root: String, what: String, file: StaticString = #filePath, line: UInt = #line) {
        do {
            let reopened = try open(root)
            reopened.close()
            XCTFail("opened a database with a planted \(what)", file: file, line: line)
        } catch {
            XCTAssertEqual(error.code, .corruptFormat, file: file, line: line)
            XCTAssertTrue(error.reason.contains("this keystore does not make: someone who can write it changed its schema"), error.reason, file: file, line: line)
            XCTAssertFalse(error.reason.contains("planted") || error.reason.contains("kept"), error.reason, file: file, line: line)
        }
        do {
            let reader = try SQLiteKeystore.SingleReader.open(root: root, service: "tool", accessGroup: team, keySource: testKey())
            reader?.close()
            if reader != nil { XCTFail("the single reader opened a database with a planted \(what)", file: file, line: line) }
        } catch {
            XCTAssertEqual(error.code, .corruptFormat, file: file, line: line)
        }
    }

    /// A member stores a value of several megabytes under a key the victim reads: that read
    /// fails as a damaged item, without the victim copying the value, and every other item
    /// still reads.
    func testAnOversizedStoredValueFailsOnlyItsOwnItem() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try open(temporary.root)
        defer { keystore.close() }
        try await keystore.set(bytes("a"), forKey: "a")
        try plainSQLite(keystore.namespace.databasePath, "INSERT INTO items(key, version, value) VALUES('big', NULL, zeroblob(8388608))")
        do {
            _ = try await keystore.value(forKey: "big")
            XCTFail("read an 8 MiB value")
        } catch {
            XCTAssertEqual(error.code, .corruptFormat)
            XCTAssertTrue(error.reason.contains("limit of \(SQLiteConnection.maximumLength) bytes"), error.reason)
        }
        let other = try await keystore.value(forKey: "a")
        XCTAssertEqual(string(other), "a")
        // Writing one is refused as well, before anything is stored.
        do {
            try await keystore.set([UInt8](repeating: 1, count: SQLiteConnection.maximumLength + 1), forKey: "c")
            XCTFail("stored a value over the limit")
        } catch {
            XCTAssertEqual(error.code, .corruptFormat)
        }
        let missing = try await keystore.value(forKey: "c")
        XCTAssertNil(missing)
    }
}
