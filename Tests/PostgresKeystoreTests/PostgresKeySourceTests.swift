import BrokerTestSupport
import Foundation
import PostgresKeystore
import SecureStorage
import XCTest

/// Every instance of a fleet derives the same key: passphrase salts live in the database; an
/// explicit key file or the environment give the key directly.
final class PostgresKeySourceTests: PostgresTestCase, @unchecked Sendable {
    func testPassphraseInstancesShareTheSaltStoredPerGroup() async throws {
        let first = try await keystore(group: AccessGroup(name: "team"), keySource: .passphrase("correct horse battery staple"))
        try await first.set(Array("shared".utf8), forKey: "k")
        let second = try await keystore(group: AccessGroup(name: "team"), keySource: .passphrase("correct horse battery staple"))
        let value = try await second.value(forKey: "k")
        XCTAssertEqual(value, Array("shared".utf8), "a second instance derives the same key from the stored salt")

        let salts = try server.psqlValue("SELECT access_group || ':' || length(salt) || ':' || encode(substring(salt from 1 for 5), 'hex') FROM identity_broker_key_salts", database: database)
        XCTAssertEqual(salts, "team:21:a701110801", "SecureStorage's salt format: magic, version, N = 2^17, r = 8, p = 1, 16-byte salt")

        let error = await keystoreError { try await self.keystore(group: AccessGroup(name: "team"), keySource: .passphrase("wrong")) }
        XCTAssertEqual(error?.code, .invalidKey, "another passphrase is refused when it opens")
    }

    /// An empty passphrase stores no salt (its key would be anyone's who reads the table); a
    /// group whose salt an earlier release stored for one is still opened with it.
    func testAnEmptyPassphraseIsRefusedWhereNoSaltIsStored() async throws {
        let error = await keystoreError { try await self.keystore(group: AccessGroup(name: "fresh"), keySource: .passphrase("")) }
        XCTAssertEqual(error?.code, .invalidKey, String(describing: error))
        let stored = try server.psqlValue("SELECT count(*) FROM identity_broker_key_salts", database: database)
        XCTAssertEqual(stored, "0", "a salt was stored for an empty passphrase")

        try server.psql("""
            INSERT INTO identity_broker_key_salts (access_group, salt)
            VALUES ('earlier', decode('a701110801' || repeat('00', 16), 'hex'))
            """, database: database)
        let earlier = try await keystore(group: AccessGroup(name: "earlier"), keySource: .passphrase(""))
        try await earlier.set(Array("kept".utf8), forKey: "k")
        let value = try await earlier.value(forKey: "k")
        XCTAssertEqual(value, Array("kept".utf8))
    }

    /// Once its group's salt exists, a passphrase keystore opens and reads on a database
    /// that refuses writes (`default_transaction_read_only`): its open wrote the salt again
    /// every time, so such a database refused every passphrase open, reads included.
    func testAPassphraseKeystoreOpensAndReadsWhereWritesAreRefused() async throws {
        let writer = try await keystore(keySource: .passphrase("correct horse battery staple"))
        try await writer.set([1], forKey: "session.a")
        try server.psql("ALTER DATABASE \(database!) SET default_transaction_read_only = on")
        let reader = try await keystore(keySource: .passphrase("correct horse battery staple"))
        let value = try await reader.value(forKey: "session.a")
        XCTAssertEqual(value, [1])
    }

    func testKeyFileNeedsAnExplicitPath() async throws {
        let error = await keystoreError { try await self.keystore(keySource: .keyFile) }
        XCTAssertEqual(error?.code, .invalidKey)
        XCTAssertTrue(error?.reason.contains("keyFilePath") ?? false, "\(String(describing: error))")

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pg-key-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = "\(directory)/key"
        let missing = await keystoreError { try await self.keystore(keySource: .keyFile) { $0.keyFilePath = path } }
        XCTAssertEqual(missing?.code, .invalidKey)

        _ = FileManager.default.createFile(atPath: path, contents: Data(key), attributes: [.posixPermissions: 0o644])
        let loose = await keystoreError { try await self.keystore(keySource: .keyFile) { $0.keyFilePath = path } }
        XCTAssertEqual(loose?.code, .insecurePermissions)

        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        let fromFile = try await keystore(keySource: .keyFile) { $0.keyFilePath = path }
        try await fromFile.set([42], forKey: "k")
        let fromRaw = try await keystore(keySource: .raw(key))
        let value = try await fromRaw.value(forKey: "k")
        XCTAssertEqual(value, [42], "the key file holds the same key")
    }

    func testEnvironmentKey() async throws {
        let variable = "PG_KEYSTORE_TEST_KEY_\(UInt32.random(in: 0...UInt32.max))"
        setenv(variable, Data(key).base64EncodedString(), 1)
        defer { unsetenv(variable) }
        let keystore = try await keystore(keySource: .environment(variable: variable))
        try await keystore.set([1], forKey: "k")
        let raw = try await self.keystore(keySource: .raw(key))
        let value = try await raw.value(forKey: "k")
        XCTAssertEqual(value, [1])

        setenv(variable, "not base64", 1)
        let error = await keystoreError { try await self.keystore(keySource: .environment(variable: variable)) }
        XCTAssertEqual(error?.code, .invalidKey)
    }
}
