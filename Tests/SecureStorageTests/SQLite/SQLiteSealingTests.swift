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

    func testWrongKeyFailsAuthentication() async throws {
        let temporary = try TemporaryRoot()
        let writer = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(1))
        try await writer.set(bytes("secret"), forKey: "k")
        writer.close()
        let reader = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(2))
        defer { reader.close() }
        await assertThrows(KeystoreError.self, code: .authenticationFailed) { try await reader.value(forKey: "k") }
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
        let temporary = try TemporaryRoot()
        try await databaseOfToolLinkedAsOther(root: temporary.root)
        guard case .failure(let error) = openResult(root: temporary.root, service: "other", keySource: testKey()) else {
            return XCTFail("a database of another service opened")
        }
        XCTAssertEqual(error.code, .corruptFormat, "\(error)")
    }
}
