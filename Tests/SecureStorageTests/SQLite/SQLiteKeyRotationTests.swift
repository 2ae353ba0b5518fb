import BrokerTestSupport
import Foundation
import XCTest
@testable import SecureStorage

/// `KeySource.alsoOpening` and `SQLiteKeystore.rekey`: a namespace's key replaced without
/// losing an item, with processes on either key reading throughout.
final class SQLiteKeyRotationTests: XCTestCase {
    private let oldKey = testKey(1)
    private let newKey = testKey(2)
    private let team = AccessGroup(name: "team")

    private func rows(_ root: String, group: AccessGroup = .none) throws -> [String: [UInt8]] {
        let path = try StoreLayout(root: root, service: "tool").databasePath(group)
        return Dictionary(uniqueKeysWithValues: try SQLiteKeystore.storedRows(ofDatabase: path).map { ($0.key, $0.sealed) })
    }

    private func rekey(_ root: String, _ keySource: KeySource, group: AccessGroup = .none, batch: Int = 256) async throws -> KeyRotation {
        try await SQLiteKeystore._rekey(root: root, service: "tool", group: group, keySource: keySource, itemsPerTransaction: batch) { _ in }
    }

    /// SQLite takes any 64-bit row ID, `Int64.min` included: an item there is rotated and
    /// migrated like any other (an "after the lowest" bound would leave it out).
    func testAnItemAtTheLowestRowIdIsRotatedAndMigrated() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: team, count: 3, keySource: oldKey)
        try tamper(try StoreLayout(root: root, service: "tool").databasePath(team)) { connection throws(KeystoreError) in
            try connection.execute("UPDATE items SET id = -9223372036854775808 WHERE key = 'k1'")
        }
        let rotation = try await rekey(root, newKey.alsoOpening(oldKey), group: team, batch: 2)
        XCTAssertEqual(rotation.resealed, 3, "\(rotation)")
        let moved = try await SQLiteKeystore.migrate(root: root, service: "tool", from: team, to: .none, keySource: newKey)
        XCTAssertEqual(moved, 3)
        let read = try await contents(root, group: .none, keySource: newKey)
        XCTAssertEqual(read["k1"], "value-1")
        XCTAssertEqual(try rows(root, group: team).count, 0, "nothing left behind")
    }

    func testARotationReSealsEveryItemWithTheNewKeyAndMovesTheKeyCheck() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: .none, count: 600, keySource: oldKey)
        let before = try rows(root)

        // Sealing with the new key before the rotation is refused, saying why.
        let early = assertThrows(KeystoreError.self, code: .invalidKey) {
            try SQLiteKeystore(root: root, service: "tool", keySource: self.newKey.alsoOpening(self.oldKey))
        }
        XCTAssertTrue(early?.reason.contains("rotate it to the sealing key first") ?? false, early?.reason ?? "")
        // Sealing with the old key and opening with the new one is how processes wait for it.
        let waiting = try SQLiteKeystore(root: root, service: "tool", keySource: oldKey.alsoOpening(newKey))
        waiting.close()

        let rotation = try await rekey(root, newKey.alsoOpening(oldKey))
        XCTAssertEqual(rotation.resealed, 600)
        XCTAssertEqual(rotation.alreadySealed, 0)
        XCTAssertTrue(rotation.isComplete)

        let after = try rows(root)
        XCTAssertEqual(Set(after.keys), Set(before.keys))
        for (key, sealed) in after { XCTAssertNotEqual(sealed, before[key], "\(key) kept its old sealing") }
        let read = try await contents(root, group: .none, keySource: newKey)
        XCTAssertEqual(read.count, 600, "the new key alone opens every item")
        XCTAssertEqual(read["k599"], "value-599")
        let version = try StoreLayout(root: root, service: "tool").databasePath(.none)
        var stored: Int64?
        try tamper(version) { connection throws(KeystoreError) in
            stored = try connection.withStatement("SELECT version FROM items WHERE key = 'k42'") { statement throws(KeystoreError) in
                try statement.step() ? statement.int64(0) : nil
            }
        }
        XCTAssertEqual(stored, 42, "versions are kept")

        let late = assertThrows(KeystoreError.self, code: .invalidKey) {
            try SQLiteKeystore(root: root, service: "tool", keySource: self.oldKey)
        }
        XCTAssertTrue(late?.reason.contains("key check") ?? false, late?.reason ?? "")

        let again = try await rekey(root, newKey.alsoOpening(oldKey))
        XCTAssertEqual(again.resealed, 0)
        XCTAssertEqual(again.alreadySealed, 600, "running it again re-seals nothing")
        XCTAssertEqual(try rows(root), after)
    }

    /// The rolling path: a process opened before the rotation (sealing with the old key,
    /// opening with the new) keeps reading and writing throughout; what it writes after the
    /// rotation opens for the processes on the new key and is re-sealed by the next run.
    func testAProcessStillSealingWithTheOldKeyKeepsWorkingAndTheNextRunReSealsWhatItWrote() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: .none, count: 3, keySource: oldKey)
        let waiting = try SQLiteKeystore(root: root, service: "tool", keySource: oldKey.alsoOpening(newKey))
        defer { waiting.close() }

        let rotation = try await rekey(root, newKey.alsoOpening(oldKey))
        XCTAssertEqual(rotation.resealed, 3)

        let reread = try await waiting.value(forKey: "k1")
        XCTAssertEqual(string(reread), "value-1", "an item re-sealed with the new key opens for the waiting process")
        try await waiting.set(bytes("late"), forKey: "late")
        let rotated = try SQLiteKeystore(root: root, service: "tool", keySource: newKey.alsoOpening(oldKey))
        defer { rotated.close() }
        let lateValue = try await rotated.value(forKey: "late")
        XCTAssertEqual(string(lateValue), "late", "what the waiting process sealed opens for a rotated one")
        let newOnly = try SQLiteKeystore(root: root, service: "tool", keySource: newKey)
        await assertThrows(KeystoreError.self, code: .authenticationFailed) { _ = try await newOnly.value(forKey: "late") }
        newOnly.close()

        let second = try await rekey(root, newKey.alsoOpening(oldKey))
        XCTAssertEqual(second.resealed, 1)
        XCTAssertEqual(second.alreadySealed, 3)
        let read = try await contents(root, group: .none, keySource: newKey)
        XCTAssertEqual(read, ["k0": "value-0", "k1": "value-1", "k2": "value-2", "late": "late"])
    }

    func testItemsNoKeyOpensStayAsTheyWereAndAreCounted() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: .none, count: 4, keySource: oldKey)
        let keystore = try SQLiteKeystore(root: root, service: "tool", keySource: oldKey)
        try keystore.replaceStoredRow(sealing: bytes("foreign"), withKey: [UInt8](repeating: 9, count: 32), forKey: "k1")
        try keystore.replaceStoredRow([1, 2, 3], forKey: "k3")
        keystore.close()
        let before = try rows(root)

        let rotation = try await rekey(root, newKey.alsoOpening(oldKey))
        XCTAssertEqual(rotation.resealed, 2)
        XCTAssertEqual(rotation.unreadable, 2)
        XCTAssertEqual(rotation.unreadableKeys, ["k1", "k3"])
        XCTAssertFalse(rotation.isComplete)
        let after = try rows(root)
        XCTAssertEqual(after["k1"], before["k1"], "an item no key opens is left as it was")
        XCTAssertEqual(after["k3"], before["k3"])
        let rotated = try SQLiteKeystore(root: root, service: "tool", keySource: newKey)
        defer { rotated.close() }
        let other = try await rotated.value(forKey: "k2")
        XCTAssertEqual(string(other), "value-2", "the damaged items affect no other")

        // Their key given as an opening one, a rotation run again re-seals them.
        let recovered = try await rekey(root, newKey.alsoOpening(oldKey, .raw([UInt8](repeating: 9, count: 32))))
        XCTAssertEqual(recovered.resealed, 1)
        XCTAssertEqual(recovered.unreadableKeys, ["k3"])
        let foreign = try await rotated.value(forKey: "k1")
        XCTAssertEqual(string(foreign), "foreign")
    }

    /// What a member of a shared group can plant (a key over the length limit, a value over
    /// it, keys no item can have, rows sealed with the group's key under any name) neither
    /// stops a rotation of the group nor is named by it; the group's own items are re-sealed.
    func testRowsPlantedInASharedGroupNeitherStopNorMisleadARotation() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: team, count: 3, keySource: oldKey)
        let path = try StoreLayout(root: root, service: "tool").databasePath(team)
        try plainSQLite(path, "INSERT INTO items(key, version, value) VALUES(CAST(zeroblob(2097152) AS TEXT) || 'x', NULL, x'00')")
        try plainSQLite(path, "INSERT INTO items(key, version, value) VALUES('big', NULL, zeroblob(2097152))")
        try plainSQLite(path, "INSERT INTO items(key, version, value) VALUES(printf('%181s', 'z'), NULL, x'00')")

        let rotation = try await rekey(root, newKey.alsoOpening(oldKey), group: team, batch: 2)
        XCTAssertEqual(rotation.resealed, 3)
        XCTAssertEqual(rotation.unreadable, 2, "the oversized key and the oversized value count; the implausible key is skipped")
        XCTAssertEqual(rotation.unreadableKeys, ["big"], "only a key an item can have is named")
        let rotated = try SQLiteKeystore(root: root, service: "tool", accessGroup: team, keySource: newKey)
        defer { rotated.close() }
        for index in 0..<3 {
            let value = try await rotated.value(forKey: "k\(index)")
            XCTAssertEqual(string(value), "value-\(index)")
        }
    }

    func testARotationWithoutTheOldKeyIsRefusedAndChangesNothing() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: .none, count: 3, keySource: oldKey)
        let before = try rows(root)
        let error = await assertThrows(KeystoreError.self, code: .invalidKey) {
            _ = try await self.rekey(root, self.newKey.alsoOpening(testKey(3)))
        }
        XCTAssertTrue(error?.reason.contains("none of the keys given opens the key check") ?? false, error?.reason ?? "")
        XCTAssertEqual(try rows(root), before)
        let read = try await contents(root, group: .none, keySource: oldKey)
        XCTAssertEqual(read.count, 3, "the old key still opens everything")

        let empty = try TemporaryRoot()
        let nothing = try await rekey(empty.root, newKey.alsoOpening(oldKey))
        XCTAssertEqual(nothing, KeyRotation(), "no database: nothing to rotate")
        XCTAssertFalse(FileManager.default.fileExists(atPath: try StoreLayout(root: empty.root, service: "tool").databasePath(.none)),
                       "a rotation creates no database")

        // A key file moved aside and a wrong key given for it: refused before a new key file
        // is made (which would then lock the right key out of every open).
        let keyFileRoot = try TemporaryRoot()
        try await fill(keyFileRoot.root, group: .none, count: 2, keySource: .keyFile)
        let keyFile = try StoreLayout(root: keyFileRoot.root, service: "tool").keyFilePath(.none)
        XCTAssertEqual(rename(keyFile, keyFileRoot.root + "/old.key"), 0)
        await assertThrows(KeystoreError.self, code: .invalidKey) {
            _ = try await self.rekey(keyFileRoot.root, KeySource.keyFile.alsoOpening(testKey(3)))
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: keyFile), "a refused rotation made a key file")
    }

    /// Two rotations to different keys never split the items between them: a second one is
    /// refused once the first has moved the key check, and a batch stops when the check no
    /// longer opens with its sealing key.
    func testASecondRotationToAnotherKeyIsRefusedAndABatchStopsWhenTheCheckMoves() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: .none, count: 600, keySource: oldKey)
        let (oldKey, newKey, thirdKey) = (self.oldKey, self.newKey, testKey(3))
        let layout = try StoreLayout(root: root, service: "tool")
        let second = LockedBox<KeystoreError?>(nil)
        _ = try await SQLiteKeystore._rekey(
            root: root, service: "tool", group: .none, keySource: newKey.alsoOpening(oldKey), itemsPerTransaction: 256
        ) { _ throws(KeystoreError) in
            guard second.current == nil else { return }
            do throws(KeystoreError) {
                _ = try StoreRotation(layout: layout, group: .none, keySource: thirdKey.alsoOpening(oldKey), busyTimeout: .seconds(5)).run()
            } catch {
                second.withLock { $0 = error }
            }
        }
        XCTAssertEqual(second.current?.code, .invalidKey, "the second rotation started while the first ran")
        let read = try await contents(root, group: .none, keySource: newKey)
        XCTAssertEqual(read.count, 600, "the first rotation completed")

        // The check moved under a running rotation (as another process could, by hand): its
        // next batch stops.
        let moved = await assertThrows(KeystoreError.self, code: .invalidKey) {
            _ = try await SQLiteKeystore._rekey(
                root: root, service: "tool", group: .none, keySource: thirdKey.alsoOpening(newKey), itemsPerTransaction: 256
            ) { _ throws(KeystoreError) in
                let other = try StoreNamespace.open(layout: layout, group: .none, keySource: newKey, create: .nothing)!
                let connection = try other.connect(service: "tool", busyTimeout: .seconds(5))
                defer { connection.close() }
                try other.storeKeyCheck(on: connection)
            }
        }
        XCTAssertTrue(moved?.reason.contains("another rotation moved it") ?? false, moved?.reason ?? "")
    }

    /// A sealing key from a headerless salt in a shared group (which a member could plant) is
    /// not one a rotation seals with.
    func testARotationToAKeyFromAHeaderlessSharedSaltIsRefused() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: team, count: 2, keySource: oldKey)
        let saltPath = try StoreLayout(root: root, service: "tool").saltPath(team)
        XCTAssertTrue(FileManager.default.createFile(atPath: saltPath, contents: Data(repeating: 0x42, count: 16), attributes: [.posixPermissions: 0o640]))
        let before = try rows(root, group: team)
        let refused = await assertThrows(KeystoreError.self, code: .corruptFormat) {
            _ = try await self.rekey(root, KeySource.passphrase("chosen by the victim").alsoOpening(self.oldKey), group: self.team)
        }
        XCTAssertEqual(refused?.path, saltPath)
        XCTAssertEqual(try rows(root, group: team), before)
        let read = try await contents(root, group: team, keySource: oldKey)
        XCTAssertEqual(read.count, 2, "the old key still opens the group")
    }

    /// A rotation stopped between batches (a crash, a full disk) leaves every item opening
    /// with one of the keys and the key check with the new one (it moves first); running it
    /// again completes it.
    func testAnInterruptedRotationIsCompletedByRunningItAgain() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: .none, count: 600, keySource: oldKey)
        let error = await assertThrows(KeystoreError.self, code: .io) {
            _ = try await SQLiteKeystore._rekey(
                root: root, service: "tool", group: .none, keySource: self.newKey.alsoOpening(self.oldKey), itemsPerTransaction: 256
            ) { _ throws(KeystoreError) in throw KeystoreError(.io, "stopped after the first batch") }
        }
        XCTAssertNotNil(error)
        let halfway = try await contents(root, group: .none, keySource: newKey.alsoOpening(oldKey))
        XCTAssertEqual(halfway.count, 600, "every item opens with one of the keys")
        assertThrows(KeystoreError.self, code: .invalidKey) {
            try SQLiteKeystore(root: root, service: "tool", keySource: self.oldKey.alsoOpening(self.newKey))
        }

        let completed = try await rekey(root, newKey.alsoOpening(oldKey))
        XCTAssertEqual(completed.alreadySealed, 256, "the first batch stayed re-sealed")
        XCTAssertEqual(completed.resealed, 344)
        let read = try await contents(root, group: .none, keySource: newKey)
        XCTAssertEqual(read.count, 600)
    }

    /// The key file default: the old file moved aside and given as an opening key, the
    /// rotation makes a new random key file and re-seals with it.
    func testAKeyFileIsReplacedByMovingItAsideAndRotating() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: team, count: 5, keySource: .keyFile)
        let keyFile = try StoreLayout(root: root, service: "tool").keyFilePath(team)
        let aside = root + "/old.key"
        XCTAssertEqual(rename(keyFile, aside), 0)
        chmod(aside, 0o600)
        let oldBytes = try XCTUnwrap(FileManager.default.contents(atPath: aside))

        let rotation = try await rekey(root, KeySource.keyFile.alsoOpening(try KeySource.keyFile(at: aside)), group: team)
        XCTAssertEqual(rotation.resealed, 5)
        let newBytes = try XCTUnwrap(FileManager.default.contents(atPath: keyFile))
        XCTAssertEqual(newBytes.count, 32)
        XCTAssertNotEqual(newBytes, oldBytes, "a new key file was made")
        let read = try await contents(root, group: team, keySource: .keyFile)
        XCTAssertEqual(read.count, 5)
        assertThrows(KeystoreError.self, code: .invalidKey) {
            try SQLiteKeystore(root: root, service: "tool", accessGroup: team, keySource: .raw(Array(oldBytes)))
        }
    }

    /// A group rotated away from an environment key (to a key file, or a passphrase) opens
    /// with its new key while the user's private namespace is still sealed with the old one: a
    /// group's open reads the private database's plain record of the last group and needs no
    /// private key, so none is made or derived there (a key made over the private key check
    /// would have refused every open of the group).
    func testAGroupRotatedAwayFromAnEnvironmentKeyOpensWhileThePrivateNamespaceKeepsIt() async throws {
        for newSource in [KeySource.keyFile, .passphrase("the group's new passphrase")] {
            let temporary = try TemporaryRoot()
            let root = temporary.root
            try SQLiteKeystore(root: root, service: "tool", keySource: oldKey).close()  // the private key check
            try await fill(root, group: team, count: 3, keySource: oldKey)
            let rotation = try await rekey(root, newSource.alsoOpening(oldKey), group: team)
            XCTAssertEqual(rotation.resealed, 3, "\(newSource)")
            let read = try await contents(root, group: team, keySource: newSource)
            XCTAssertEqual(read.count, 3, "\(newSource)")
            let single = try XCTUnwrap(try SQLiteKeystore.SingleReader.open(root: root, service: "tool", accessGroup: team, keySource: newSource))
            XCTAssertEqual(string(try single.value(forKey: "k0")), "value-0")
            single.close()
            let layout = try StoreLayout(root: root, service: "tool")
            for path in [layout.keyFilePath(.none), layout.saltPath(.none)] {
                XCTAssertFalse(FileManager.default.fileExists(atPath: path), "\(newSource): \(path) was made")
            }
            // The private namespace still opens with the key that sealed it.
            try SQLiteKeystore(root: root, service: "tool", keySource: oldKey).close()
        }
    }

    /// A migration during a rollout moves items sealed with either key, each re-sealed with
    /// the sealing key for its new group.
    func testAMigrationOpensItemsWithTheOpeningKeysToo() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: .none, count: 2, keySource: oldKey)
        let waiting = try SQLiteKeystore(root: root, service: "tool", keySource: oldKey.alsoOpening(newKey))
        _ = try await rekey(root, newKey.alsoOpening(oldKey))
        try await waiting.set(bytes("late"), forKey: "late")
        waiting.close()
        let moved = try await SQLiteKeystore.migrate(root: root, service: "tool", from: .none, to: team, keySource: newKey.alsoOpening(oldKey))
        XCTAssertEqual(moved, 3)
        let read = try await contents(root, group: team, keySource: newKey)
        XCTAssertEqual(read, ["k0": "value-0", "k1": "value-1", "late": "late"])
    }

    func testOpeningKeysThatDoNotExistAreLeftOutAndOthersFail() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: .none, count: 1, keySource: oldKey)
        // No salt for a passphrase, no key file: nothing was sealed with them.
        let keystore = try SQLiteKeystore(root: root, service: "tool", keySource: oldKey.alsoOpening(.passphrase("never used"), .keyFile))
        XCTAssertEqual(keystore.namespace.keys.opening.count, 0)
        keystore.close()
        XCTAssertFalse(FileManager.default.fileExists(atPath: try StoreLayout(root: root, service: "tool").keyFilePath(.none)),
                       "an opening key file is never created")
        // A key given and malformed is a configuration error, as the sealing key's would be.
        let unset = "IDENTITY_BROKER_TEST_UNSET_\(UUID().uuidString.prefix(8))"
        let malformed = assertThrows(KeystoreError.self, code: .invalidKey) {
            try SQLiteKeystore(root: root, service: "tool", keySource: oldKey.alsoOpening(.environment(variable: unset)))
        }
        XCTAssertTrue(malformed?.reason.contains(unset) ?? false, malformed?.reason ?? "")
    }

    /// The proof takes whichever given key exists: a stray passphrase with no salt here does
    /// not hide the old key file given after it.
    func testAnyExistingKeyProvesTheRotationAndOlderNamespacesAreRotatedToo() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, group: .none, count: 3, keySource: .keyFile)
        let keyFile = try StoreLayout(root: root, service: "tool").keyFilePath(.none)
        let aside = root + "/old.key"
        XCTAssertEqual(rename(keyFile, aside), 0)
        let old = try KeySource.keyFile(at: aside)
        let rotation = try await rekey(root, KeySource.keyFile.alsoOpening(.passphrase("no salt for this one"), old))
        XCTAssertEqual(rotation.resealed, 3)
        XCTAssertTrue(rotation.keyCheckMoved)

        // A namespace from before the key check (items, no check) is proven by its items.
        let legacy = try TemporaryRoot()
        try await fill(legacy.root, group: .none, count: 3, keySource: oldKey)
        try plainSQLite(try StoreLayout(root: legacy.root, service: "tool").databasePath(.none), "DELETE FROM meta WHERE name = 'key_check'")
        let legacyRotation = try await rekey(legacy.root, newKey.alsoOpening(oldKey))
        XCTAssertEqual(legacyRotation.resealed, 3)
        let read = try await contents(legacy.root, group: .none, keySource: newKey)
        XCTAssertEqual(read.count, 3)

        // A namespace whose items were all removed keeps its check, which moves; one with
        // neither check nor item has nothing to rotate.
        let cleared = try SQLiteKeystore(root: legacy.root, service: "tool", keySource: newKey)
        for index in 0..<3 { try await cleared.remove(forKey: "k\(index)") }
        cleared.close()
        let third = testKey(3)
        let moved = try await rekey(legacy.root, third.alsoOpening(newKey))
        XCTAssertTrue(moved.keyCheckMoved)
        XCTAssertEqual(moved.resealed, 0)
        try SQLiteKeystore(root: legacy.root, service: "tool", keySource: third).close()
        try plainSQLite(try StoreLayout(root: legacy.root, service: "tool").databasePath(.none), "DELETE FROM meta WHERE name = 'key_check'")
        let nothing = try await rekey(legacy.root, newKey.alsoOpening(third))
        XCTAssertFalse(nothing.keyCheckMoved)
        XCTAssertEqual(nothing.description, "nothing sealed")
    }

    func testADescriptionNamesTheKindsAndNoSecret() {
        let source = KeySource.environment().alsoOpening(.passphrase("correct horse battery staple"), .raw([UInt8](repeating: 0x41, count: 32)))
        XCTAssertEqual(source.description, "environment(IDENTITY_BROKER_KEY) also opening [passphrase, raw]")
        var dumped = ""
        dump(source, to: &dumped)
        XCTAssertFalse(dumped.contains("horse"), dumped)
        XCTAssertFalse(dumped.contains("AAAA"), dumped)
    }
}
