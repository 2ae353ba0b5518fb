import BrokerTestSupport
import Foundation
import InMemoryLogging
import Logging
import XCTest
@testable import SecureStorage

/// A shared group's database is writable by every member of its Unix group, so its schema and
/// its rows are input from another user. What a member plants there must not run in another
/// member's process, nor make it allocate without bound: it fails the open or the one item.
final class SQLiteSchemaTamperingTests: XCTestCase {
    private let team = AccessGroup(name: "team")

    private func open(_ root: String) throws(KeystoreError) -> SQLiteKeystore {
        try SQLiteKeystore(root: root, service: "tool", accessGroup: team, keySource: testKey())
    }

    /// A keystore of the shared group under a new root, holding item "a" (the root lives as
    /// long as the returned value).
    private func openHoldingAnItem() async throws -> (TemporaryRoot, SQLiteKeystore) {
        let temporary = try TemporaryRoot()
        let keystore = try open(temporary.root)
        try await keystore.set(bytes("a"), forKey: "a")
        return (temporary, keystore)
    }

    func testAPlantedTriggerNeverRunsAndTheNextOpenIsRefused() async throws {
        let (temporary, keystore) = try await openHoldingAnItem()
        defer { withExtendedLifetime(temporary) { keystore.close() } }
        // A trigger that would refuse every write; one that spins would hang the victim.
        try plainSQLite(keystore.namespace.databasePath, "CREATE TRIGGER planted BEFORE INSERT ON items BEGIN SELECT RAISE(ABORT, 'planted ran'); END")

        // Already open: SQLite compiles the write again for the new schema; that is refused
        // and the schema checked, so the write fails without running the trigger.
        await assertRefused(what: "trigger") { try await keystore.set(bytes("b"), forKey: "b") }
        assertTamperingRefused(root: temporary.root, what: "trigger")
    }

    func testAViewInPlaceOfTheItemsTableIsNeverReadAndTheNextOpenIsRefused() async throws {
        let (temporary, keystore) = try await openHoldingAnItem()
        defer { withExtendedLifetime(temporary) { keystore.close() } }
        // A view whose every read would run a query of the member's choosing.
        try plainSQLite(keystore.namespace.databasePath, """
            DROP TABLE items;
            CREATE VIEW items(id, key, version, value) AS SELECT 1, name, NULL, value FROM meta;
            """)
        await assertRefused(what: "view") { _ = try await keystore.value(forKey: "a") }
        assertTamperingRefused(root: temporary.root, what: "view")
    }

