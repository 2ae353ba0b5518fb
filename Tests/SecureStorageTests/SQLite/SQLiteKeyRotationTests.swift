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

    private func fill(_ root: String, count: Int, keySource: KeySource, group: AccessGroup = .none) async throws {
        let keystore = try SQLiteKeystore(root: root, service: "tool", accessGroup: group, keySource: keySource)
        defer { keystore.close() }
        var batch = KeystoreBatch()
        for index in 0..<count { batch.set(bytes("value-\(index)"), forKey: "k\(index)", version: Int64(index)) }
        try await keystore.commit(batch)
    }

    /// Every item's value, read with `keySource`.
    private func contents(_ root: String, keySource: KeySource, group: AccessGroup = .none) async throws -> [String: String] {
        let keystore = try SQLiteKeystore(root: root, service: "tool", accessGroup: group, keySource: keySource)
        defer { keystore.close() }
        var result: [String: String] = [:]
        for key in try await keystore.keys() { result[key] = string(try await keystore.requireValue(forKey: key)) }
        return result
    }

    private func rows(_ root: String, group: AccessGroup = .none) throws -> [String: [UInt8]] {
        let path = try StoreLayout(root: root, service: "tool").databasePath(group)
        return Dictionary(uniqueKeysWithValues: try SQLiteKeystore.storedRows(ofDatabase: path).map { ($0.key, $0.sealed) })
    }

    private func rekey(_ root: String, _ keySource: KeySource, group: AccessGroup = .none, batch: Int = 256) async throws -> KeyRotation {
        try await SQLiteKeystore._rekey(root: root, service: "tool", group: group, keySource: keySource, itemsPerTransaction: batch) { _ in }
    }

    func testARotationReSealsEveryItemWithTheNewKeyAndMovesTheKeyCheck() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, count: 600, keySource: oldKey)
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
        let read = try await contents(root, keySource: newKey)
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
        try await fill(root, count: 3, keySource: oldKey)
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
        let read = try await contents(root, keySource: newKey)
        XCTAssertEqual(read, ["k0": "value-0", "k1": "value-1", "k2": "value-2", "late": "late"])
    }

    func testItemsNoKeyOpensStayAsTheyWereAndAreCounted() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, count: 4, keySource: oldKey)
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

    func testARotationWithoutTheOldKeyIsRefusedAndChangesNothing() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, count: 3, keySource: oldKey)
        let before = try rows(root)
        let error = await assertThrows(KeystoreError.self, code: .invalidKey) {
            _ = try await self.rekey(root, self.newKey.alsoOpening(testKey(3)))
        }
        XCTAssertTrue(error?.reason.contains("none of the keys given opens the key check") ?? false, error?.reason ?? "")
        XCTAssertEqual(try rows(root), before)
        let read = try await contents(root, keySource: oldKey)
        XCTAssertEqual(read.count, 3, "the old key still opens everything")

        let empty = try TemporaryRoot()
        let nothing = try await rekey(empty.root, newKey.alsoOpening(oldKey))
        XCTAssertEqual(nothing, KeyRotation(), "no database: nothing to rotate")
        XCTAssertFalse(FileManager.default.fileExists(atPath: try StoreLayout(root: empty.root, service: "tool").databasePath(.none)),
                       "a rotation creates no database")
    }

    /// A rotation stopped between batches (a crash, a full disk) leaves every item opening
    /// with one of the keys and the key check with the old one; running it again completes it.
    func testAnInterruptedRotationIsCompletedByRunningItAgain() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, count: 600, keySource: oldKey)
        let error = await assertThrows(KeystoreError.self, code: .io) {
            _ = try await SQLiteKeystore._rekey(
                root: root, service: "tool", group: .none, keySource: self.newKey.alsoOpening(self.oldKey), itemsPerTransaction: 256
            ) { _ throws(KeystoreError) in throw KeystoreError(.io, "stopped after the first batch") }
        }
        XCTAssertNotNil(error)
        let halfway = try await contents(root, keySource: oldKey.alsoOpening(newKey))
        XCTAssertEqual(halfway.count, 600, "every item opens with one of the keys")
        XCTAssertThrowsError(try SQLiteKeystore(root: root, service: "tool", keySource: newKey), "the key check has not moved yet")

        let completed = try await rekey(root, newKey.alsoOpening(oldKey))
        XCTAssertEqual(completed.alreadySealed, 256, "the first batch stayed re-sealed")
        XCTAssertEqual(completed.resealed, 344)
        let read = try await contents(root, keySource: newKey)
        XCTAssertEqual(read.count, 600)
    }

    /// The key file default: the old file moved aside and given as an opening key, the
    /// rotation makes a new random key file and re-seals with it.
    func testAKeyFileIsReplacedByMovingItAsideAndRotating() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, count: 5, keySource: .keyFile, group: team)
        let keyFile = try StoreLayout(root: root, service: "tool").keyFilePath(team)
        let aside = root + "/old.key"
        XCTAssertEqual(rename(keyFile, aside), 0)
        chmod(aside, 0o600)
        let oldBytes = try XCTUnwrap(FileManager.default.contents(atPath: aside))

        let rotation = try await rekey(root, KeySource.keyFile.alsoOpening(try KeySource.readingKeyFile(at: aside)), group: team)
        XCTAssertEqual(rotation.resealed, 5)
        let newBytes = try XCTUnwrap(FileManager.default.contents(atPath: keyFile))
        XCTAssertEqual(newBytes.count, 32)
        XCTAssertNotEqual(newBytes, oldBytes, "a new key file was made")
        let read = try await contents(root, keySource: .keyFile, group: team)
        XCTAssertEqual(read.count, 5)
        XCTAssertThrowsError(try SQLiteKeystore(root: root, service: "tool", accessGroup: team, keySource: .raw(Array(oldBytes))))
    }

    /// A migration during a rollout moves items sealed with either key, each re-sealed with
    /// the sealing key for its new group.
    func testAMigrationOpensItemsWithTheOpeningKeysToo() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, count: 2, keySource: oldKey)
        let waiting = try SQLiteKeystore(root: root, service: "tool", keySource: oldKey.alsoOpening(newKey))
        _ = try await rekey(root, newKey.alsoOpening(oldKey))
        try await waiting.set(bytes("late"), forKey: "late")
        waiting.close()
        let moved = try await SQLiteKeystore.migrate(root: root, service: "tool", from: .none, to: team, keySource: newKey.alsoOpening(oldKey))
        XCTAssertEqual(moved, 3)
        let read = try await contents(root, keySource: newKey, group: team)
        XCTAssertEqual(read, ["k0": "value-0", "k1": "value-1", "late": "late"])
    }

    func testOpeningKeysThatDoNotExistAreLeftOutAndOthersFail() async throws {
        let temporary = try TemporaryRoot()
        let root = temporary.root
        try await fill(root, count: 1, keySource: oldKey)
        // No salt for a passphrase, no key file: nothing was sealed with them.
        let keystore = try SQLiteKeystore(root: root, service: "tool", keySource: oldKey.alsoOpening(.passphrase("never used"), .keyFile))
        XCTAssertEqual(keystore.namespace.keys.opening.count, 0)
        keystore.close()
        XCTAssertFalse(FileManager.default.fileExists(atPath: try StoreLayout(root: root, service: "tool").keyFilePath(.none)),
                       "an opening key file is never created")
        // A key given and malformed is a configuration error, as the sealing key's would be.
        XCTAssertThrowsError(try SQLiteKeystore(
            root: root, service: "tool", keySource: oldKey.alsoOpening(.environment(variable: "IDENTITY_BROKER_TEST_UNSET_\(UUID().uuidString.prefix(8))"))))
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
