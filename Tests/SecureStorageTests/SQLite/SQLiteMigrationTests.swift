import BrokerTestSupport
import Foundation
import InMemoryLogging
import Logging
import XCTest
@testable import SecureStorage

final class SQLiteMigrationTests: XCTestCase {
    private let team = AccessGroup(name: "team")

    /// The items of `group`'s database, read without opening a keystore (so without recording a
    /// last group or migrating anything): 0 when the database does not exist.
    private func itemCount(_ root: String, _ group: AccessGroup) throws -> Int {
        let path = try StoreLayout(root: root, service: "tool").databasePath(group)
        guard FileManager.default.fileExists(atPath: path) else { return 0 }
        return try rowCount(path, table: "items")
    }

    /// The service's last access group as recorded in the user's private database.
    private func lastGroup(_ root: String) throws -> String? {
        var recorded: String?
        try tamper(try StoreLayout(root: root, service: "tool").databasePath(.none)) { connection throws(KeystoreError) in
            recorded = try StoreSchema.meta(SQLiteKeystore.lastGroupName, on: connection)
        }
        return recorded
    }

    /// A refused migration left everything as it was: the source holds `sourceItems` rows and
    /// the ones in `readable` open with `key`, the target holds nothing, and the recorded last
    /// group did not change.
    private func assertNothingMoved(
        _ root: String, sourceItems: Int, readable: Range<Int>, key: KeySource, lastGroup expected: String?,
        file: StaticString = #filePath, line: UInt = #line
    ) async throws {
        XCTAssertEqual(try itemCount(root, team), 0, "the target holds items", file: file, line: line)
        XCTAssertEqual(try itemCount(root, .none), sourceItems, "source items were removed", file: file, line: line)
        XCTAssertEqual(try lastGroup(root), expected, "the last group moved", file: file, line: line)
        let source = try SQLiteKeystore(root: root, service: "tool", keySource: key)
        defer { source.close() }
        for index in readable {
            let value = try await source.value(forKey: "k\(index)")
            XCTAssertEqual(string(value), "value-\(index)", file: file, line: line)
        }
    }

