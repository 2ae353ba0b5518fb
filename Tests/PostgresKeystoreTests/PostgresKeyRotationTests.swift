import BrokerTestSupport
import Foundation
import PostgresKeystore
import SecureStorage
import XCTest

/// `PostgresKeystore.rekey`: a fleet's key replaced without losing an item, with instances on
/// either key working throughout.
final class PostgresKeyRotationTests: PostgresTestCase, @unchecked Sendable {
    private var oldKey: KeySource { .raw(key) }
    private let newKey = KeySource.raw([UInt8](repeating: 2, count: 32))

    private func fill(_ keystore: PostgresKeystore, count: Int) async throws {
        var batch = KeystoreBatch()
        for index in 0..<count { batch.set(Array("value-\(index)".utf8), forKey: "k\(index)", version: Int64(index)) }
        try await keystore.commit(batch)
    }

    private func rekey(_ keySource: KeySource, batch: Int = 500) async throws -> KeyRotation {
        try await PostgresKeystore._rekey(
            configuration: configuration(), service: "tool", group: .none, keySource: keySource, itemsPerTransaction: batch) { _ in }
    }

    /// The sealed values, by key, as the database holds them.
    private func rows() throws -> [String: String] {
        let text = try server.psqlValue(
            "SELECT string_agg(key || '=' || encode(value, 'hex'), ',' ORDER BY key) FROM identity_broker_items WHERE service = 'tool'",
            database: database)
        return Dictionary(uniqueKeysWithValues: text.split(separator: ",").map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1)
            return (String(parts[0]), String(parts[1]))
        })
    }

    private func values(_ keystore: PostgresKeystore) async throws -> [String: String] {
        var result: [String: String] = [:]
        for key in try await keystore.keys() {
            result[key] = try await keystore.value(forKey: key).map { String(decoding: $0, as: UTF8.self) }
        }
        return result
    }

    func testARotationReSealsEveryItemAndMovesTheKeyCheck() async throws {
        let waiting = try await keystore(keySource: oldKey.alsoOpening(newKey))
        try await fill(waiting, count: 250)
        let before = try rows()

        let early = await keystoreError { _ = try await self.keystore(keySource: self.newKey.alsoOpening(self.oldKey)) }
        XCTAssertEqual(early?.code, .invalidKey)
        XCTAssertTrue(early?.reason.contains("rotate it to the sealing key first") ?? false, "\(String(describing: early))")

        let rotation = try await rekey(newKey.alsoOpening(oldKey), batch: 100)
        XCTAssertEqual(rotation.resealed, 250)
        XCTAssertEqual(rotation.alreadySealed, 0)
        XCTAssertTrue(rotation.isComplete)
        let after = try rows()
        XCTAssertEqual(Set(after.keys), Set(before.keys))
        for (key, sealed) in after { XCTAssertNotEqual(sealed, before[key], "\(key) kept its old sealing") }
        let version = try server.psqlValue("SELECT version FROM identity_broker_items WHERE key = 'k42'", database: database)
        XCTAssertEqual(version, "42", "versions are kept")

        let rotated = try await keystore(keySource: newKey)
        let read = try await values(rotated)
        XCTAssertEqual(read.count, 250, "the new key alone opens every item")
        XCTAssertEqual(read["k249"], "value-249")
        let refused = await keystoreError { _ = try await self.keystore(keySource: self.oldKey) }
        XCTAssertEqual(refused?.code, .invalidKey, "the old key alone no longer opens the keystore")

        // The instance opened before the rotation reads the re-sealed items and writes with
        // the old key; instances on the new key read that too, and the next run re-seals it.
        let reread = try await waiting.value(forKey: "k7")
        XCTAssertEqual(reread, Array("value-7".utf8))
        try await waiting.set(Array("late".utf8), forKey: "late")
        let rolling = try await keystore(keySource: newKey.alsoOpening(oldKey))
        let late = try await rolling.value(forKey: "late")
        XCTAssertEqual(late, Array("late".utf8))
        let second = try await rekey(newKey.alsoOpening(oldKey), batch: 100)
        XCTAssertEqual(second.resealed, 1)
        XCTAssertEqual(second.alreadySealed, 250)
        let lateForTheNewKey = try await rotated.value(forKey: "late")
        XCTAssertEqual(lateForTheNewKey, Array("late".utf8))
    }

    func testItemsNoKeyOpensStayAndAWrongKeyChangesNothing() async throws {
        let keystore = try await keystore()
        try await fill(keystore, count: 3)
        try server.psql("UPDATE identity_broker_items SET value = set_byte(value, 15, get_byte(value, 15) # 1) WHERE key = 'k1'", database: database)
        let before = try rows()

        let wrong = await keystoreError { _ = try await self.rekey(self.newKey.alsoOpening(.raw([UInt8](repeating: 3, count: 32)))) }
        XCTAssertEqual(wrong?.code, .invalidKey)
        XCTAssertTrue(wrong?.reason.contains("none of the keys given opens the key check") ?? false, "\(String(describing: wrong))")
        XCTAssertEqual(try rows(), before, "a refused rotation changes nothing")
        // Nor does one whose key was never used here: no salt row is made for it.
        let passphrase = await keystoreError { _ = try await self.rekey(KeySource.passphrase("a passphrase long enough").alsoOpening(.raw([UInt8](repeating: 3, count: 32)))) }
        XCTAssertEqual(passphrase?.code, .invalidKey)
        let salts = try server.psqlValue("SELECT count(*) FROM identity_broker_key_salts", database: database)
        XCTAssertEqual(salts, "0", "a refused rotation made a salt")
        // A group that holds nothing has nothing to rotate, and gets no check row.
        let empty = try await PostgresKeystore.rekey(
            configuration: configuration(), service: "tool", group: AccessGroup(name: "nobody"), keySource: newKey.alsoOpening(oldKey))
        XCTAssertEqual(empty, KeyRotation())
        let nobody = try server.psqlValue("SELECT count(*) FROM identity_broker_items WHERE access_group = 'nobody'", database: database)
        XCTAssertEqual(nobody, "0")

        let rotation = try await rekey(newKey.alsoOpening(oldKey))
        XCTAssertEqual(rotation.resealed, 2)
        XCTAssertEqual(rotation.unreadable, 1)
        XCTAssertEqual(rotation.unreadableKeys, ["k1"])
        XCTAssertEqual(try rows()["k1"], before["k1"], "the damaged item is left as it was")
        let rotated = try await self.keystore(keySource: newKey)
        let value = try await rotated.value(forKey: "k2")
        XCTAssertEqual(value, Array("value-2".utf8))
    }

    func testAnInterruptedRotationIsCompletedByRunningItAgain() async throws {
        let keystore = try await keystore()
        try await fill(keystore, count: 250)
        let stopped = await keystoreError {
            _ = try await PostgresKeystore._rekey(
                configuration: self.configuration(), service: "tool", group: .none, keySource: self.newKey.alsoOpening(self.oldKey),
                itemsPerTransaction: 100
            ) { _ throws(KeystoreError) in throw KeystoreError(.io, "stopped after the first batch") }
        }
        XCTAssertEqual(stopped?.code, .io)
        let refused = await keystoreError { _ = try await self.keystore(keySource: self.oldKey.alsoOpening(self.newKey)) }
        XCTAssertEqual(refused?.code, .invalidKey, "the key check moved first")
        let halfway = try await self.keystore(keySource: newKey.alsoOpening(oldKey))
        let read = try await values(halfway)
        XCTAssertEqual(read.count, 250, "every item opens with one of the keys")
        // A second rotation, to another key, is refused: it would split the items.
        let second = await keystoreError { _ = try await self.rekey(KeySource.raw([UInt8](repeating: 3, count: 32)).alsoOpening(self.oldKey)) }
        XCTAssertEqual(second?.code, .invalidKey)
        // The check is still the new key's (the refused rotation changed nothing): the new key
        // alone opens the keystore, and the first batch's items.
        let stillNew = try await self.keystore(keySource: newKey)
        let stillRead = try await stillNew.value(forKey: "k0")
        XCTAssertEqual(stillRead, Array("value-0".utf8))

        let completed = try await rekey(newKey.alsoOpening(oldKey), batch: 100)
        XCTAssertEqual(completed.alreadySealed, 100)
        XCTAssertEqual(completed.resealed, 150)
    }

    /// A batch checks, inside its transaction, that the key check still opens with its sealing
    /// key: a check changed under a running rotation (another rotation's, or damage) stops it.
    func testABatchStopsWhenTheKeyCheckChangesUnderIt() async throws {
        let keystore = try await keystore()
        try await fill(keystore, count: 250)
        let server = self.server!, database = self.database!
        let stopped = await keystoreError {
            _ = try await PostgresKeystore._rekey(
                configuration: self.configuration(), service: "tool", group: .none, keySource: self.newKey.alsoOpening(self.oldKey),
                itemsPerTransaction: 100
            ) { _ throws(KeystoreError) in
                do {
                    try server.psql(
                        "UPDATE identity_broker_items SET value = set_byte(value, 15, get_byte(value, 15) # 1) WHERE service = ''",
                        database: database)
                } catch {
                    throw KeystoreError(.io, "psql failed")
                }
            }
        }
        XCTAssertEqual(stopped?.code, .invalidKey)
        XCTAssertTrue(stopped?.reason.contains("another rotation moved it") ?? false, "\(String(describing: stopped))")
        let resealed = try server.psqlValue("SELECT count(*) FROM identity_broker_items WHERE service = 'tool'", database: database)
        XCTAssertEqual(resealed, "250", "nothing was lost")
    }

    /// Commits of several keys at once, sealed with the old key, for as long as rotations lock
    /// their batches: neither deadlocks nor loses a write, and a last run leaves the new key
    /// alone opening everything, each key holding its last write.
    func testCommitsDuringARotationNeitherDeadlockNorGetLost() async throws {
        let writer = try await keystore(keySource: oldKey.alsoOpening(newKey))
        try await fill(writer, count: 300)
        let rotationsDone = LockedBox(false)
        let writes = Task { () -> [String: String] in
            var last: [String: String] = [:]
            var round = 0
            // At least a few rounds, and on until the rotations are done.
            while round < 5 || !rotationsDone.current {
                var batch = KeystoreBatch()
                for index in stride(from: 299 - round % 300, through: 0, by: -37) {
                    batch.set(Array("round-\(round)".utf8), forKey: "k\(index)")
                    last["k\(index)"] = "round-\(round)"
                }
                try await writer.commit(batch)
                round += 1
            }
            return last
        }
        for _ in 0..<3 { _ = try await rekey(newKey.alsoOpening(oldKey), batch: 20) }
        rotationsDone.withLock { $0 = true }
        let written = try await writes.value
        let last = try await rekey(newKey.alsoOpening(oldKey), batch: 20)
        XCTAssertTrue(last.isComplete)
        let rotated = try await keystore(keySource: newKey)
        let read = try await values(rotated)
        XCTAssertEqual(read.count, 300)
        for (key, value) in written { XCTAssertEqual(read[key], value, "\(key) lost a write") }
    }

    /// A database whose collation orders keys unlike their bytes (`a` before `B`, `é` among the
    /// `e`s): paging by the collation and locking by bytes still visits every key once, one key
    /// per batch.
    func testARotationVisitsEveryKeyOnceWhateverTheCollation() async throws {
        database = try server.createDatabase(icuLocale: "en")
        let keystore = try await keystore()
        let keys = ["a", "B", "_x", "\u{E9}", "e", "Z", "k10", "k9", "ke\u{301}", "A"]
        var batch = KeystoreBatch()
        for key in keys { batch.set(Array(key.utf8), forKey: key) }
        try await keystore.commit(batch)
        let rotation = try await rekey(newKey.alsoOpening(oldKey), batch: 1)
        XCTAssertEqual(rotation.resealed, keys.count)
        XCTAssertEqual(rotation.alreadySealed, 0, "no key was visited twice")
        let rotated = try await self.keystore(keySource: newKey)
        for key in keys {
            let value = try await rotated.value(forKey: key)
            XCTAssertEqual(value, Array(key.utf8), key)
        }
    }
}
