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
        let error = await assertKeystoreErrorAsync(.authenticationFailed) { () async throws(KeystoreError) in try await keystore.value(forKey: "b") }
        XCTAssertEqual(error?.path, keystore.namespace.databasePath)
        await assertKeystoreErrorAsync(.corruptFormat) { () async throws(KeystoreError) in try await keystore.value(forKey: "c") }
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

    func testWrongKeyFailsAuthentication() async throws {
        let temporary = try TemporaryRoot()
        let writer = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(1))
        try await writer.set(bytes("secret"), forKey: "k")
        writer.close()
        let reader = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey(2))
        defer { reader.close() }
        await assertKeystoreErrorAsync(.authenticationFailed) { () async throws(KeystoreError) in try await reader.value(forKey: "k") }
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
        await assertKeystoreErrorAsync(.authenticationFailed) { () async throws(KeystoreError) in try await personal.value(forKey: "bob") }
        try tamper(team.namespace.databasePath) { connection throws(KeystoreError) in
            try storeSealed(connection, key: "alice", value: moved)
        }
        await assertKeystoreErrorAsync(.authenticationFailed) { () async throws(KeystoreError) in try await team.value(forKey: "alice") }
        let original = try await personal.value(forKey: "alice")
        XCTAssertEqual(string(original), "alice's")
    }

    func testADatabaseCopiedUnderAnotherServiceIsRefused() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())
        try await keystore.set(bytes("x"), forKey: "k")
        let path = keystore.namespace.databasePath
        keystore.close()
        let layout = try StoreLayout(root: temporary.root, service: "other")
        XCTAssertEqual(link(path, layout.databasePath(.none)), 0)
        guard case .failure(let error) = openResult(root: temporary.root, service: "other", keySource: testKey()) else {
            return XCTFail("a database of another service opened")
        }
        XCTAssertEqual(error.code, .corruptFormat, "\(error)")
    }
}