    func testAWrongKeyIsRefusedByTheSourceKeyCheckAndMovesNothing() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: .none, count: 5, keySource: testKey(1))
        let recorded = try lastGroup(root)
        XCTAssertEqual(recorded, "none")

        let error = await assertThrows(KeystoreError.self, code: .invalidKey) {
            try await SQLiteKeystore.migrate(root: root, service: "tool", from: .none, to: self.team, keySource: testKey(2))
        }
        XCTAssertTrue(error?.reason.contains("key check") ?? false, error?.reason ?? "")
        XCTAssertFalse(FileManager.default.fileExists(atPath: try StoreLayout(root: root, service: "tool").namespaceDirectory(team)),
                       "the target was created before the source was checked")
        try await assertNothingMoved(root, sourceItems: 5, readable: 0..<5, key: testKey(1), lastGroup: recorded)

        // Moving on open from the private group refuses the same way, and the open fails (only
        // the user writes there: this is their wrong key, not someone's spoiled check).
        let onOpen = assertThrows(KeystoreError.self, code: .invalidKey) {
            try SQLiteKeystore(root: root, service: "tool", accessGroup: team, keySource: testKey(2), configuration: .init(moveItemsFromPreviousGroup: true))
        }
        XCTAssertTrue(onOpen?.reason.contains("key check") ?? false, onOpen?.reason ?? "")
        try await assertNothingMoved(root, sourceItems: 5, readable: 0..<5, key: testKey(1), lastGroup: recorded)

        // The right key moves everything.
        let moved = try await SQLiteKeystore.migrate(root: root, service: "tool", from: .none, to: team, keySource: testKey(1))
        XCTAssertEqual(moved, 5)
        XCTAssertEqual(try itemCount(root, .none), 0)
        let target = try await contents(root, group: team, keySource: testKey(1))
        XCTAssertEqual(target.count, 5)
        XCTAssertEqual(target["k4"], "value-4")
    }

    func testATamperedSourceItemStopsMigrationUntilRemoved() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: .none, count: 3)
        let path = try StoreLayout(root: root, service: "tool").databasePath(.none)
        var tampered: [UInt8] = []
        try tamper(path) { connection throws(KeystoreError) in
            tampered = try sealedValue(connection, key: "k2")!
            tampered[20] ^= 1
            try storeSealed(connection, key: "k2", value: tampered)
        }
        let error = await assertThrows(KeystoreError.self, code: .authenticationFailed) {
            try await SQLiteKeystore.migrate(root: root, service: "tool", from: .none, to: self.team)
        }
        XCTAssertTrue(error?.reason.contains("1 of 3 items") ?? false, error?.reason ?? "")
        XCTAssertTrue(error?.reason.contains("k2") ?? false, "the first failing item is named: \(error?.reason ?? "")")
        XCTAssertEqual(error?.path, path)
        try await assertNothingMoved(root, sourceItems: 3, readable: 0..<2, key: .keyFile, lastGroup: "none")
        var stored: [UInt8]?
        try tamper(path) { connection throws(KeystoreError) in stored = try sealedValue(connection, key: "k2") }
        XCTAssertEqual(stored, tampered, "the damaged row is left as it was")

        // Removing the damaged item (removal never opens it) lets the rest move.
        let source = try SQLiteKeystore(root: root, service: "tool")
        try await source.remove(forKey: "k2")
        source.close()
        let moved = try await SQLiteKeystore.migrate(root: root, service: "tool", from: .none, to: team)
        XCTAssertEqual(moved, 2)
        XCTAssertEqual(try itemCount(root, team), 2)
        XCTAssertEqual(try itemCount(root, .none), 0)
    }

    func testCorruptSourceItemsStopMigrationWithCorruptFormat() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: .none, count: 4)
        try tamper(try StoreLayout(root: root, service: "tool").databasePath(.none)) { connection throws(KeystoreError) in
            for key in ["k2", "k3"] { try storeSealed(connection, key: key, value: [1, 2, 3]) }
        }
        let error = await assertThrows(KeystoreError.self, code: .corruptFormat) {
            try await SQLiteKeystore.migrate(root: root, service: "tool", from: .none, to: self.team)
        }
        XCTAssertTrue(error?.reason.contains("2 of 4 items") ?? false, error?.reason ?? "")
        try await assertNothingMoved(root, sourceItems: 4, readable: 0..<2, key: .keyFile, lastGroup: "none")
    }

    func testMigrationReplacesTargetItemsAndKeepsOthers() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        let old = try SQLiteKeystore(root: root, service: "tool", accessGroup: team)
        try await old.set(bytes("stale"), forKey: "k0")
        try await old.set(bytes("kept"), forKey: "only-in-target")
        old.close()
        let source = try SQLiteKeystore(root: root, service: "tool")
        for index in 0..<3 { try await source.set(bytes("value-\(index)"), forKey: "k\(index)") }
        source.close()
        let moved = try await SQLiteKeystore.migrate(root: root, service: "tool", from: .none, to: team)
        XCTAssertEqual(moved, 3)
        let target = try await contents(root, group: team)
        XCTAssertEqual(target, ["k0": "value-0", "k1": "value-1", "k2": "value-2", "only-in-target": "kept"])
    }

    /// Two groups whose names `String` takes for one ("é" precomposed and decomposed) are two
    /// directories: a migration between them moves the items, and opening one after the
    /// other records it as the last group.
    func testAMigrationBetweenCanonicallyEquivalentGroupNamesMoves() async throws {
        let temporary = try TemporaryRoot()
        let composed = AccessGroup(name: "caf\u{E9}"), decomposed = AccessGroup(name: "cafe\u{301}")
        let source = try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: composed)
        try await source.set(bytes("value"), forKey: "k")
        source.close()
        let moved = try await SQLiteKeystore.migrate(root: temporary.root, service: "tool", from: composed, to: decomposed)
        XCTAssertEqual(moved, 1)
        let target = try await contents(temporary.root, group: decomposed)
        XCTAssertEqual(target, ["k": "value"])
        let left = try await contents(temporary.root, group: composed)
        XCTAssertEqual(left, [:])
    }

    func testMigrationWithPassphraseKeys() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        let key = KeySource.passphrase("pass")
        try await fill(root, group: .none, count: 4, keySource: key)
        let moved = try await SQLiteKeystore.migrate(root: root, service: "tool", from: .none, to: team, keySource: key)
        XCTAssertEqual(moved, 4)
        let layout = try StoreLayout(root: root, service: "tool")
        XCTAssertEqual(mode(of: layout.saltPath(team)), 0o640, "the target got its own salt")
        let target = try await contents(root, group: team, keySource: key)
        XCTAssertEqual(target["k3"], "value-3")
        let again = try await SQLiteKeystore.migrate(root: root, service: "tool", from: .none, to: team, keySource: key)
        XCTAssertEqual(again, 0)
    }

    func testTenThousandItemsMigrate() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: .none, count: 10_000, keySource: testKey())
        let clock = ContinuousClock()
        let start = clock.now
        let moved = try await SQLiteKeystore.migrate(root: root, service: "tool", from: .none, to: team, keySource: testKey())
        print("migrated 10,000 items in \(clock.now - start)")
        XCTAssertEqual(moved, 10_000)
        XCTAssertEqual(try itemCount(root, .none), 0)
        let target = try SQLiteKeystore(root: root, service: "tool", accessGroup: team, keySource: testKey())
        defer { target.close() }
        let keys = try await target.keys()
        XCTAssertEqual(keys.count, 10_000)
        let last = try await target.value(forKey: "k9999")
        XCTAssertEqual(string(last), "value-9999")
    }

    func testSameGroupOrAMissingSourceMovesNothing() async throws {
        let temporary = try TemporaryRoot()
        try await fill(temporary.root, group: team, count: 2)
        let same = try await SQLiteKeystore.migrate(root: temporary.root, service: "tool", from: AccessGroup(name: "team"), to: team)
        XCTAssertEqual(same, 0)
        XCTAssertEqual(try itemCount(temporary.root, team), 2)
    }

    func testMigrationMovesItemsAndIsIdempotent() async throws {
        let temporary = try TemporaryRoot()
        try await fill(temporary.root, group: .none, count: 6)
        let moved = try await SQLiteKeystore.migrate(root: temporary.root, service: "tool", from: .none, to: team)
        XCTAssertEqual(moved, 6)
        let target = try await contents(temporary.root, group: team)
        XCTAssertEqual(target.count, 6)
        XCTAssertEqual(target["k3"], "value-3")
        let source = try await contents(temporary.root, group: .none)
        XCTAssertTrue(source.isEmpty)
        let again = try await SQLiteKeystore.migrate(root: temporary.root, service: "tool", from: .none, to: team)
        XCTAssertEqual(again, 0)
        let missing = try await SQLiteKeystore.migrate(root: temporary.root, service: "tool", from: AccessGroup(name: "never"), to: team)
        XCTAssertEqual(missing, 0)
    }

    func testTheTargetHoldsEverythingBeforeTheSourceIsTouched() async throws {
        let temporary = try TemporaryRoot()
        try await fill(temporary.root, group: .none, count: 5)
        // Between the two transactions (where a crash leaves both copies; the kill -9 test in
        // SQLiteMultiProcessTests reruns from there) the target already holds every item.
        let copiedState = LockedBox<Int?>(nil)
        let root = temporary.root
        _ = try await SQLiteKeystore._migrate(root: root, service: "tool", from: .none, to: team) { name in
            if name == "copied" {
                // Both copies exist at this point: the target holds everything already.
                let layout = try? StoreLayout(root: root, service: "tool")
                if let path = layout?.databasePath(AccessGroup(name: "team")), let connection = try? SQLiteConnection(path: path, busyTimeout: .seconds(5)) {
                    let count = (try? connection.withStatement("SELECT count(*) FROM items") { statement throws(KeystoreError) -> Int in
                        _ = try statement.step()
                        return Int(statement.int64(0))
                    }) ?? -1
                    copiedState.withLock { $0 = count }
                    connection.close()
                }
            }
        }
        XCTAssertEqual(copiedState.current, 5)
    }

    /// Items never move into a namespace whose key check the key does not open: the source
    /// key opening every source item is not enough (a group sealed with another key than the
    /// private namespace), nor is a move on open.
    func testATargetWithAnotherKeyReceivesNothing() async throws {
        let temporary = try TemporaryRoot()
        try await fill(temporary.root, group: .none, count: 2, keySource: testKey(1))
        try await fill(temporary.root, group: team, count: 3, keySource: testKey(2))
        let error = await assertThrows(KeystoreError.self, code: .invalidKey) {
            try await SQLiteKeystore.migrate(root: temporary.root, service: "tool", from: self.team, to: .none, keySource: testKey(2))
        }
        XCTAssertTrue(error?.reason.contains("key check") ?? false, error?.reason ?? "")
        let onOpen = assertThrows(KeystoreError.self, code: .invalidKey) {
            try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(2), configuration: .init(moveItemsFromPreviousGroup: true))
        }
        XCTAssertNotNil(onOpen)
        let source = try await contents(temporary.root, group: team, keySource: testKey(2))
        XCTAssertEqual(source.count, 3, "the source keeps every item")
        let target = try await contents(temporary.root, group: .none, keySource: testKey(1))
        XCTAssertEqual(target.count, 2, "the target holds only its own items, all readable")
    }

    func testWrongKeyMovesNothing() async throws {
        let temporary = try TemporaryRoot()
        try await fill(temporary.root, group: .none, count: 4, keySource: testKey(1))
        // One item sealed with another key (planted in the file: a process with that key is
        // refused at open): the whole migration must refuse.
        let source = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(1))
        try source.replaceStoredRow(sealing: bytes("stray"), withKey: [UInt8](repeating: 2, count: 32), forKey: "stray")
        source.close()
        let error = await assertThrows(KeystoreError.self, code: .authenticationFailed) {
            try await SQLiteKeystore.migrate(root: temporary.root, service: "tool", from: .none, to: self.team, keySource: testKey(1))
        }
        XCTAssertTrue(error?.reason.contains("1 of 5") ?? false, error?.reason ?? "")
        let target = try await contents(temporary.root, group: team, keySource: testKey(1))
        XCTAssertTrue(target.isEmpty)
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(1))
        defer { keystore.close() }
        let keys = try await keystore.keys()
        XCTAssertEqual(keys.count, 5)
    }

    /// A writer that rewrites an item of the source while the migration runs waits for it
    /// (the migration holds the source's write lock from its read to its deletion) and lands
    /// after it: nothing is lost, and the order is one a serial run would give.
    func testAConcurrentRewriteWaitsAndIsNotLost() async throws {
        let temporary = try TemporaryRoot()
        try await fill(temporary.root, group: .none, count: 3, keySource: testKey())
        let root = temporary.root
        let rewritten = LockedBox<Task<Void, any Error>?>(nil)
        let writing = LockedBox(false)
        // Opened before the migration (an open records the group, which waits for the lock).
        let writer = try SQLiteKeystore(root: root, service: "tool", keySource: testKey())
        defer { writer.close() }
        let moved = try await SQLiteKeystore._migrate(root: root, service: "tool", from: .none, to: team, keySource: testKey()) { name in
            guard name == "copied" else { return }
            // Another writer rewrites k1 in the source between the copy and the delete.
            rewritten.withLock {
                $0 = Task.detached {
                    writing.withLock { $0 = true }
                    try await writer.set(bytes("rewritten"), forKey: "k1")
                }
            }
            // Held until the writer is committing, so that its commit meets the lock (one
            // slower to start would write after the move, and the result alone could not tell).
            let deadline = ContinuousClock.now.advanced(by: .seconds(30))
            while !writing.current && ContinuousClock.now < deadline { usleep(5_000) }
            usleep(200_000)
        }
        XCTAssertTrue(writing.current, "the writer never got to its commit while the migration held the lock")
        try await XCTUnwrap(rewritten.current).value
        XCTAssertEqual(moved, 3)
        let source = try await contents(root, group: .none, keySource: testKey())
        XCTAssertEqual(source, ["k1": "rewritten"], "the rewrite came after the move")
        let target = try await contents(root, group: team, keySource: testKey())
        XCTAssertEqual(target.count, 3)
    }

    /// Two migrations of one source at once: the second waits for the first's source lock
    /// (here past its busy timeout), so it can never copy an item the first one moved and
    /// the user then cleared in the target.
    func testASecondMigrationOfTheSameSourceWaitsForTheFirst() async throws {
        let temporary = try TemporaryRoot()
        try await fill(temporary.root, group: .none, count: 3, keySource: testKey())
        let root = temporary.root
        let team = self.team
        let inner = LockedBox<Result<Int, KeystoreError>?>(nil)
        let moved = try await SQLiteKeystore._migrate(root: root, service: "tool", from: .none, to: team, keySource: testKey()) { name in
            guard name == "copied" else { return }
            let done = DispatchSemaphore(value: 0)
            Task.detached {
                let result: Result<Int, KeystoreError>
                do throws(KeystoreError) {
                    result = .success(try await SQLiteKeystore.migrate(
                        root: root, service: "tool", from: .none, to: team, keySource: testKey(),
                        configuration: .init(busyTimeout: .milliseconds(200))))
                } catch {
                    result = .failure(error)
                }
                inner.withLock { $0 = result }
                done.signal()
            }
            done.wait()
        }
        XCTAssertEqual(moved, 3)
        guard case .failure(let error) = try XCTUnwrap(inner.current) else { return XCTFail("the second migration ran inside the first") }
        XCTAssertEqual(error.code, .storeUnavailable)
        let source = try await contents(root, group: .none, keySource: testKey())
        XCTAssertTrue(source.isEmpty)
    }

    func testOpeningMovesFromThePreviousGroupOnlyWhenAsked() async throws {
        let temporary = try TemporaryRoot()
        try await fill(temporary.root, group: .none, count: 3)
        // Off: the new group starts empty and the old items stay.
        let empty = try await contents(temporary.root, group: team)
        XCTAssertTrue(empty.isEmpty)
        let stayed = try await contents(temporary.root, group: .none)
        XCTAssertEqual(stayed.count, 3)
        // Last group is now none again (the read above reopened it); on: team receives them.
        let moving = try SQLiteKeystore(
            root: temporary.root, service: "tool", accessGroup: team,
            configuration: .init(moveItemsFromPreviousGroup: true)
        )
        let keys = try await moving.keys()
        moving.close()
        XCTAssertEqual(keys, ["k0", "k1", "k2"])
        let left = try await contents(temporary.root, group: .none)
        XCTAssertTrue(left.isEmpty)
    }

    /// A damaged item in the previous group must not keep the keystore from opening with
    /// moves on: it stays there (with a warning), the rest moves, and the new group is
    /// recorded. A newer target copy that does not open keeps its source item too.
    func testADamagedItemStaysBehindWhenMovingOnOpen() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: .none, count: 4, keySource: testKey())
        let path = try StoreLayout(root: root, service: "tool").databasePath(.none)
        try tamper(path) { connection throws(KeystoreError) in
            var damaged = try sealedValue(connection, key: "k1")!
            damaged[20] ^= 1
            try storeSealed(connection, key: "k1", value: damaged)
        }
        // A value over the length limit: read as a damaged item, not a failed scan.
        try plainSQLite(path, "INSERT INTO items(key, version, value) VALUES('big', NULL, zeroblob(2097152))")
        // A key over the length limit fails the one-statement scan: read row by row, it stays
        // behind as a damaged item too (it made the whole move fail).
        try plainSQLite(path, "INSERT INTO items(key, version, value) VALUES(CAST(zeroblob(2097152) AS TEXT) || 'x', NULL, x'00')")
        // In the target, a newer copy of k2 planted by someone who can write the file.
        let target = try SQLiteKeystore(root: root, service: "tool", accessGroup: team, keySource: testKey())
        try target.replaceStoredRow(sealing: bytes("planted"), withKey: [UInt8](repeating: 9, count: 32), forKey: "k2")
        try tamper(try StoreLayout(root: root, service: "tool").databasePath(team)) { connection throws(KeystoreError) in
            try connection.execute("UPDATE items SET version = 99 WHERE key = 'k2'")
        }
        target.close()
        try SQLiteKeystore(root: root, service: "tool", keySource: testKey()).close()  // the last group is none again

        let logs = InMemoryLogHandler()
        let moving = try SQLiteKeystore(
            root: root, service: "tool", accessGroup: team, keySource: testKey(),
            configuration: .init(moveItemsFromPreviousGroup: true), logger: Logger(label: "moving", factory: { _ in logs }))
        let moved = try await moving.keys()
        moving.close()
        XCTAssertEqual(moved, ["k0", "k2", "k3"])
        let warnings = logs.entries.filter { $0.level == .warning && $0.message.description.contains("stay in the previous access group") }
        XCTAssertEqual(warnings.count, 1, "a warning says so: \(logs.entries.map(\.message))")
        XCTAssertEqual(try lastGroup(root), StoreSchema.encode(team), "recorded anyway: the move runs once, so the old group cannot feed this one later")
        XCTAssertEqual(try itemCount(root, .none), 4, "the damaged k1, the two oversized items and the k2 whose newer target copy does not open stay")
    }

    /// Members of a shared group can write its database: what they do to it (spoil its key
    /// check, say) must not keep a user who moves out of it from opening, and the move is
    /// recorded, so they cannot feed items into the user's new group at later opens.
    func testNothingInASharedOldGroupBlocksTheOpenOrFeedsTheNewGroupLater() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: team, count: 2, keySource: testKey())
        let teamPath = try StoreLayout(root: root, service: "tool").databasePath(team)
        try tamper(teamPath) { connection throws(KeystoreError) in
            try StoreSchema.setMeta(StoreNamespace.keyCheckName, "spoiled", on: connection)
        }
        let logs = InMemoryLogHandler()
        let moving = try SQLiteKeystore(
            root: root, service: "tool", keySource: testKey(),
            configuration: .init(moveItemsFromPreviousGroup: true), logger: Logger(label: "moving", factory: { _ in logs }))
        let keys = try await moving.keys()
        XCTAssertEqual(keys, [], "nothing moved")
        let warned = logs.entries.filter { $0.level == .warning && $0.metadata["broker.error"] == "invalidKey" }
        XCTAssertEqual(warned.count, 1, "\(logs.entries.map(\.message))")
        // Recorded, so later opens move nothing more from the old group: its members cannot
        // feed items into this one.
        XCTAssertEqual(try lastGroup(root), "none", "the private group is recorded")
        moving.close()
    }

    /// A failure on the user's own side of a move on open (here a mistyped key, which opens
    /// neither the private namespace nor the shared old group) fails the open and records
    /// nothing, so the next open with the right key still moves the items: recording it would
    /// leave them behind for good.
    func testAMoveOnOpenThatFailsOnTheUsersOwnSideIsTriedAgain() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: .none, count: 0, keySource: testKey())
        try await fill(root, group: team, count: 2, keySource: testKey())
        XCTAssertEqual(try lastGroup(root), StoreSchema.encode(team))
        let mistyped = assertThrows(KeystoreError.self, code: .invalidKey) {
            try SQLiteKeystore(root: root, service: "tool", keySource: testKey(9), configuration: .init(moveItemsFromPreviousGroup: true))
        }
        XCTAssertNotNil(mistyped)
        XCTAssertEqual(try lastGroup(root), StoreSchema.encode(team), "the failed move was recorded as done")
        let moving = try SQLiteKeystore(root: root, service: "tool", keySource: testKey(), configuration: .init(moveItemsFromPreviousGroup: true))
        let keys = try await moving.keys()
        moving.close()
        XCTAssertEqual(keys, ["k0", "k1"])
        XCTAssertEqual(try itemCount(root, team), 0)
    }

    /// A source database whose key is missing here (a passphrase where a key file made it) is
    /// not an empty source: the migration fails and nothing moves.
    func testASourceWithoutItsKeyIsNotAnEmptySource() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: team, count: 3)
        let error = await assertThrows(KeystoreError.self, code: .invalidKey) {
            try await SQLiteKeystore.migrate(root: root, service: "tool", from: self.team, to: .none, keySource: .passphrase("pw"))
        }
        XCTAssertTrue(error?.reason.contains("no key for it") ?? false, error?.reason ?? "")
        XCTAssertEqual(try itemCount(root, team), 3)
    }

    /// Moving out of the private group (where a failure fails the open), a newer target row
    /// that cannot even be read keeps its source item behind, as one that does not open does;
    /// it does not fail every open.
    func testANewerTargetRowThatCannotBeReadStaysBehindWhenMovingOnOpen() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: team, count: 0, keySource: testKey())
        try await fill(root, group: .none, count: 3, keySource: testKey())
        try plainSQLite(try StoreLayout(root: root, service: "tool").databasePath(team),
                        "INSERT INTO items(key, version, value) VALUES('k1', 99, zeroblob(2097152))")
        let moving = try SQLiteKeystore(
            root: root, service: "tool", accessGroup: team, keySource: testKey(), configuration: .init(moveItemsFromPreviousGroup: true))
        moving.close()
        XCTAssertEqual(try lastGroup(root), StoreSchema.encode(team))
        XCTAssertEqual(try itemCount(root, .none), 1, "k1 stays in the source")
    }

    /// A member of a shared group can plant items there (every member holds its key): a move
    /// on open out of it copies no more than its cap, so that planted gigabytes cannot fill the
    /// user's disk (and fail every open on the user's side). Over the cap nothing moves, the
    /// open goes on with a warning, and `migrate`, which has no cap, moves everything.
    /// The copy reads each source item again inside the target's transaction: a failure there
    /// is the (shared) source's, which a move on open tolerates, not the target's, which would
    /// fail every open of the user's.
    func testAFailureReadingTheSourceAgainDuringTheCopyIsTheSourcesSide() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: team, count: 3)
        var migration = StoreMigration(
            layout: try StoreLayout(root: root, service: "tool"), from: team, to: .none, keySource: .keyFile, busyTimeout: .seconds(1))
        migration.leavingUnreadable = true
        migration.checkpoint = { (stage) throws(KeystoreError) in
            if stage == "rereading" { throw KeystoreError(.storeUnavailable, "the source's database went away") }
        }
        do {
            _ = try migration.runNotingSide()
            XCTFail("the migration went on")
        } catch {
            XCTAssertFalse(error.onTarget, "a failure reading the source was put on the target's side: \(error.error)")
            XCTAssertFalse(error.copied)
            XCTAssertEqual(error.error.code, .storeUnavailable)
        }
        XCTAssertEqual(try itemCount(root, team), 3)
        XCTAssertEqual(try itemCount(root, .none), 0)
    }

    func testAMoveOnOpenOutOfASharedGroupCopiesNoMoreThanItsCap() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: team, count: 2, keySource: testKey())
        let planting = try SQLiteKeystore(root: root, service: "tool", accessGroup: team, keySource: testKey())
        var batch = KeystoreBatch()
        let itemBytes = 720_000
        let planted = StoreMigration.moveOnOpenByteLimit / itemBytes + 1
        for index in 0..<planted { batch.set([UInt8](repeating: UInt8(index & 0xFF), count: itemBytes), forKey: "planted\(index)") }
        try await planting.commit(batch)
        planting.close()

        let logs = InMemoryLogHandler()
        let moving = try SQLiteKeystore(
            root: root, service: "tool", keySource: testKey(),
            configuration: .init(moveItemsFromPreviousGroup: true), logger: Logger(label: "moving", factory: { _ in logs }))
        let keys = try await moving.keys()
        moving.close()
        XCTAssertEqual(keys, [], "nothing moved")
        let warned = logs.entries.filter { $0.level == .warning && $0.metadata["broker.error"] == "migrationFailed" }
        XCTAssertEqual(warned.count, 1, "\(logs.entries.map(\.message))")
        XCTAssertTrue(warned.first?.metadata["broker.errorDescription"]?.description.contains("more than the 64 MiB") ?? false)
        XCTAssertEqual(try lastGroup(root), "none", "the private group is recorded: the open went on")
        XCTAssertEqual(try itemCount(root, team), planted + 2)

        let moved = try await SQLiteKeystore.migrate(root: root, service: "tool", from: team, to: .none, keySource: testKey())
        XCTAssertEqual(moved, planted + 2)
        XCTAssertEqual(try itemCount(root, team), 0)
        let stored = try await contents(root, group: .none, keySource: testKey())
        XCTAssertEqual(stored["k1"], "value-1")
        XCTAssertEqual(stored.count, planted + 2)
    }
}
