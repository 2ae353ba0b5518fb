import Foundation
import XCTest
@testable import SecureStorage

final class SQLiteKeystoreTests: XCTestCase {
    func testRoundTripKeysAndRemove() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { keystore.close() }
        let missing = try await keystore.value(forKey: "absent")
        XCTAssertNil(missing)
        try await keystore.set(bytes("one"), forKey: "b")
        try await keystore.set(bytes("two"), forKey: "a")
        try await keystore.set(bytes("three"), forKey: "b")
        let b = try await keystore.requireValue(forKey: "b")
        XCTAssertEqual(string(b), "three")
        let keys = try await keystore.keys()
        XCTAssertEqual(keys, ["a", "b"])
        try await keystore.remove(forKey: "a")
        try await keystore.remove(forKey: "a")
        let keysAfter = try await keystore.keys()
        XCTAssertEqual(keysAfter, ["b"])
        await assertKeystoreErrorAsync(.itemNotFound) { () async throws(KeystoreError) in try await keystore.requireValue(forKey: "a") }
        await assertKeystoreErrorAsync(.invalidName) { () async throws(KeystoreError) in try await keystore.set([1], forKey: "") }

        // A second instance on the same files reads what the first wrote.
        let second = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { second.close() }
        let fromSecond = try await second.value(forKey: "b")
        XCTAssertEqual(string(fromSecond), "three")
    }

    func testOnlyCiphertextReachesTheDatabase() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        let secret = "very-secret-value-\(UUID().uuidString)"
        try await keystore.set(bytes(secret), forKey: "session.alice")
        keystore.close()
        var found = false
        for name in try FileManager.default.contentsOfDirectory(atPath: temporary.root + "/users/\(geteuid())") {
            let data = try Data(contentsOf: URL(fileURLWithPath: temporary.root + "/users/\(geteuid())/" + name))
            if data.range(of: Data(secret.utf8)) != nil { found = true }
        }
        XCTAssertFalse(found, "plaintext found in a database file")
    }

    func testVersionedWritesConverge() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { keystore.close() }
        let first = try await keystore.set(bytes("v5"), forKey: "k", version: 5)
        XCTAssertTrue(first)
        let older = try await keystore.set(bytes("v3"), forKey: "k", version: 3)
        XCTAssertFalse(older)
        let equal = try await keystore.set(bytes("v5b"), forKey: "k", version: 5)
        XCTAssertTrue(equal)
        let value = try await keystore.value(forKey: "k")
        XCTAssertEqual(string(value), "v5b")

        // Concurrent writers with distinct versions end on the highest, whatever the order.
        let versions = Array(1...40).shuffled()
        await withTaskGroup(of: Void.self) { group in
            for version in versions {
                group.addTask { _ = try? await keystore.set(bytes("v\(version)"), forKey: "race", version: Int64(version)) }
            }
        }
        let race = try await keystore.value(forKey: "race")
        XCTAssertEqual(string(race), "v40")

        // An unversioned write always applies; a remove too.
        try await keystore.set(bytes("plain"), forKey: "race")
        let lower = try await keystore.set(bytes("v1"), forKey: "race", version: 1)
        XCTAssertTrue(lower, "a versioned write over an unversioned item applies")
        let applied = try await keystore.commit({ var b = KeystoreBatch(); b.remove(forKey: "race"); b.remove(forKey: "race"); return b }())
        XCTAssertEqual(applied, [true, false])
    }

    func testBatchIsAtomic() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { keystore.close() }
        try await keystore.set(bytes("old"), forKey: "a")
        var bad = KeystoreBatch()
        bad.set(bytes("new"), forKey: "a")
        bad.set(bytes("x"), forKey: String(repeating: "k", count: 500))
        await assertKeystoreErrorAsync(.invalidName) { () async throws(KeystoreError) in try await keystore.commit(bad) }
        let a = try await keystore.value(forKey: "a")
        XCTAssertEqual(string(a), "old", "nothing of a failed batch applies")

        var good = KeystoreBatch()
        XCTAssertTrue(good.isEmpty)
        for index in 0..<20 { good.set(bytes("\(index)"), forKey: "g\(index)") }
        good.remove(forKey: "a")
        let applied = try await keystore.commit(good)
        XCTAssertEqual(applied.count, 21)
        XCTAssertTrue(applied.allSatisfy { $0 })
        let keys = try await keystore.keys()
        XCTAssertEqual(keys.count, 20)
        XCTAssertFalse(keys.contains("a"))
    }

    func testAFailingBatchInAGroupCommitFailsAlone() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { keystore.close() }
        // A trigger makes one key's write fail inside the shared transaction.
        try tamper(keystore.namespace.databasePath) { connection throws(KeystoreError) in
            try connection.execute("CREATE TRIGGER refuse BEFORE INSERT ON items WHEN NEW.key = 'poison' BEGIN SELECT RAISE(ABORT, 'refused'); END")
        }
        let results = await withTaskGroup(of: (String, Bool).self) { group -> [String: Bool] in
            for index in 0..<32 {
                let key = index == 16 ? "poison" : "k\(index)"
                group.addTask { ((key), (try? await keystore.set(bytes(key), forKey: key)) != nil) }
            }
            var results: [String: Bool] = [:]
            for await (key, ok) in group { results[key] = ok }
            return results
        }
        XCTAssertEqual(results["poison"], false)
        XCTAssertEqual(results.values.filter { $0 }.count, 31)
        let keys = try await keystore.keys()
        XCTAssertEqual(keys.count, 31)
    }

    func testSixtyFourConcurrentWritersShareCommitsAndLoseNothing() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { keystore.close() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<64 {
                group.addTask {
                    for index in 0..<5 { try await keystore.set(bytes("\(writer)-\(index)"), forKey: "w\(writer)-\(index)") }
                }
            }
            try await group.waitForAll()
        }
        let keys = try await keystore.keys()
        XCTAssertEqual(keys.count, 320)
        let sample = try await keystore.value(forKey: "w63-4")
        XCTAssertEqual(string(sample), "63-4")
    }

    func testClosedKeystoreIsUnavailable() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        keystore.close()
        keystore.close()
        await assertKeystoreErrorAsync(.storeUnavailable) { () async throws(KeystoreError) in try await keystore.set([1], forKey: "k") }
        await assertKeystoreErrorAsync(.storeUnavailable) { () async throws(KeystoreError) in try await keystore.value(forKey: "k") }
    }

    func testBusyPastTheTimeoutIsStoreUnavailable() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(
            root: temporary.root, service: "tool", configuration: .init(busyTimeout: .milliseconds(100))
        )
        defer { keystore.close() }
        let blocker = try SQLiteConnection(path: keystore.namespace.databasePath, busyTimeout: .seconds(1))
        defer { blocker.close() }
        try blocker.run("BEGIN IMMEDIATE")
        await assertKeystoreErrorAsync(.storeUnavailable) { () async throws(KeystoreError) in try await keystore.set([1], forKey: "k") }
        // Reads never wait for the writer.
        let value = try await keystore.value(forKey: "k")
        XCTAssertNil(value)
        try blocker.run("ROLLBACK")
        try await keystore.set([1], forKey: "k")
    }
}
