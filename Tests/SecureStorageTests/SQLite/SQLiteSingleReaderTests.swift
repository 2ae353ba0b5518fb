import BrokerTestSupport
import Foundation
import XCTest
@testable import SecureStorage

/// `SQLiteKeystore.SingleReader`: what a full open would read, the same refusals of hostile
/// files, and `nil` (a full open is needed) whenever something is missing or to be recorded.
final class SQLiteSingleReaderTests: XCTestCase {
    private func reader(_ root: String, service: String = "tool", group: AccessGroup = .none, keySource: KeySource = testKey())
        throws(KeystoreError) -> SQLiteKeystore.SingleReader?
    {
        try SQLiteKeystore.SingleReader.open(root: root, service: service, accessGroup: group, keySource: keySource)
    }

    func testReadsWhatTheKeystoreHolds() async throws {
        let temporary = try TemporaryRoot()
        for group in [AccessGroup.none, AccessGroup(name: "team")] {
            let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: group, keySource: testKey())
            try await keystore.set(bytes("value-\(group)"), forKey: "session.alice")
            let expected = try await keystore.value(forKey: "session.alice")
            keystore.close()
            let single = try XCTUnwrap(try reader(temporary.root, group: group), "\(group)")
            defer { single.close() }
            XCTAssertEqual(try single.value(forKey: "session.alice"), expected)
            XCTAssertEqual(string(try single.value(forKey: "session.alice")), "value-\(group)")
            XCTAssertNil(try single.value(forKey: "session.bob"))
            assertThrows(KeystoreError.self, code: .invalidName) { try single.value(forKey: "") }
        }
    }

    func testKeyFilesWork() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        try await keystore.set(bytes("x"), forKey: "k")
        keystore.close()
        let single = try XCTUnwrap(try reader(temporary.root, keySource: .keyFile))
        XCTAssertEqual(string(try single.value(forKey: "k")), "x")
        single.close()
        assertThrows(KeystoreError.self, code: .storeUnavailable) { try single.value(forKey: "k") }
    }

    func testNeedsAFullOpenWhenAnythingIsMissingAndCreatesNothing() async throws {
        let temporary = try TemporaryRoot()
        XCTAssertNil(try reader(temporary.root))
        XCTAssertFalse(FileManager.default.fileExists(atPath: temporary.root), "the single reader created the root")

        // The service's last group is the private one: reading "team" must record it first.
        try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey()).close()
        XCTAssertNotNil(try reader(temporary.root))
        XCTAssertNil(try reader(temporary.root, group: AccessGroup(name: "team")))
        // Another service's database does not exist yet; a key file was never made.
        XCTAssertNil(try reader(temporary.root, service: "other"))
        XCTAssertNil(try reader(temporary.root, keySource: .keyFile))
        let layout = try StoreLayout(root: temporary.root, service: "tool")
        XCTAssertFalse(FileManager.default.fileExists(atPath: layout.keyFilePath(.none)))
        XCTAssertFalse(FileManager.default.fileExists(atPath: layout.databasePath(.none) + "-wal"), "files left behind")

        // An empty database (created, schema not installed) is the full open's to install.
        let bare = try TemporaryRoot()
        let bareLayout = try StoreLayout(root: bare.root, service: "tool")
        XCTAssertTrue(try bareLayout.prepareDirectories(.none, create: true))
        XCTAssertNotNil(try bareLayout.prepareDatabase(.none, create: true))
        XCTAssertNil(try reader(bare.root))
    }

    func testADamagedRowFailsThatKeyOnly() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())
        for key in ["a", "b", "c"] { try await keystore.set(bytes("value-\(key)"), forKey: key) }
        let path = keystore.namespace.databasePath
        keystore.close()
        try tamper(path) { connection throws(KeystoreError) in
            var sealed = try sealedValue(connection, key: "b")!
            sealed[sealed.count / 2] ^= 0x01
            try storeSealed(connection, key: "b", value: sealed)
            try storeSealed(connection, key: "c", value: [1, 2, 3])
        }
        let single = try XCTUnwrap(try reader(temporary.root))
        defer { single.close() }
        let error = assertThrows(KeystoreError.self, code: .authenticationFailed) { try single.value(forKey: "b") }
        XCTAssertEqual(error?.path, path)
        assertThrows(KeystoreError.self, code: .corruptFormat) { try single.value(forKey: "c") }
        XCTAssertEqual(string(try single.value(forKey: "a")), "value-a")
    }

    /// Another key is refused when the reader opens, as a full open refuses it, whether or
    /// not the key read exists: a `credentials` or `status` with a mistyped key must not say
    /// "not federated" where a `login` would say "wrong key".
    func testAnotherKeyIsRefusedAsAFullOpenRefusesIt() async throws {
        let temporary = try TemporaryRoot()
        for group in [AccessGroup.none, AccessGroup(name: "team")] {
            let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: group, keySource: testKey())
            try await keystore.set(bytes("value"), forKey: "a")
            keystore.close()
            let error = assertThrows(KeystoreError.self, code: .invalidKey) {
                try reader(temporary.root, group: group, keySource: testKey(9))
            }
            guard case .failure(let full) = openResult(root: temporary.root, service: "tool", group: group, keySource: testKey(9)) else {
                return XCTFail("another key opened \(group)")
            }
            XCTAssertEqual(error?.reason, full.reason, "\(group)")
            // The old key given only to open, before the rotation: a reader never seals, so it
            // reads (a full open, which may write, is refused until the rotation).
            let rotating = try XCTUnwrap(try reader(temporary.root, group: group, keySource: testKey(9).alsoOpening(testKey())))
            XCTAssertEqual(string(try rotating.value(forKey: "a")), "value")
            XCTAssertNil(try rotating.value(forKey: "missing"))
            rotating.close()
            guard case .failure(let writer) = openResult(root: temporary.root, service: "tool", group: group, keySource: testKey(9).alsoOpening(testKey())) else {
                return XCTFail("a full open sealing with a key the check does not open succeeded")
            }
            XCTAssertTrue(writer.reason.contains(KeystoreError.notRotatedYetReason), "\(writer)")
        }
    }

    /// A namespace without a key check (written before checks existed) is the full open's:
    /// it stores the check once the key opens an item.
    func testANamespaceWithoutAKeyCheckNeedsAFullOpen() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())
        try await keystore.set(bytes("value"), forKey: "a")
        let path = keystore.namespace.databasePath
        keystore.close()
        try tamper(path) { connection throws(KeystoreError) in
            try connection.execute("DELETE FROM meta WHERE name = 'key_check'")
        }
        XCTAssertNil(try reader(temporary.root))
        try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey()).close()
        let single = try XCTUnwrap(try reader(temporary.root))
        defer { single.close() }
        XCTAssertEqual(string(try single.value(forKey: "a")), "value")
    }

    func testADatabaseOfAnotherServiceIsRefusedAsAFullOpenRefusesIt() async throws {
        let temporary = try TemporaryRoot()
        // The private database of "other" is a copy of "tool"'s; its last group is recorded.
        try await databaseOfToolLinkedAsOther(root: temporary.root)
        let error = assertThrows(KeystoreError.self, code: .corruptFormat) { try reader(temporary.root, service: "other") }
        guard case .failure(let full) = openResult(root: temporary.root, service: "other", keySource: testKey()) else {
            return XCTFail("a database of another service opened")
        }
        XCTAssertEqual(error?.reason, full.reason)
        XCTAssertEqual(error?.path, full.path)
    }

    /// Every file a full open checks, planted as a symbolic link, FIFO or directory: the same
    /// refusal, without hanging.
    func testPlantedFilesAreRefusedAsAFullOpenRefusesThem() throws {
        let (victim, plants) = try hostilePlants()
        defer { try? FileManager.default.removeItem(atPath: victim) }
        for (name, plant) in plants {
            for suffix in ["", "-wal", "-shm", "-journal", "key"] {
                let temporary = try TemporaryRoot()
                try SQLiteKeystore(root: temporary.root, service: "tool").close()
                let layout = try StoreLayout(root: temporary.root, service: "tool")
                let path = suffix == "key" ? layout.keyFilePath(.none) : layout.databasePath(.none) + suffix
                _ = unlink(path)
                XCTAssertEqual(plant(path), 0, "planting \(name) at \(path)")
                let root = temporary.root
                let result = withinTimeout(10) {
                    Result { () throws(KeystoreError) -> Bool in
                        let single = try SQLiteKeystore.SingleReader.open(root: root, service: "tool")
                        single?.close()
                        return single != nil
                    }
                }
                guard case .failure(let error)? = result else {
                    XCTFail("\(name) at '\(suffix)': not refused (\(String(describing: result)))")
                    continue
                }
                XCTAssertEqual(error.code, .insecurePermissions, "\(name) at '\(suffix)': \(error)")
                XCTAssertEqual(error.path, path, "\(name) at '\(suffix)'")
            }
        }
    }

    func testLoosePermissionsAreRefused() throws {
        let temporary = try TemporaryRoot()
        try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey()).close()
        let layout = try StoreLayout(root: temporary.root, service: "tool")
        XCTAssertEqual(chmod(layout.databasePath(.none), 0o644), 0)
        let error = assertThrows(KeystoreError.self, code: .insecurePermissions) { try reader(temporary.root) }
        XCTAssertEqual(error?.path, layout.databasePath(.none))
        XCTAssertEqual(chmod(layout.databasePath(.none), 0o600), 0)
        XCTAssertEqual(chmod(layout.userDirectory, 0o750), 0)
        assertThrows(KeystoreError.self, code: .insecurePermissions) { try reader(temporary.root) }
    }
}