    /// SQLite's messages quote names from the schema, which a member writes: a planted name
    /// with a terminal escape, a line break and a right-to-left override reaches the error
    /// escaped (an attack review found it verbatim: a member could recolour another's
    /// terminal, or forge a line of its log).
    func testPlantedNamesQuotedInSQLiteMessagesAreEscaped() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try open(temporary.root)
        let path = keystore.namespace.databasePath
        keystore.close()
        try plainSQLite(path, """
            PRAGMA writable_schema=ON;
            INSERT INTO sqlite_master VALUES('table', 'x' || char(27) || '[31mEVIL' || char(10) || 'keystore opened OK' || char(8238), 'x', 0, 'not sql');
            """)
        do {
            _ = try open(temporary.root)
            XCTFail("a malformed schema opened")
        } catch {
            XCTAssertFalse(error.description.unicodeScalars.contains(where: \.isControlOrBidirectionalFormat), error.description)
            XCTAssertTrue(error.reason.contains("x\\u{1B}[31mEVIL\\u{A}keystore opened OK\\u{202E}"), error.reason)
        }
    }

    /// A member (or an operator restoring a copy) renames another database over the group's
    /// while a keystore has it open. Its commits went on into the file it had open, which
    /// nobody opens again, while every new connection read the one now in place: writes
    /// acknowledged and lost, and SQLite only logged it. They fail instead, saying so.
    func testCommitsToADatabaseReplacedWhileOpenFailInsteadOfGoingToTheOldFile() async throws {
        let (temporary, keystore) = try await openHoldingAnItem()
        defer { withExtendedLifetime(temporary) { keystore.close() } }
        try replaceDatabase(of: keystore)
        await assertFailsForTheReplacedDatabase("a commit") { try await keystore.set(bytes("b"), forKey: "b") }
    }

    func testAVirtualTableInPlaceOfTheItemsTableIsRefused() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try open(temporary.root)
        let path = keystore.namespace.databasePath
        keystore.close()
        try plainSQLite(path, "DROP TABLE items; CREATE VIRTUAL TABLE items USING fts5(id, key, version, value);")
        assertTamperingRefused(root: temporary.root, what: "table")
    }

    /// A table of the right name whose definition runs an expression: a CHECK constraint on a
    /// write, a generated column on a read (built-in functions can take hours on a 1 MiB
    /// string). Here the expressions are harmless but visible: had one run, the write would
    /// fail on the constraint and the read return altered bytes, not a refusal.
    func testATableRedefinedWithExpressionsIsRefusedBeforeAnyRuns() async throws {
        let columns = "id, key, version"
        for (table, definition, copy) in [
            ("items", "CREATE TABLE items(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, version INTEGER, value BLOB NOT NULL CHECK (key <> 'b'))",
             "INSERT INTO items(\(columns), value) SELECT \(columns), value FROM kept"),
            ("items", "CREATE TABLE items(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, version INTEGER, stored BLOB NOT NULL, value BLOB AS (stored || x'00'))",
             "INSERT INTO items(\(columns), stored) SELECT \(columns), value FROM kept"),
            ("meta", "CREATE TABLE meta(name TEXT PRIMARY KEY, stored TEXT NOT NULL, value TEXT AS (stored || ''))",
             "INSERT INTO meta(name, stored) SELECT name, value FROM kept"),
        ] {
            let (temporary, keystore) = try await openHoldingAnItem()
            defer { withExtendedLifetime(temporary) { keystore.close() } }
            try plainSQLite(keystore.namespace.databasePath, "ALTER TABLE \(table) RENAME TO kept; \(definition); \(copy); DROP TABLE kept;")

            await assertRefused(what: "table") { try await keystore.set(bytes("b"), forKey: "b") }
            await assertRefused(what: "table") { _ = try await keystore.value(forKey: "a") }
            assertTamperingRefused(root: temporary.root, what: "table")
        }
    }

    private static let cleanItems = "CREATE TABLE items(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, version INTEGER, value BLOB NOT NULL)"
    private static let itemsWithCheck =
        "CREATE TABLE items(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, version INTEGER, value BLOB NOT NULL CHECK (key <> 'b'))"

    /// SQL that gives `items` the stored definition `sql` in place (the table's data stays)
    /// and pins `schema_version` to 1000, as a member with `writable_schema` can.
    private static func redefineItems(as sql: String) -> String {
        """
        PRAGMA writable_schema = ON;
        UPDATE sqlite_master SET sql = '\(sql.replacingOccurrences(of: "'", with: "''"))' WHERE name = 'items';
        PRAGMA schema_version = 1000;
        """
    }

    /// A member can set `schema_version`, so it does not identify a schema: they plant a CHECK
    /// (which the victim's connection loads, and refuses), then put the clean definition back
    /// under the same version. SQLite would not load the schema again; a check of the rows
    /// would pass while statements compiled against the CHECK. The connection starts over
    /// instead, so what it compiles against is what it checked.
    func testASchemaVersionPinnedByAMemberDoesNotHideADefinitionAlreadyLoaded() async throws {
        let (temporary, keystore) = try await openHoldingAnItem()
        defer { withExtendedLifetime(temporary) { keystore.close() } }
        let path = keystore.namespace.databasePath
        try plainSQLite(path, Self.redefineItems(as: Self.itemsWithCheck))
        await assertRefused(what: "table") { try await keystore.set(bytes("b"), forKey: "b") }

        try plainSQLite(path, Self.redefineItems(as: Self.cleanItems))
        // The schema is clean again: the write runs, and the CHECK loaded before does not.
        try await keystore.set(bytes("b"), forKey: "b")
        let value = try await keystore.value(forKey: "b")
        XCTAssertEqual(string(value), "b")
    }

    /// The same, with the member holding the write lock while the victim starts over: the
    /// victim's new connection must check the schema it loads before anything else loads it
    /// (a setting such as `PRAGMA synchronous` does), or it would hold the planted definition
    /// and check the clean one the member commits meanwhile under the same version.
    func testAStartedOverConnectionChecksTheSchemaItLoadsFirst() async throws {
        let (temporary, keystore) = try await openHoldingAnItem()
        defer { withExtendedLifetime(temporary) { keystore.close() } }
        let path = keystore.namespace.databasePath
        try plainSQLite(path, Self.redefineItems(as: Self.itemsWithCheck))
        await assertRefused(what: "table") { try await keystore.set(bytes("b"), forKey: "b") }

        let member = try PlainSQLiteConnection(path)
        try member.run("BEGIN IMMEDIATE; " + Self.redefineItems(as: Self.cleanItems))
        let write = Task { () -> KeystoreError? in
            do {
                try await keystore.set(bytes("b"), forKey: "b")
                return nil
            } catch {
                return error as? KeystoreError ?? KeystoreError(.io, "\(error)")
            }
        }
        try await Task.sleep(for: .milliseconds(300))
        try member.run("COMMIT")
        let error = await write.value
        // Refused (the planted definition was still committed when the victim looked) or
        // written (once the clean one was): never failing inside the planted CHECK.
        if let error {
            XCTAssertTrue(error.reason.contains("this keystore does not make"), error.reason)
        }
    }

    /// SQLite reads `sqlite_stat1` as it loads a schema, before any check can look at it, and
    /// evaluates a generated column there. With no function arguments allowed outside the
    /// keystore's own compiles, the planted expression fails to parse instead of running.
    func testAPlantedStatisticsTableRunsNothingWhileTheSchemaLoads() async throws {
        let (temporary, keystore) = try await openHoldingAnItem()
        let path = keystore.namespace.databasePath
        keystore.close()
        let planted = "CREATE TABLE sqlite_stat1(tbl, idx, st, stat AS (printf('%.9c', 'x')))"
        try plainSQLite(path, """
            ANALYZE;
            PRAGMA writable_schema = ON;
            UPDATE sqlite_master SET sql = '\(planted.replacingOccurrences(of: "'", with: "''"))' WHERE name = 'sqlite_stat1';
            PRAGMA schema_version = 2000;
            """)
        // Had the expression run, the load would succeed and the check refuse the table.
        do {
            try open(temporary.root).close()
            XCTFail("opened a database with a planted statistics table")
        } catch {
            XCTAssertEqual(error.code, .corruptFormat, error.reason)
            XCTAssertTrue(error.reason.contains("malformed database schema"), error.reason)
        }
    }

    /// A write refused for a planted schema ends its transaction: the writer does not keep the
    /// database's write lock, other members can write, and once the schema is clean again
    /// the keystore writes again.
    func testARefusedWriteReleasesTheWriteLockAndTheKeystoreRecovers() async throws {
        let (temporary, keystore) = try await openHoldingAnItem()
        defer { withExtendedLifetime(temporary) { keystore.close() } }
        let path = keystore.namespace.databasePath
        try plainSQLite(path, "CREATE TRIGGER planted BEFORE INSERT ON items BEGIN SELECT RAISE(ABORT, 'planted ran'); END")
        await assertRefused(what: "trigger") { try await keystore.set(bytes("b"), forKey: "b") }
        await assertRefused(what: "trigger") { try await keystore.set(bytes("c"), forKey: "c") }

        // Another connection takes the write lock at once, then removes the trigger.
        try plainSQLite(path, "PRAGMA busy_timeout = 0; BEGIN IMMEDIATE; DROP TRIGGER planted; COMMIT;")
        try await keystore.set(bytes("d"), forKey: "d")
        let keys = try await keystore.keys()
        XCTAssertEqual(keys.sorted(), ["a", "d"])
    }

    /// An operation of an open keystore after the schema changed under it: refused as
    /// tampering, not failing inside what was planted.
    private func assertRefused(what: String, file: StaticString = #filePath, line: UInt = #line, _ body: () async throws -> Void) async {
        do {
            try await body()
            XCTFail("ran against a planted \(what)", file: file, line: line)
        } catch {
            guard let error = error as? KeystoreError else { return XCTFail("\(error)", file: file, line: line) }
            XCTAssertEqual(error.code, .corruptFormat, error.reason, file: file, line: line)
            XCTAssertTrue(error.reason.contains("holds a \(what) this keystore does not make"), error.reason, file: file, line: line)
        }
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
            XCTAssertTrue(error.reason.contains("holds a \(what) this keystore does not make"), error.reason, file: file, line: line)
            XCTAssertFalse(error.reason.contains("planted") || error.reason.contains("kept"), error.reason, file: file, line: line)
        }
        do {
            let reader = try SQLiteKeystore.SingleReader.open(root: root, service: "tool", accessGroup: team, keySource: testKey())
            reader?.close()
            if reader != nil { XCTFail("the single reader opened a database with a planted \(what)", file: file, line: line) }
        } catch {
            XCTAssertEqual(error.code, .corruptFormat, file: file, line: line)
            XCTAssertTrue(error.reason.contains("holds a \(what) this keystore does not make"), error.reason, file: file, line: line)
        }
    }

    /// A member stores an item whose key is over the length limit: listing the keys (the
    /// CLI's `status`, a client's session list) leaves that row out, with a warning, instead of
    /// failing for everyone in the group; every other item still reads.
    func testAnOversizedPlantedKeyIsLeftOutOfTheListing() async throws {
        let temporary = try TemporaryRoot()
        let logs = InMemoryLogHandler()
        let keystore = try SQLiteKeystore(
            root: temporary.root, service: "tool", accessGroup: team, keySource: testKey(), logger: Logger(label: "listing", factory: { _ in logs }))
        defer { keystore.close() }
        try await keystore.set(Array("a".utf8), forKey: "a")
        try await keystore.set(Array("b".utf8), forKey: "b")
        try plainSQLite(
            keystore.namespace.databasePath,
            "INSERT INTO items(key, version, value) VALUES(CAST(zeroblob(2097152) AS TEXT) || 'x', NULL, x'00')")
        // And keys within the length limit but over the key limit: no item can have them, and
        // thousands would fill the listing with gigabytes.
        try plainSQLite(
            keystore.namespace.databasePath,
            "INSERT INTO items(key, version, value) VALUES(printf('%100000s', 'y'), NULL, x'00'), (printf('%181s', 'z'), NULL, x'00')")
        let keys = try await keystore.keys()
        XCTAssertEqual(keys, ["a", "b"])
        let warnings = logs.entries.filter { $0.level == .warning && $0.message.description.contains("keys left out of the listing") }
        XCTAssertEqual(warnings.count, 1, "a warning says so: \(logs.entries.map(\.message))")
        let a = try await keystore.value(forKey: "a")
        XCTAssertEqual(string(a), "a")

        // The row-by-row listing finds the row IDs in the table itself: the covering index on
        // `key` SQLite would otherwise pick loads every key (a planted gigabyte included) to
        // reach the ID at its end.
        var plan: [String] = []
        try tamper(keystore.namespace.databasePath) { connection throws(KeystoreError) in
            plan = try connection.withStatement("EXPLAIN QUERY PLAN " + StoreSchema.selectItemIds) { statement throws(KeystoreError) -> [String] in
                var details: [String] = []
                while try statement.step() { details.append(statement.text(3)) }
                return details
            }
        }
        XCTAssertEqual(plan, ["SEARCH items USING INTEGER PRIMARY KEY (rowid>?)"], "the row IDs are read through the index on key")
    }

    /// A member stores a value of several megabytes under a key the victim reads: that read
    /// fails as a damaged item, without the victim copying the value, and every other item
    /// still reads.
    func testAnOversizedStoredValueFailsOnlyItsOwnItem() async throws {
        let (temporary, keystore) = try await openHoldingAnItem()
        defer { withExtendedLifetime(temporary) { keystore.close() } }
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
            XCTAssertEqual(error.code, .valueTooLarge)
        }
        let missing = try await keystore.value(forKey: "c")
        XCTAssertNil(missing)
    }
}
