import BrokerTestSupport
import Foundation
import XCTest
@testable import SecureStorage

final class SQLiteSealingTests: XCTestCase {
    func testADamagedRowIsAnErrorForThatKeyOnly() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { keystore.close() }
        for key in ["a", "b", "c", "d"] { try await keystore.set(bytes("value-\(key)"), forKey: key) }
        try tamper(keystore.namespace.databasePath) { connection throws(KeystoreError) in
            // b: one ciphertext byte flipped; c: truncated to less than a sealed item.
            var sealed = try sealedValue(connection, key: "b")!
            sealed[sealed.count / 2] ^= 0x01
            try storeSealed(connection, key: "b", value: sealed)
            try storeSealed(connection, key: "c", value: [1, 2, 3])
        }
        let error = await assertThrows(KeystoreError.self, code: .authenticationFailed) { try await keystore.value(forKey: "b") }
        XCTAssertEqual(error?.path, keystore.namespace.databasePath)
        await assertThrows(KeystoreError.self, code: .corruptFormat) { try await keystore.value(forKey: "c") }
        let a = try await keystore.value(forKey: "a")
        let d = try await keystore.value(forKey: "d")
        XCTAssertEqual(string(a), "value-a")
        XCTAssertEqual(string(d), "value-d")
        let keys = try await keystore.keys()
        XCTAssertEqual(keys, ["a", "b", "c", "d"])
        // The damaged item can still be replaced or removed.
        try await keystore.remove(forKey: "b")
        try await keystore.set(bytes("fresh"), forKey: "c")
        let c = try await keystore.value(forKey: "c")
        XCTAssertEqual(string(c), "fresh")
    }

    func testFlippingAnyByteOfARowFailsAuthentication() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { keystore.close() }
        let secret = "AKIA-secret-value-\(UUID().uuidString)"
        try await keystore.set(bytes(secret), forKey: "session")
        var original: [UInt8] = []
        try tamper(keystore.namespace.databasePath) { connection throws(KeystoreError) in original = try sealedValue(connection, key: "session")! }
        XCTAssertEqual(original.count, secret.utf8.count + 29, "version, nonce, ciphertext, tag")
        for position in original.indices {
            var flipped = original
            flipped[position] ^= 0x01
            try tamper(keystore.namespace.databasePath) { connection throws(KeystoreError) in try storeSealed(connection, key: "session", value: flipped) }
            let error = await assertThrows(KeystoreError.self, code: .authenticationFailed) { try await keystore.value(forKey: "session") }
            XCTAssertFalse(error?.description.contains(secret) ?? true, "byte \(position)")
        }
        // Shorter than a sealed item is a corrupt format; any other length fails authentication.
        try tamper(keystore.namespace.databasePath) { connection throws(KeystoreError) in try storeSealed(connection, key: "session", value: Array(original.prefix(5))) }
        await assertThrows(KeystoreError.self, code: .corruptFormat) { try await keystore.value(forKey: "session") }
        try tamper(keystore.namespace.databasePath) { connection throws(KeystoreError) in try storeSealed(connection, key: "session", value: Array(original.dropLast())) }
        await assertThrows(KeystoreError.self, code: .authenticationFailed) { try await keystore.value(forKey: "session") }
        try tamper(keystore.namespace.databasePath) { connection throws(KeystoreError) in try storeSealed(connection, key: "session", value: original) }
        let restored = try await keystore.value(forKey: "session")
        XCTAssertEqual(string(restored), secret)
    }

    func testARowMovedToAnotherServiceFails() async throws {
        let temporary = try TemporaryRoot()
        let key = testKey()
        let tool = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: key)
        defer { tool.close() }
        let other = try SQLiteKeystore(root: temporary.root, service: "other", keySource: key)
        defer { other.close() }
        try await tool.set(bytes("tool's"), forKey: "alice")
        var sealed: [UInt8] = []
        try tamper(tool.namespace.databasePath) { connection throws(KeystoreError) in sealed = try sealedValue(connection, key: "alice")! }
        try tamper(other.namespace.databasePath) { connection throws(KeystoreError) in try storeSealed(connection, key: "alice", value: sealed) }
        await assertThrows(KeystoreError.self, code: .authenticationFailed) { try await other.value(forKey: "alice") }
    }

    /// A row sealed with another key (planted by someone who can write the file: a process
    /// with that key is refused at open) fails to open, alone.
    func testARowSealedWithAnotherKeyFailsAuthentication() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(1))
        defer { keystore.close() }
        try await keystore.set(bytes("mine"), forKey: "mine")
        try keystore.replaceStoredRow(sealing: bytes("secret"), withKey: [UInt8](repeating: 2, count: 32), forKey: "k")
        await assertThrows(KeystoreError.self, code: .authenticationFailed) { try await keystore.value(forKey: "k") }
        let mine = try await keystore.value(forKey: "mine")
        XCTAssertEqual(string(mine), "mine")
    }

    /// A process with another key is refused when it opens (`invalidKey`), before it can
    /// replace an item the others can open: by the namespace's key check, or, in a database
    /// whose items predate the check, by those items (and then it stores no check).
    func testAnotherKeyIsRefusedWhenItOpens() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(7))
        try await keystore.set(bytes("kept"), forKey: "k")
        let path = keystore.namespace.databasePath
        keystore.close()

        let refused = assertThrows(KeystoreError.self, code: .invalidKey) {
            try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(9))
        }
        XCTAssertTrue(refused?.reason.contains("key check") ?? false, "\(String(describing: refused))")

        // A database written before the check existed.
        try tamper(path) { connection throws(KeystoreError) in try connection.execute("DELETE FROM meta WHERE name = 'key_check'") }
        let unchecked = assertThrows(KeystoreError.self, code: .invalidKey) {
            try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(9))
        }
        XCTAssertTrue(unchecked?.reason.contains("opens none of the first 1 items") ?? false, "\(String(describing: unchecked))")
        var stored: String?
        try tamper(path) { connection throws(KeystoreError) in stored = try StoreSchema.meta("key_check", on: connection) }
        XCTAssertNil(stored, "a refused key stores no check")

        let reader = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(7))
        defer { reader.close() }
        let value = try await reader.value(forKey: "k")
        XCTAssertEqual(string(value), "kept")
        try tamper(path) { connection throws(KeystoreError) in stored = try StoreSchema.meta("key_check", on: connection) }
        XCTAssertNotNil(stored, "the right key stores the check again")

        // A damaged check refuses every key until it is deleted.
        reader.close()
        try tamper(path) { connection throws(KeystoreError) in try StoreSchema.setMeta("key_check", "AAAA", on: connection) }
        assertThrows(KeystoreError.self, code: .invalidKey) { try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(7)) }
    }

    func testCiphertextMovedToAnotherKeyOrGroupFails() async throws {
        let temporary = try TemporaryRoot()
        let key = testKey()
        let personal = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: key)
        defer { personal.close() }
        let team = try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: AccessGroup(name: "team"), keySource: key)
        defer { team.close() }
        try await personal.set(bytes("alice's"), forKey: "alice")
        try await personal.set(bytes("bob's"), forKey: "bob")
        var moved: [UInt8] = []
        try tamper(personal.namespace.databasePath) { connection throws(KeystoreError) in
            moved = try sealedValue(connection, key: "alice")!
            try storeSealed(connection, key: "bob", value: moved)
        }
        await assertThrows(KeystoreError.self, code: .authenticationFailed) { try await personal.value(forKey: "bob") }
        try tamper(team.namespace.databasePath) { connection throws(KeystoreError) in
            try storeSealed(connection, key: "alice", value: moved)
        }
        await assertThrows(KeystoreError.self, code: .authenticationFailed) { try await team.value(forKey: "alice") }
        let original = try await personal.value(forKey: "alice")
        XCTAssertEqual(string(original), "alice's")
    }

    func testADatabaseCopiedUnderAnotherServiceIsRefused() async throws {
        // The second pair is one name in two spellings (precomposed and decomposed `é`):
        // two services, as their paths and items say, not one.
        for (tool, other) in [("tool", "other"), ("caf\u{E9}", "cafe\u{301}")] {
            let temporary = try TemporaryRoot()
            try await databaseOfToolLinkedAsOther(root: temporary.root, tool: tool, other: other)
            guard case .failure(let error) = openResult(root: temporary.root, service: other, keySource: testKey()) else {
                return XCTFail("a database of another service opened: \(other.unicodeScalars.map(\.value))")
            }
            XCTAssertEqual(error.code, .corruptFormat, "\(error)")
        }
    }
}
